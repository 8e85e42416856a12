"""One computation per key at a time (single flight): the first caller of a key computes, the callers
that come while it does wait for its result instead of computing it again.

Why: a history's answer is one GET of its progress ConfigMap (~100 KB) and a 2-3 ms build; N clients
opening the same training's page at once (a dashboard, a shared link) cost N GETs and N builds.
A waiter waits at most `wait` s (then SourceUnavailable: the read it waits on is stuck, and starting
another would only add to what the API server holds); an exception of the computation reaches every
caller of that flight, and nothing of a failed flight is kept, so the next caller computes again.
Once a flight is `slow` s old, at most `max_waiting` callers wait on flights, over every key: the
routers run in anyio's thread pool (40 threads), and 40 clients of one stuck read (a hung NFS file, an
API server that holds a GET) held every thread for `wait` s, each other request queued behind them. A
burst on a read that answers (32 dashboards opening one cold history) still shares it whole; past
`slow`, the waiters beyond the bound, and a caller that comes then, get SourceUnavailable (503,
Retry-After) and free their threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from graphtrain.api.sources.base import SourceUnavailable

T = TypeVar("T")
MAX_WAITING = 16  # callers waiting on slow flights at once: 24 of anyio's 40 threads stay free
SLOW = 0.5  # s: a flight this old may be stuck; a read of a local file or a GET answers in ms


class _Flight(Generic[T]):
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.waiters = 0
        self.started = time.monotonic()


class Flights(Generic[T]):
    """Thread-safe (the routers run in a thread pool). `computed`: how many computations ran (for
    benches and tests); `flying`: how many are running now; `waiting`: callers waiting on them."""

    def __init__(self, wait: float, max_waiting: int = MAX_WAITING, slow: float = SLOW):
        self.wait, self.max_waiting, self.slow = wait, max_waiting, slow
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight[T]] = {}
        self.computed = 0

    @property
    def flying(self) -> int:
        with self._lock:
            return len(self._flights)

    @property
    def waiting(self) -> int:
        """Callers waiting on another's computation now."""
        with self._lock:
            return self._waiting()

    def _waiting(self) -> int:
        return sum(f.waiters for f in self._flights.values())

    def run(self, key: Hashable, compute: Callable[[], T]) -> T:
        """compute(), or the result of the one running for `key`.

        Raises:
            SourceUnavailable: the running one took longer than `wait` s, or longer than `slow` s with
                max_waiting callers waiting.
            whatever compute() raised, to its caller and to every caller that waited on it.
        """
        with self._lock:
            flight = self._flights.get(key)
            leads = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
                self.computed += 1
            elif self._waiting() >= self.max_waiting and time.monotonic() - flight.started >= self.slow:
                raise SourceUnavailable(self._crowded())
            else:
                flight.waiters += 1
        if not leads:
            return self._join(flight)
        try:
            flight.value = compute()
            return flight.value
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def _crowded(self) -> str:
        return f"{self.max_waiting} requests already wait on identical requests' slow reads; try again"

    def _join(self, flight: _Flight[T]) -> T:
        arrived = time.monotonic()
        if not flight.done.wait(max(0.0, flight.started + self.slow - arrived)):
            with self._lock:  # slow: beyond the bound, leave (each checks under the lock: the excess goes)
                crowded = self._waiting() > self.max_waiting
                if crowded:
                    flight.waiters -= 1
            if crowded:
                raise SourceUnavailable(self._crowded())
        if not flight.done.wait(max(0.0, arrived + self.wait - time.monotonic())):
            with self._lock:
                flight.waiters -= 1  # it waits no more (`waiting` counted it while the read stays stuck)
            raise SourceUnavailable(f"an identical request's read took longer than {self.wait:g} s")
        if flight.error is not None:
            raise _own(flight.error) from None
        return flight.value  # type: ignore[return-value]  # set: done without an error


def _own(error: BaseException) -> BaseException:
    """A copy of `error` for one waiter to raise: one exception object raised in several threads at once
    would collect every thread's traceback. Made without calling its __init__ (copy.copy calls
    type(error)(*error.args): Refused(message) lacks its status and the copy failed): its args and its
    attributes (Refused.status) only, no traceback, cause or context."""
    cls = type(error)
    try:
        fresh = cls.__new__(cls, *error.args)
        fresh.__dict__.update(vars(error))
    except Exception:  # an exception type without a __dict__ or with its own __new__: the same object
        return error
    return fresh
