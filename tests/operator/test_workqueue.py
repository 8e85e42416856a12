"""The work queue (operator/workqueue.py): bounded concurrency, one run of a key at a time, requests
coalesced, failures tried again after a growing delay. Work functions block on events, not on
sleeps, so each outcome is decided by the test, not by timing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from graphtrain.operator.workqueue import WorkQueue

pytestmark = pytest.mark.timeout(60)


class Gate:
    """work(key): records the key, then waits until the test opens the gate."""

    def __init__(self) -> None:
        self.lock, self.open = threading.Lock(), threading.Event()
        self.runs: list[str] = []
        self.now: set[str] = set()
        self.peak = 0
        self.entered = threading.Semaphore(0)
        self.overlap = False

    def __call__(self, key: str) -> None:
        with self.lock:
            self.overlap |= key in self.now
            self.now.add(key)
            self.runs.append(key)
            self.peak = max(self.peak, len(self.now))
        self.entered.release()
        assert self.open.wait(30)
        with self.lock:
            self.now.discard(key)


@contextmanager
def gated(workers: int) -> Iterator[tuple[Gate, WorkQueue]]:
    """A queue whose work waits on a gate, opened and stopped however the test ends."""
    gate = Gate()
    q = WorkQueue(gate, workers=workers).start()
    try:
        yield gate, q
    finally:
        gate.open.set()
        q.stop()


def test_never_more_than_workers_at_once_and_each_key_once_at_a_time() -> None:
    with gated(3) as (gate, q):
        for i in range(20):
            q.add(f"k{i}")
        for _ in range(3):
            assert gate.entered.acquire(timeout=10)
        assert not gate.entered.acquire(timeout=0.3)  # a fourth never starts while three run
        assert gate.peak == 3
        gate.open.set()
        assert q.idle(timeout=30)
        assert sorted(gate.runs) == sorted(f"k{i}" for i in range(20))
        assert gate.peak == 3 and q.busy_peak == 3 and not gate.overlap


def test_requests_for_a_waiting_key_are_merged() -> None:
    with gated(1) as (gate, q):
        q.add("busy")
        assert gate.entered.acquire(timeout=10)
        for _ in range(10):  # "a" waits behind "busy": one run of it answers all ten
            q.add("a")
        gate.open.set()
        assert q.idle(timeout=30)
        assert gate.runs == ["busy", "a"] and q.coalesced == 9 and q.done == 2


def test_a_request_for_a_running_key_runs_it_once_more_after() -> None:
    with gated(2) as (gate, q):
        q.add("a")
        assert gate.entered.acquire(timeout=10)
        for _ in range(5):  # asked for while it runs: it may have observed before the change
            q.add("a")
        gate.open.set()
        assert q.idle(timeout=30)
        assert gate.runs == ["a", "a"] and not gate.overlap


def test_a_failed_key_is_tried_again_later_with_a_growing_delay() -> None:
    tries: list[str] = []
    done = threading.Event()

    def flaky(key: str) -> None:
        tries.append(key)
        if len(tries) < 3:
            raise RuntimeError("the API server is down")
        done.set()

    q = WorkQueue(flaky, workers=1, retry_base=0.05, retry_max=0.1).start()
    try:
        q.add("a")
        assert done.wait(30)
        assert tries == ["a", "a", "a"] and q.failed == 2 and q.done == 1
    finally:
        q.stop()


def test_a_delayed_request_waits_and_a_request_now_brings_it_forward() -> None:
    ran = threading.Event()
    q = WorkQueue(lambda key: ran.set(), workers=1).start()
    try:
        q.add("a", after=3600)
        assert not ran.wait(0.3)
        q.add("a")
        assert ran.wait(10)
        assert q.idle(timeout=10)
    finally:
        q.stop()


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WorkQueue(lambda key: None, workers=0)


def test_periodic_requests_wait_behind_changes_and_a_change_promotes_one() -> None:
    with gated(1) as (gate, q):
        q.add("busy")
        assert gate.entered.acquire(timeout=10)
        q.add("tick-a", periodic=True)
        q.add("tick-b", periodic=True)
        q.add("change")
        q.add("tick-b")  # a change for a key waiting in the periodic lane: it goes first
        q.add("busy", periodic=True)  # the run under way answers a periodic request
        gate.open.set()
        assert q.idle(timeout=30)
        assert gate.runs == ["busy", "change", "tick-b", "tick-a"]


def test_a_key_only_the_periodic_lane_asked_for_runs_periodic_work() -> None:
    """The tick's reconciles read the training as its watch showed it (handlers, watched.py); a key a
    change asked for too runs the ordinary work (its GET)."""
    ran: list[tuple[str, str]] = []
    q = WorkQueue(lambda k: ran.append(("work", k)), 1, periodic_work=lambda k: ran.append(("tick", k)))
    q.add("a", periodic=True)
    q.add("b", periodic=True)
    q.add("b")  # a change too
    q.add("c")
    q.start()
    try:
        assert q.idle(timeout=30)
    finally:
        q.stop()
    assert sorted(ran) == [("tick", "a"), ("work", "b"), ("work", "c")]
