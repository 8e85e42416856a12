"""Leader election: the pure rules (decide, claim, released, lost, timings) as tables, then Electors
campaigning on an in-memory Lease with the API server's optimistic concurrency (resourceVersion).
tests/operator/test_leader_election.py runs two real operator processes against a real API server."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest

from graphtrain.operator import leader

R = leader.Record


@pytest.mark.parametrize(
    ("current", "seen_at", "now", "expected"),
    [
        pytest.param(None, 0, 0, "create", id="no-lease"),
        pytest.param(R("me", 15), 0, 100, "renew", id="mine"),
        pytest.param(R("", 1), 0, 0, "take", id="released"),
        pytest.param(R("other", 15), 0, 14.9, "wait", id="held"),
        pytest.param(R("other", 15), 0, 15, "take", id="expired-on-my-clock"),
        pytest.param(R("other", 15), 100, 110, "wait", id="seen-late-counts-from-then"),
    ],
)
def test_decide(current: leader.Record | None, seen_at: float, now: float, expected: str) -> None:
    assert leader.decide(current, seen_at, now, "me") == expected


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        pytest.param(None, R("me", 4, "T1", "T1", 0), id="create"),
        pytest.param(R("me", 4, "T0", "T0", 3), R("me", 4, "T0", "T1", 3), id="renew-keeps-acquire-time"),
        pytest.param(R("other", 15, "T0", "T0", 3), R("me", 4, "T1", "T1", 4), id="take-counts-a-transition"),
        pytest.param(R("", 1, "T0", "T0", 3), R("me", 4, "T1", "T1", 4), id="take-released"),
    ],
)
def test_claim(current: leader.Record | None, expected: leader.Record) -> None:
    assert leader.claim(current, "me", "T1", 3.5) == expected


def test_released_and_lost() -> None:
    assert leader.released(R("me", 15, "T0", "T5", 2), "T9") == R("", 1, "T9", "T9", 2)
    timing = leader.Timing(15, 10, 2)
    assert not leader.lost(100, 109.9, timing) and leader.lost(100, 110, timing)


@pytest.mark.parametrize(
    ("leading", "last_renewal", "now", "expected"),
    [
        pytest.param(True, 100.0, 109.9, True, id="renewed-within-the-deadline"),
        pytest.param(True, 100.0, 110.0, False, id="renewal-as-old-as-the-deadline"),
        pytest.param(True, 100.0, 117.0, False, id="resumed-after-a-pause"),
        pytest.param(False, 100.0, 100.5, False, id="not-leading"),
        pytest.param(True, None, 0.0, False, id="never-renewed"),
    ],
)
def test_may_act(leading: bool, last_renewal: float | None, now: float, expected: bool) -> None:
    assert leader.may_act(leading, last_renewal, now, leader.Timing(15, 10, 2)) is expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (403, True),
        (422, True),
        (401, True),
        (404, True),
        (None, False),
        (409, False),
        (429, False),
        (500, False),
    ],
)
def test_refused(status: int | None, expected: bool) -> None:
    assert leader.refused(status) is expected


def test_worth_logging() -> None:
    assert leader.worth_logging("403 forbidden", None, 0)
    assert not leader.worth_logging(
        "403 forbidden", ("403 forbidden", 100.0), 100 + leader.REFUSAL_LOG_SECONDS - 1
    )
    assert leader.worth_logging("403 forbidden", ("403 forbidden", 100.0), 100 + leader.REFUSAL_LOG_SECONDS)
    assert leader.worth_logging("422 invalid", ("403 forbidden", 100.0), 101)


def test_record_round_trip() -> None:
    record = R("me", 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:02.000000Z", 3)
    assert leader.record_of({"spec": leader.spec_of(record)}) == record
    assert leader.record_of(None) is None
    assert leader.record_of({"spec": {}}) == R("", 0, None, None, 0)


@pytest.mark.parametrize(
    ("timing", "problems"),
    [
        pytest.param(leader.Timing(15, 10, 2), 0, id="client-go-defaults"),
        pytest.param(leader.Timing(4, 3, 1), 0, id="fast"),
        pytest.param(leader.Timing(10, 10, 2), 1, id="lease-not-longer-than-deadline"),
        pytest.param(leader.Timing(15, 2, 2), 1, id="deadline-not-longer-than-retry"),
        pytest.param(leader.Timing(15, 10, 0), 1, id="no-retry-period"),
    ],
)
def test_timing(timing: leader.Timing, problems: int) -> None:
    assert len(timing.problems()) == problems


# ------------------------------------------------------------------------------ Electors in memory


class Unavailable(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class Lease:
    """One Lease as the API server keeps it: a write at a stale resourceVersion is a conflict."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.version = 0

    def view(self) -> Store:
        return Store(self)


class Store:
    """A candidate's connection to the Lease; `broken` makes every call fail as an unreachable API."""

    def __init__(self, lease: Lease):
        self.lease, self.broken = lease, False
        self.refusal: tuple[int, str] | None = None  # (status, message) every call gets

    def _check(self) -> None:
        if self.broken:
            raise Unavailable("the API server does not answer")
        if self.refusal is not None:
            raise Unavailable(self.refusal[1], self.refusal[0])

    def get(self) -> dict[str, Any] | None:
        self._check()
        with self.lease.lock:
            return copy.deepcopy(self.lease.obj)

    def create(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        self._check()
        with self.lease.lock:
            if self.lease.obj is not None:
                return None
            self.lease.version += 1
            self.lease.obj = {"metadata": {"resourceVersion": str(self.lease.version)}, "spec": spec}
            return copy.deepcopy(self.lease.obj)

    def update(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
        self._check()
        with self.lease.lock:
            assert self.lease.obj is not None
            if lease["metadata"]["resourceVersion"] != self.lease.obj["metadata"]["resourceVersion"]:
                return None
            self.lease.version += 1
            self.lease.obj = {"metadata": {"resourceVersion": str(self.lease.version)}, "spec": spec}
            return copy.deepcopy(self.lease.obj)

    def holder(self) -> str:
        with self.lease.lock:
            return ((self.lease.obj or {}).get("spec") or {}).get("holderIdentity", "")


FAST = leader.Timing(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)


def elector(lease: Lease, name: str, **kw: Any) -> leader.Elector:
    return leader.Elector(lease.view(), name, FAST, unavailable=(Unavailable,), **kw)


def wait(event: threading.Event, seconds: float = 10) -> float:
    """Seconds until `event` is set (fails after `seconds`)."""
    start = time.monotonic()
    assert event.wait(seconds), f"not set within {seconds} s"
    return time.monotonic() - start


@pytest.fixture
def electors() -> Any:
    made: list[leader.Elector] = []

    def make(lease: Lease, name: str, **kw: Any) -> leader.Elector:
        e = elector(lease, name, **kw)
        made.append(e)
        e.start()
        return e

    yield make
    for e in made:
        e.stop()


def leader_and_standby(electors: Any, lease: Lease) -> tuple[leader.Elector, leader.Elector]:
    """ "a" leading, then "b" campaigning (it has read the Lease once)."""
    a = electors(lease, "a")
    wait(a.leading)
    b = electors(lease, "b")
    wait(b.reached)
    return a, b


def test_one_leads_and_a_release_hands_over_at_the_next_try(electors: Any) -> None:
    lease = Lease()
    a, b = leader_and_standby(electors, lease)
    time.sleep(0.5)  # several tries: b stays standby while a renews
    assert not b.leading.is_set() and lease.view().holder() == "a"
    a.stop()
    assert a.release() and lease.view().holder() == ""
    took = wait(b.leading)
    assert took < FAST.lease_duration, f"a released lease took {took:.2f} s, as long as an expired one"
    assert lease.view().holder() == "b" and leader.record_of(lease.obj).transitions == 1


def test_a_holder_that_stops_renewing_is_replaced_after_the_lease_duration(electors: Any) -> None:
    lease = Lease()
    a, b = leader_and_standby(electors, lease)
    a.stop()  # killed: no release
    took = wait(b.leading)
    assert FAST.lease_duration * 0.8 <= took <= FAST.lease_duration + 1.0, took


def test_a_holder_cut_off_from_the_api_loses_the_lease_before_it_expires(electors: Any) -> None:
    lease = Lease()
    lost = threading.Event()
    a = electors(lease, "a", on_lost=lost.set)
    wait(a.leading)
    a.store.broken = True  # type: ignore[attr-defined]
    gave_up = wait(lost)
    assert a.lost.is_set() and not a.leading.is_set()
    assert gave_up < FAST.lease_duration, "it must stop acting before the others may take the lease"
    assert not a.release()  # nothing to give back


def test_a_holder_resumed_after_a_pause_may_not_act_before_its_thread_notices(electors: Any) -> None:
    lease = Lease()
    skew = [0.0]
    a = electors(lease, "a", clock=lambda: time.monotonic() + skew[0])
    wait(a.leading)
    assert a.may_act()
    a.stop()  # the whole process paused: no renewal, no release, `leading` still set
    skew[0] = FAST.renew_deadline + 0.1  # ... and resumed that much later
    assert a.leading.is_set() and not a.may_act()
    assert not elector(lease, "b").may_act()  # a standby never may


def test_a_holder_whose_lease_was_taken_stops_at_once(electors: Any) -> None:
    lease = Lease()
    lost = threading.Event()
    a = electors(lease, "a", on_lost=lost.set)
    wait(a.leading)
    with lease.lock:  # someone else wrote itself in (a hand edit, a split brain)
        assert lease.obj is not None
        lease.obj = {
            "metadata": {"resourceVersion": "x"},
            "spec": {**lease.obj["spec"], "holderIdentity": "z"},
        }
    assert wait(lost) < FAST.renew_deadline


def test_of_candidates_racing_exactly_one_leads(electors: Any) -> None:
    lease = Lease()
    many = [electors(lease, f"c{i}") for i in range(6)]
    deadline = time.monotonic() + 10
    while not any(e.leading.is_set() for e in many):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.5)
    assert [e.identity for e in many if e.leading.is_set()] == [lease.view().holder()]


def test_a_standby_stops_when_asked() -> None:
    lease = Lease()
    a, b = elector(lease, "a"), elector(lease, "b")
    a.start()
    wait(a.leading)
    b.start()
    wait(b.reached)
    start = time.monotonic()
    b.stop()
    assert time.monotonic() - start < 2 and not b.release()
    a.stop()
    assert a.release()


@pytest.mark.parametrize("status", [403, 422])
def test_a_standby_refused_the_lease_is_not_ready_and_says_why_once(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    lease = Lease()
    b = elector(lease, "b")
    message = f'get lease ns/Bad_Name: {status} leases.coordination.k8s.io "Bad_Name" is refused'
    b.store.refusal = (status, message)  # type: ignore[attr-defined]
    with caplog.at_level("WARNING", logger="graphtrain.operator.leader"):
        b.start()
        time.sleep(FAST.retry_period * 8)  # several tries
        assert not b.reached.is_set() and b.problem == message
        assert [r.getMessage() for r in caplog.records] == [f"leader election: {message}"]  # once
        b.store.refusal = None  # type: ignore[attr-defined]
        wait(b.leading)  # no lease: it creates it
        assert b.reached.is_set() and b.problem == ""
    b.stop()


def test_a_blip_does_not_make_a_standby_unready(electors: Any) -> None:
    lease = Lease()
    a, b = leader_and_standby(electors, lease)
    b.store.broken = True  # type: ignore[attr-defined]
    time.sleep(FAST.retry_period * 3)
    assert b.reached.is_set() and "does not answer" in b.problem
