"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics, so that of several
operator replicas exactly one runs the handlers and a standby takes over when it goes.

The protocol (client-go's leaderelection, which controller-runtime uses): a candidate reads the Lease;
it may take it when there is none, when its holderIdentity is empty (released), or when the record has
not changed for leaseDurationSeconds *as measured by the candidate's own clock* since it first saw that
record (no clock comparison between machines). It writes itself in as holder through an update at the
resourceVersion it read, so of two candidates racing, one gets a conflict. The holder renews
(renewTime) every retry period; when no renewal succeeded for the renew deadline, it has lost the
lease and must stop acting before the lease expires for the others (renew deadline < lease duration).
On a clean stop the holder releases the Lease (holderIdentity empty, leaseDurationSeconds 1, as
client-go's ReleaseOnCancel), so a standby takes over at its next try instead of a lease duration later.

Why not the kubernetes client's own `kubernetes.leaderelection`: read in its 37.0 source, (1) its
candidates ignore the record's holderIdentity and leaseDurationSeconds and always wait their own lease
duration after a change, so a released Lease gives no quick takeover: SIGTERM would cost a whole lease
duration; (2) its acquire and renew loops are `while True` with no way to stop them, so neither a
standby nor a clean release (which must not race a renewal) can be done from outside; (3) its API calls
carry no timeout, so one hung request outlives the renew deadline unnoticed; (4) a bad duration calls
sys.exit from the constructor. What it gets right is small enough to keep here, as pure functions
(decide, claim, released, lost) tested as tables, and one thin loop (Elector) over lease_store.LeaseClient.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

log = logging.getLogger("graphtrain.operator.leader")
Obj = dict[str, Any]


@dataclass(frozen=True)
class Timing:
    """Seconds: how long a Lease holds unrenewed, how long a holder keeps trying to renew before it
    gives up, and how often candidates try (client-go's defaults are 15, 10, 2)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """Why these timings are unsafe (empty: they are fine)."""
        out = []
        if self.retry_period <= 0:
            out.append("--retry-period must be positive")
        if self.renew_deadline <= self.retry_period:
            out.append("--renew-deadline must be longer than --retry-period (a renewal needs tries)")
        if self.lease_duration <= self.renew_deadline:
            out.append(
                "--lease-duration must be longer than --renew-deadline (a holder must stop acting "
                "before the others may take the lease)"
            )
        return out

    @property
    def request_timeout(self) -> float:
        """Bound of one API call: a hung call may not eat the whole renew deadline."""
        return max(self.renew_deadline / 2, 0.5)


@dataclass(frozen=True)
class Record:
    """The election record a Lease's spec holds."""

    holder: str  # "" when released
    lease_duration_seconds: int
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0


def record_of(lease: Obj | None) -> Record | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return Record(
        holder=spec.get("holderIdentity") or "",
        lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def spec_of(record: Record) -> Obj:
    spec: Obj = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.lease_duration_seconds,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time:
        spec["acquireTime"] = record.acquire_time
    if record.renew_time:
        spec["renewTime"] = record.renew_time
    return spec


Decision = Literal["create", "renew", "take", "wait"]


def decide(current: Record | None, seen_at: float, now: float, me: str) -> Decision:
    """What candidate `me` does with the Lease it read (`current`, unchanged since `seen_at` on its own
    monotonic clock): create it, renew its own, take a released or expired one, or wait."""
    if current is None:
        return "create"
    if current.holder == me:
        return "renew"
    if not current.holder or now - seen_at >= current.lease_duration_seconds:
        return "take"
    return "wait"


def claim(current: Record | None, me: str, now: str, lease_duration: float) -> Record:
    """The record `me` writes to create, renew or take the Lease at time `now` (RFC 3339)."""
    duration = math.ceil(lease_duration)
    if current is not None and current.holder == me:
        return Record(me, duration, current.acquire_time or now, now, current.transitions)
    transitions = current.transitions + 1 if current is not None else 0
    return Record(me, duration, now, now, transitions)


def released(current: Record, now: str) -> Record:
    """The record a holder writes on a clean stop: nobody holds it, and it expires at once."""
    return Record("", 1, now, now, current.transitions)


def lost(last_renewal: float, now: float, timing: Timing) -> bool:
    """A holder that has not renewed for the renew deadline has lost the lease."""
    return now - last_renewal >= timing.renew_deadline


def may_act(leading: bool, last_renewal: float | None, now: float, timing: Timing) -> bool:
    """The fence before a handler's reads and writes: this replica says it leads AND its last successful
    renewal (taken when that attempt began, on its own monotonic clock) is younger than the renew
    deadline. A leader resumed after a pause (SIGSTOP, a long GC, a frozen VM) fails it at once, before
    its election thread has even noticed that a standby took the Lease meanwhile; no API call."""
    return leading and last_renewal is not None and not lost(last_renewal, now, timing)


REFUSAL_LOG_SECONDS = 60.0  # a repeated, unchanged refusal of the Lease is logged this often


def refused(status: int | None) -> bool:
    """An answer of the API server that retrying will not change (403 no RBAC, 422 an invalid lease
    name, 401, 404 no such namespace), as against a timeout, a 5xx or a 429 that may pass."""
    return status is not None and 400 <= status < 500 and status not in (408, 409, 429)


def worth_logging(message: str, last: tuple[str, float] | None, now: float) -> bool:
    """Log a failure to reach the Lease now? A new message yes; the same one once per REFUSAL_LOG_SECONDS
    (a standby retries every retry period, and its log is read by people)."""
    return last is None or last[0] != message or now - last[1] >= REFUSAL_LOG_SECONDS


def micro_time(t: dt.datetime) -> str:
    """A Kubernetes MicroTime."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseStore(Protocol):
    """What the Elector needs of the API (lease_store.LeaseClient); None from a write: a conflict."""

    def get(self) -> Obj | None: ...
    def create(self, spec: Obj) -> Obj | None: ...
    def update(self, lease: Obj, spec: Obj) -> Obj | None: ...


class Elector:
    """Campaigns for the Lease on its own thread (start()), then renews it; `leading` is set while it
    holds it. When renewals fail for the renew deadline, `lost` is set and `on_lost` called (the caller
    stops its work and exits); stop() ends the campaign, and release() gives up a held Lease."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        timing: Timing,
        on_lost: Callable[[], None] = lambda: None,
        unavailable: tuple[type[Exception], ...] = (),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ):
        self.store, self.identity, self.timing = store, identity, timing
        self.on_lost, self.unavailable = on_lost, unavailable
        self.clock, self.wall = clock, wall
        self.leading = threading.Event()
        self.lost = threading.Event()
        # the last attempt read (or wrote) the Lease: readiness of a standby. A refusal (403, 422)
        # clears it; a timeout or 5xx leaves it as it was (a blip is no reason to flap)
        self.reached = threading.Event()
        self.problem = ""  # why the last attempt failed ("" when it reached the Lease)
        self._logged: tuple[str, float] | None = None  # the last failure logged, and when
        self.crashed = False  # the campaign died of a bug (health)
        self._stop = threading.Event()
        self._observed: Record | None = None
        self._seen_at = 0.0
        self._holder = ""  # the last holder logged, to log changes once
        self.last_renewal: float | None = None  # clock() when the last successful create/renew/take began
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the campaign and wait for its thread (at most one API call's timeout)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timing.request_timeout + 1)

    def may_act(self) -> bool:
        """May the handlers act now (see may_act())."""
        return may_act(self.leading.is_set(), self.last_renewal, self.clock(), self.timing)

    def attempt(self) -> bool:
        """One try to create, renew or take the Lease; True if this candidate holds it now."""
        lease = self.store.get()
        current, now = record_of(lease), self.clock()
        if current != self._observed:
            self._observed, self._seen_at = current, now
            self._log_holder(current)
        decision = decide(current, self._seen_at, now, self.identity)
        if decision == "wait":
            return False
        new = claim(current, self.identity, micro_time(self.wall()), self.timing.lease_duration)
        written = self.store.create(spec_of(new)) if lease is None else self.store.update(lease, spec_of(new))
        if written is None:  # another candidate wrote first
            return False
        self._observed, self._seen_at = record_of(written), self.clock()
        if decision != "renew":
            log.info("%s acquired the lease (%s)", self.identity, "created" if lease is None else decision)
        return True

    def _try(self) -> bool:
        try:
            held = self.attempt()
        except self.unavailable as exc:
            status = getattr(exc, "status", None)
            if refused(status):
                self.reached.clear()
            message = self.problem = str(exc)
            if worth_logging(message, self._logged, self.clock()):
                self._logged = (message, self.clock())
                log.warning("leader election: %s", message)
            return False
        if self._logged is not None:
            log.info("leader election: the lease is reachable again")
            self._logged = None
        self.problem = ""
        self.reached.set()
        return held

    def _run(self) -> None:
        try:
            self._campaign()
        except Exception:  # a bug, not the API: stop acting as if the lease were lost
            log.exception("leader election failed")
            self.crashed = True
            self._lose()

    def _campaign(self) -> None:
        log.info("%s campaigns for the lease", self.identity)
        while not self._stop.is_set():  # standby
            began = self.clock()
            if self._try():
                self.last_renewal = began
                break
            self._stop.wait(self.timing.retry_period)
        else:
            return
        self.leading.set()
        while not self._stop.wait(self.timing.retry_period):  # holder
            began = self.clock()
            if self._try():
                self.last_renewal = began
                continue
            last_renewal = self.last_renewal if self.last_renewal is not None else began
            holder = self._observed.holder if self._observed is not None else ""
            if holder not in ("", self.identity):
                log.error("%s lost the lease: %s holds it now", self.identity, holder)
            elif lost(last_renewal, self.clock(), self.timing):
                log.error(
                    "%s lost the lease: no renewal for %.1f s (renew deadline %.1f s)",
                    self.identity,
                    self.clock() - last_renewal,
                    self.timing.renew_deadline,
                )
            else:
                continue
            self._lose()
            return

    def _lose(self) -> None:
        was_leading = self.leading.is_set()
        self.leading.clear()
        self.lost.set()
        if was_leading:
            self.on_lost()

    def release(self) -> bool:
        """After stop(): give up the Lease if this candidate still holds it, so a standby takes over at
        its next try. True if released."""
        if not self.leading.is_set() or self.lost.is_set():
            return False
        self.leading.clear()
        try:
            lease = self.store.get()
            current = record_of(lease)
            if lease is None or current is None or current.holder != self.identity:
                return False
            if self.store.update(lease, spec_of(released(current, micro_time(self.wall())))) is None:
                return False
        except self.unavailable as exc:
            log.warning("could not release the lease: %s", exc)
            return False
        log.info("%s released the lease", self.identity)
        return True

    def _log_holder(self, record: Record | None) -> None:
        holder = record.holder if record is not None else ""
        if holder and holder != self._holder and holder != self.identity:
            log.info("the lease is held by %s", holder)
        self._holder = holder
