"""Barrier rounds on a shard server: released when `count` participants have arrived (pure, locked).

A participant that gives up must not be counted in a later round: if it were, the next round would be
released one arrival early and leave its last participant waiting until its own timeout. So every
arrival carries a deadline (the client's timeout, a little shortened so that the answer reaches the
client before it stops listening), and `expire` withdraws the participants whose deadline passed; the
server answers them with an error naming the barrier and how many had arrived.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

from graphtrain.runtime.kvstore.wire.protocol import ProtocolError

MAX_KEYS = 10_000  # open rounds at once (a peer inventing keys cannot grow the table without bound)


@dataclass
class _Round:
    count: int
    waiting: list[tuple[Hashable, float]] = field(default_factory=list)  # (participant, deadline)


@dataclass(frozen=True)
class Expired:
    who: Hashable
    key: str
    arrived: int
    count: int


class Barriers:
    def __init__(self) -> None:
        self._rounds: dict[str, _Round] = {}
        self._lock = threading.Lock()

    def arrive(self, key: str, count: int, who: Hashable, deadline: float) -> list[Hashable] | None:
        """Register `who`; returns every participant of the round when it is complete, else None.

        Raises:
            ProtocolError: the round is open with another count, or too many rounds are open.
        """
        with self._lock:
            r = self._rounds.get(key)
            if r is None:
                if len(self._rounds) >= MAX_KEYS:
                    raise ProtocolError(f"more than {MAX_KEYS} barriers are open")
                r = self._rounds[key] = _Round(count)
            elif r.count != count:
                raise ProtocolError(f"barrier {key!r} is open for {r.count} participants, not {count}")
            r.waiting.append((who, deadline))
            if len(r.waiting) < count:
                return None
            del self._rounds[key]
            return [w for w, _ in r.waiting]

    def withdraw(self, key: str, who: Hashable) -> None:
        with self._lock:
            r = self._rounds.get(key)
            if r is None:
                return
            r.waiting = [(w, d) for w, d in r.waiting if w != who]
            if not r.waiting:
                del self._rounds[key]

    def expire(self, now: float) -> list[Expired]:
        """Withdraw every participant whose deadline has passed."""
        out = []
        with self._lock:
            for key in list(self._rounds):
                r = self._rounds[key]
                late = [w for w, d in r.waiting if d <= now]
                if not late:
                    continue
                arrived = len(r.waiting)
                r.waiting = [(w, d) for w, d in r.waiting if d > now]
                out += [Expired(w, key, arrived, r.count) for w in late]
                if not r.waiting:
                    del self._rounds[key]
        return out

    def open(self) -> int:
        with self._lock:
            return len(self._rounds)
