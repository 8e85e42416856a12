"""The reconciles the watches ask for, run by a fixed number of worker threads, each training at most
once at a time and its requests coalesced, as controller-runtime's work queue does.

Why: every child event used to run a whole reconcile of its training on kopf's executor, one per
event. Creating one training's eight children brings about a dozen events within a second; with 1,000
trainings that was tens of thousands of reconciles, each waiting on the training's lock and then
observing what the previous one had just seen. Here a request for a training already waiting is
dropped (the waiting reconcile has not observed yet, so it sees the change that asked), a request for
one running marks it to run once more after, and a failed reconcile is tried again after a delay that
doubles up to a limit (not at once: a failing API server is not hammered). Periodic requests (the
timer's) wait in a second lane, taken only when no change waits: with 1,000 trainings the timer alone
asks for 67 reconciles a second, and a new training's or a changed child's must not queue behind them.

No API call and no kopf here: `work(key)` is given.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger("graphtrain.operator")
K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """`workers` threads running work(key) for the keys added; `retry_base`..`retry_max` seconds
    between the tries of a key whose work raised."""

    def __init__(
        self,
        work: Callable[[K], object],
        workers: int = 4,
        retry_base: float = 0.5,
        retry_max: float = 15.0,
        name: str = "reconcile",
        periodic_work: Callable[[K], object] | None = None,
    ):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.work, self.workers, self.name = work, workers, name
        self.periodic_work = periodic_work or work  # a key taken from the periodic lane: no change asked
        self.retry_base, self.retry_max = retry_base, retry_max
        self._cond = threading.Condition()
        self._ready: deque[K] = deque()
        self._idle: deque[K] = deque()  # periodic requests: taken when _ready is empty
        self._queued: set[K] = set()  # in _ready, _idle or due later
        self._running: set[K] = set()
        self._again: set[K] = set()  # asked for while running: run once more after
        self._later: list[tuple[float, int, K]] = []  # (due, sequence, key)
        self._failures: dict[K, int] = {}
        self._seq = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.added = self.coalesced = self.done = self.failed = 0
        self.busy_peak = 0  # the most keys that ran at once (never above `workers`)

    def start(self) -> WorkQueue[K]:
        for i in range(self.workers):
            thread = threading.Thread(target=self._worker, name=f"{self.name}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """No new work starts; waits up to `timeout` s for the running ones."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))

    def add(self, key: K, after: float = 0.0, periodic: bool = False) -> None:
        """Ask for work(key), now or in `after` seconds; `periodic`: after every change that waits (a
        request for a key already queued is merged into it, at the earlier time and the higher lane)."""
        with self._cond:
            self.added += 1
            if key in self._running:
                if not periodic:  # a periodic request is answered by the run under way
                    self._again.add(key)
                self.coalesced += 1
                return
            if key in self._queued:
                self.coalesced += 1
                if after > 0 or periodic or key in self._ready:
                    return
                if key in self._idle:  # a change: out of the periodic lane
                    self._idle.remove(key)
                self._later = [e for e in self._later if e[2] != key]  # due now instead
                heapq.heapify(self._later)
            self._queued.add(key)
            if after > 0:
                self._seq += 1
                heapq.heappush(self._later, (time.monotonic() + after, self._seq, key))
            elif periodic:
                self._idle.append(key)
            else:
                self._ready.append(key)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queued) + len(self._running)

    def idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or running (up to `timeout` s)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._queued or self._running:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def _take(self) -> tuple[K, bool] | None:
        """The next key, and whether only the periodic lane asked for it."""
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                while self._later and self._later[0][0] <= now:
                    self._ready.append(heapq.heappop(self._later)[2])
                if self._ready or self._idle:
                    periodic = not self._ready
                    key = self._idle.popleft() if periodic else self._ready.popleft()
                    self._queued.discard(key)
                    self._running.add(key)
                    self.busy_peak = max(self.busy_peak, len(self._running))
                    return key, periodic
                self._cond.wait(self._later[0][0] - now if self._later else None)
            return None

    def _worker(self) -> None:
        while (taken := self._take()) is not None:
            key, periodic = taken
            ok = True
            try:
                (self.periodic_work if periodic else self.work)(key)
            except Exception:
                ok = False
                log.exception("%s of %s failed", self.name, key)
            with self._cond:
                self._running.discard(key)
                if ok:
                    self.done += 1
                    self._failures.pop(key, None)
                    delay = 0.0
                else:
                    self.failed += 1
                    n = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(self.retry_max, self.retry_base * 2 ** (n - 1))
                again = key in self._again or not ok
                self._again.discard(key)
                self._cond.notify_all()
            if again:
                self.add(key, after=delay)
