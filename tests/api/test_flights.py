"""Concurrent misses of one history share one read (api/sources/flights.py, Cache.history): one GET and
one build however many ask at once, every caller the same answer; an error reaches every caller of that
read and is not kept (the next ask reads again); a caller waits a bounded time on a stuck read."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from graphtrain.api.sources.base import InvalidParameter, NotFound, SourceUnavailable
from graphtrain.api.sources.cached import Cache, history_version
from graphtrain.api.sources.flights import Flights
from graphtrain.api.sources.kubernetes import Refused
from tests.api.fake import epochs
from tests.api.test_answers import stored

CALLERS = 16
KEY = ("ns", "t-progress")


class HeldRead:
    """A GET that returns (or raises) only once every other caller waits on it."""

    def __init__(self, flights: Flights, text: str | None, error: Exception | None = None):
        self.flights, self.text, self.error = flights, text, error
        self.reads = 0

    def __call__(self) -> str | None:
        self.reads += 1
        for _ in range(2000):  # bounded: 20 s at most
            if self.flights.waiting == CALLERS - 1:
                break
            threading.Event().wait(0.01)
        if self.error is not None:
            raise self.error
        return self.text


def at_once(ask: Callable[[], bytes]) -> list[bytes | BaseException]:
    out: list[bytes | BaseException] = [b""] * CALLERS

    def one(i: int) -> None:
        try:
            out[i] = ask()
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return out


def cache(patience: float = 30.0) -> Cache:
    return Cache({}, bound=10, max_age=1.0, period=1, patience=patience)


def test_concurrent_misses_of_one_history_read_it_once() -> None:
    c = cache()
    text = stored(50)
    read = HeldRead(c.reads, text)
    answers = at_once(lambda: c.history(KEY, history_version(text), read))
    assert read.reads == 1 and c.reads.computed == 1
    assert all(a is answers[0] for a in answers) and epochs(answers[0]) == list(range(1, 51))
    assert c.histories.get(KEY, history_version(text)) is answers[0]
    assert c.reads.flying == c.reads.waiting == 0


@pytest.mark.parametrize("error", [SourceUnavailable("the API server is down"), NotFound("no training")])
def test_an_error_reaches_every_caller_and_is_not_kept(error: Exception) -> None:
    c = cache()
    text = stored(5)
    failing = HeldRead(c.reads, text, error)
    answers = at_once(lambda: c.history(KEY, history_version(text), failing))
    assert failing.reads == 1
    assert all(type(a) is type(error) and str(a) == str(error) for a in answers)
    assert c.histories.get(KEY, history_version(text)) is None and c.reads.flying == 0
    working = HeldRead(c.reads, text)  # the next asks read again
    assert all(
        epochs(a) == [1, 2, 3, 4, 5] for a in at_once(lambda: c.history(KEY, history_version(text), working))
    )
    assert working.reads == 1


@pytest.mark.parametrize(
    "error",
    [Refused(403, "the Kubernetes API answered 403 Forbidden"), InvalidParameter("continue", "expired")],
)
def test_each_caller_raises_its_own_copy_of_an_error_whose_init_takes_other_arguments(
    error: Exception,
) -> None:
    """copy.copy calls type(error)(*error.args): Refused(message) lacks its status, so every waiter
    raised the leader's one object, each raise adding its thread's frames to that object's traceback."""
    c = cache()
    text = stored(5)
    answers = at_once(lambda: c.history(KEY, history_version(text), HeldRead(c.reads, text, error)))
    assert all(type(a) is type(error) and str(a) == str(error) for a in answers)
    assert all(vars(a) == vars(error) for a in answers)  # Refused.status
    assert len({id(a) for a in answers}) == CALLERS


class Stuck:
    """A read of `text` by another caller that has begun and returns once released."""

    def __init__(self, c: Cache, text: str):
        self.text, self.release, self.entered = text, threading.Event(), threading.Event()
        self.leader = threading.Thread(target=lambda: c.history(KEY, history_version(text), self))
        self.leader.start()
        assert self.entered.wait(30)

    def __call__(self) -> str | None:
        self.entered.set()
        self.release.wait(30)
        return self.text

    def end(self) -> None:
        self.release.set()
        self.leader.join(30)


def test_a_caller_waits_on_a_stuck_read_a_bounded_time() -> None:
    c = cache(patience=0.05)
    text = stored(3)
    stuck = Stuck(c, text)
    with pytest.raises(SourceUnavailable, match="identical request's read took longer than 0.05 s"):
        c.history(KEY, history_version(text), stuck)
    assert c.reads.flying == 1 and c.reads.waiting == 0  # the caller that gave up waits no more
    stuck.end()
    assert epochs(c.history(KEY, history_version(text), stuck)) == [1, 2, 3]  # kept by the leader
    assert c.reads.computed == 1


def test_another_history_version_is_its_own_read() -> None:
    """A caller whose watch shows a newer history does not wait for, nor take, an older one's read."""
    c = cache()
    new = stored(4)
    stuck = Stuck(c, stored(3))
    assert epochs(c.history(KEY, history_version(new), lambda: new)) == [1, 2, 3, 4]
    stuck.end()
    assert c.reads.computed == 2


def test_past_slow_callers_beyond_max_waiting_leave_or_are_answered_at_once() -> None:
    """40 clients of one stuck read held every one of anyio's 40 threads for 30 s (each other request
    queued behind them). A burst on a read that answers is shared whole; once the read is `slow`, the
    waiters beyond max_waiting leave and a caller who comes then is answered at once."""
    flights: Flights[str] = Flights(wait=30.0, max_waiting=3, slow=0.3)
    release = threading.Event()
    leader = threading.Thread(target=flights.run, args=("k", lambda: release.wait(30) and "read"))
    leader.start()
    for _ in range(1000):  # bounded: 10 s at most
        if flights.flying == 1:
            break
        threading.Event().wait(0.01)
    got: list[str | BaseException] = []

    def ask() -> None:
        try:
            got.append(flights.run("k", lambda: "again"))
        except SourceUnavailable as exc:
            got.append(exc)

    waiters = [threading.Thread(target=ask) for _ in range(5)]
    for t in waiters:
        t.start()  # all 5 join while the read is young
    for _ in range(1000):
        if sum(isinstance(g, SourceUnavailable) for g in got) == 2:
            break
        threading.Event().wait(0.01)
    assert flights.waiting == 3 and len(got) == 2  # past slow: 2 left, 3 still wait
    assert all("3 requests already wait" in str(g) for g in got)
    with pytest.raises(SourceUnavailable, match="3 requests already wait"):
        flights.run("k", lambda: "again")  # comes now: answered at once
    assert flights.run("other", lambda: "other") == "other"  # a read of its own waits on no one
    release.set()
    leader.join(30)
    for t in waiters:
        t.join(30)
    assert got[2:] == ["read"] * 3 and flights.computed == 2


def test_a_burst_on_a_read_that_answers_is_shared_whole() -> None:
    flights: Flights[str] = Flights(wait=30.0, max_waiting=3, slow=5.0)
    hold = HeldRead(flights, "read")
    assert at_once(lambda: flights.run("k", hold)) == ["read"] * CALLERS  # 15 waiters, bound 3
    assert hold.reads == 1
