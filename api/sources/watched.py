"""One collection of the API server's objects kept current by list+watch, as an informer's store.

Why: the cached source used to list every collection whole each cache_ttl while requests came (every
GraphTraining, every progress ConfigMap with its history, every GraphTraining event: at 300 trainings
120 event pages in 30 s and the API's RSS 190 -> 372 MB). Now each collection is listed once, then
watched from the list's resourceVersion: in steady state the API server sends only changes.

A daemon thread per collection lists (paging), then watches for `period` seconds at a time (the server
ends each watch; the next resumes where it ended, a WATCH, not a LIST). A stream that breaks once begun
(Broken: cut, reset, timed out) is watched again from its last event, as client-go's reflector does.
It lists again only after 410 Gone (at once), after another failure (a watch refused, an unreachable
server: after a pause of 0.5 s doubling to 30 s, back to 0.5 s once a watch has worked; a request that
finds the store too old cuts the pause short), or when a collection cut at its bound has come back
under it. Why each list after the first was made is kept (`relisted`). What a watch is, ends with and
pauses after is contract/watch.py's, shared with the operator's child watches (operator/child_watch.py:
the API may not import the operator, .importlinter); this store keeps no tombstones (the API writes
nothing) but counts its objects.

Staleness: `current_at` is the last moment the store was known to hold every change: the start of
its last list, each event received, the normal end of each watch. A healthy watch renews it at least
every `period` seconds even when nothing changes; a broken one stops renewing it, and readers who need
the store no older than a bound wait for it (current()).

The bound: at most `bound` objects are kept. A list counts every object (reading past the bound
without keeping it); more than `bound` and the collection is `truncated`: it keeps nothing, its readers
ask the API server directly, and its watch goes on counting ADDED and DELETED until the count is back
to 90 % of the bound, when it lists again.

No `kubernetes` import (.importlinter: only api/sources/kubernetes.py calls the API): the list and watch
calls are passed in. Stored objects are shared, never changed: readers must not change them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from graphtrain.api.sources.base import SourceUnavailable
from graphtrain.contract.watch import LONGEST_PAUSE, PAUSE, Broken, Gone, check, next_pause

__all__ = ["LONGEST_PAUSE", "PAUSE", "Broken", "Collection", "Gone", "Lister", "Watcher", "next_pause"]

log = logging.getLogger("graphtrain.api")
Obj = dict[str, Any]
Key = tuple[str, str]
Lister = Callable[[str | None], Obj]  # continue token (None: the first page) -> one page of the list
# (resourceVersion, seconds, hold) -> the watch's events; hold(close) registers how to cut it short
Watcher = Callable[[str, int, Callable[[Callable[[], None]], None]], Iterator[Obj]]

MAX_PAGES = 100_000  # a list's pages (a bound on the loop; 50 million objects at 500 a page)


class Collection:
    """One kind's objects matching one selector, grouped by `index(obj)` (None: counted, not kept),
    each stored as `keep(obj)`. Every group has a version, new whenever the group changes (never
    reused), so answers built from a group can be kept until it changes."""

    def __init__(
        self,
        name: str,
        lister: Lister,
        watcher: Watcher,
        *,
        index: Callable[[Obj], Key | None],
        keep: Callable[[Obj], Obj] = lambda obj: obj,
        bound: int,
        period: int,
    ):
        self.name, self.bound, self.period = name, bound, period
        self._list, self._watch, self._index, self._keep = lister, watcher, index, keep
        self._cond = threading.Condition()
        self._groups: dict[Key, dict[str, Obj]] = {}
        self._where: dict[str, Key] = {}  # uid -> its group
        self._versions: dict[Key, int] = {}
        self._ticks = itertools.count(1)
        self.count = 0  # objects listed and watched, kept or not
        self.truncated = False
        self.current_at: float | None = None  # time.monotonic() when last known to hold every change
        self.failed: tuple[float, str] | None = None  # the last failure: when, what
        self.lists = 0  # LISTs begun: the first, then one per relist
        self.relisted: list[str] = []  # why each list after the first was made (the last 100)
        self.changes = 0  # how many times the store changed (a list, an event that changed it)
        self._refill = False  # truncated, now back under the bound: list again
        self._watched = False  # a watch worked (an event, or its normal end) since the last list
        self._resume: str | None = None  # the last event's resourceVersion: where a broken watch resumes
        self._stop, self._wake = threading.Event(), threading.Event()
        self._cut: Callable[[], None] | None = None  # closes the watch in progress
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------------- life

    def start(self) -> None:
        with self._cond:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=f"api-watch-{self.name}", daemon=True)
                self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread: its watch is cut, not waited out; join it (up to `timeout` s)."""
        self._stop.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()  # readers waiting in current() are refused at once
        cut = self._cut
        if cut is not None:
            try:
                cut()
            except Exception:  # closing a response another thread reads: best effort
                log.debug("cutting the watch of %s", self.name, exc_info=True)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ----------------------------------------------------------------------------------- reading

    def current(self, max_age: float, patience: float) -> None:
        """Return once the store is known to hold every change up to `max_age` s ago (at once, in
        steady state). Else wait for it: a thread pausing after a failure tries again now.

        Raises:
            SourceUnavailable: its next attempt failed, `patience` s passed, or it is closed.
        """
        self.start()
        asked = time.monotonic()
        deadline = asked + patience
        with self._cond:
            while True:
                now = time.monotonic()
                if self.current_at is not None and now - self.current_at <= max_age:
                    return
                if self._stop.is_set():
                    raise SourceUnavailable(f"the watch of {self.name} is closed (shutting down)")
                if self.failed is not None and self.failed[0] >= asked:
                    raise SourceUnavailable(f"the watch of {self.name} failed: {self.failed[1]}")
                if now >= deadline:
                    age = "never listed" if self.current_at is None else f"{now - self.current_at:.0f} s old"
                    raise SourceUnavailable(f"the {self.name} known here are {age}")
                self._wake.set()
                self._cond.wait(min(deadline - now, 1.0))

    def group(self, key: Key) -> list[Obj]:
        with self._cond:
            return list(self._groups.get(key, {}).values())

    def version(self, key: Key) -> int:
        """The group's version (0: no such group)."""
        with self._cond:
            return self._versions.get(key, 0)

    def groups(self) -> list[tuple[Key, int, list[Obj]]]:
        """Every group: its key, version and objects."""
        with self._cond:
            return [(k, self._versions.get(k, 0), list(g.values())) for k, g in self._groups.items()]

    def __len__(self) -> int:
        with self._cond:
            return len(self._where)

    # ---------------------------------------------------------------------------------- the thread

    def _run(self) -> None:
        pause = 0.0
        while not self._stop.is_set():
            if pause:
                self._wake.wait(pause)
                self._wake.clear()
                failed = self.failed[0] if self.failed else 0.0  # a reader's wake: not before PAUSE
                if self._stop.wait(max(0.0, failed + PAUSE - time.monotonic())):
                    return
            try:
                if self._resume is None:
                    self._watched = False
                    self._resume = self._relist()
                while not self._stop.is_set() and not self._refill:
                    self._resume = self._follow(self._resume)
                    pause = 0.0
                if self._refill:  # back under the bound: list again (else closed)
                    self._resume = None
                    self._relisting("back under the bound")
            except Gone:
                log.info("the watch of %s expired (410 Gone): listing again", self.name)
                self._resume, pause = None, 0.0
                self._relisting("410 Gone")
            except Exception as exc:
                if self._stop.is_set():
                    return
                broken = isinstance(exc, Broken)
                if not broken:
                    self._resume = None
                    self._relisting(f"failed: {type(exc).__name__}")
                pause = next_pause(pause, self._watched)
                self._watched = False  # a watch that breaks again before an event backs off further
                what = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "the watch of %s %s (%s): %s in %.1f s, or sooner if a request needs it",
                    self.name,
                    "broke" if broken else "failed",
                    what,
                    "watching again from where it broke" if broken else "listing again",
                    pause,
                )
                with self._cond:
                    self.failed = (time.monotonic(), what)
                    self._cond.notify_all()

    def _relisting(self, why: str) -> None:
        self.relisted = [*self.relisted[-99:], why]

    def _relist(self) -> str:
        started = time.monotonic()
        with self._cond:
            self.lists += 1
            self._refill = False
        groups: dict[Key, dict[str, Obj]] = {}
        where: dict[str, Key] = {}
        count, token, version = 0, None, ""
        for _ in range(MAX_PAGES):
            body = self._list(token)
            for obj in body.get("items") or []:
                count += 1
                if count <= self.bound and (key := self._index(obj)) is not None:
                    uid = str(obj["metadata"]["uid"])
                    groups.setdefault(key, {})[uid] = self._keep(obj)
                    where[uid] = key
            meta = body.get("metadata") or {}
            version = meta.get("resourceVersion") or version
            token = meta.get("continue")
            if not token:
                break
        truncated = count > self.bound
        if truncated:
            log.warning(
                "%d %s, over the bound of %d: read directly until fewer", count, self.name, self.bound
            )
            groups, where = {}, {}
        with self._cond:
            changed = set(self._groups) | set(groups)
            self._groups, self._where = groups, where
            self._versions = {k: next(self._ticks) for k in groups}
            for key in changed - set(groups):
                self._versions.pop(key, None)
            self.count, self.truncated = count, truncated
            self.current_at, self.failed = started, None
            self.changes += 1
            self._cond.notify_all()
        return version

    def _follow(self, version: str) -> str:
        """One watch from `version`, until the server ends it; the version to resume from."""
        for event in self._watch(version, self.period, self._hold):
            kind, obj = check(event).get("type"), event.get("object") or {}
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            self._apply(str(kind), obj)
            self._resume = version  # applied: a break after it resumes here
            if self._stop.is_set() or self._refill:
                break
        self._cut = None
        with self._cond:
            self.current_at = time.monotonic()
            self._watched = True
            self._cond.notify_all()
        return version

    def _hold(self, cut: Callable[[], None]) -> None:
        self._cut = cut
        if self._stop.is_set():
            cut()

    def _apply(self, kind: str, obj: Obj) -> None:
        with self._cond:
            self.current_at = time.monotonic()
            self._watched = True
            if kind not in ("ADDED", "MODIFIED", "DELETED"):  # a BOOKMARK: only the version
                return
            self.count += {"ADDED": 1, "DELETED": -1}.get(kind, 0)
            if self.truncated:
                self._refill = self.count <= self.bound * 9 // 10
                return
            if self.count > self.bound:
                log.warning(
                    "%d %s, over the bound of %d: read directly until fewer",
                    self.count,
                    self.name,
                    self.bound,
                )
                self.truncated = True
                self._groups, self._where, self._versions = {}, {}, {}
                self.changes += 1
                self._cond.notify_all()
                return
            uid = str(obj["metadata"].get("uid"))
            self.changes += 1
            self._remove(uid)
            key = self._index(obj) if kind != "DELETED" else None
            if key is not None:
                self._groups.setdefault(key, {})[uid] = self._keep(obj)
                self._where[uid] = key
                self._versions[key] = next(self._ticks)
            self._cond.notify_all()

    def _remove(self, uid: str) -> None:
        key = self._where.pop(uid, None)
        if key is None:
            return
        group = self._groups[key]
        group.pop(uid, None)
        if group:
            self._versions[key] = next(self._ticks)
        else:
            del self._groups[key]
            self._versions.pop(key, None)
