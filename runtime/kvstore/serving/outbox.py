"""Replies on their way to peers, with a bounded backlog per peer (the server's I/O thread flushes it).

Workers `post` replies from any thread and go on: no worker ever waits for a peer. The I/O thread
hands each reply to the ROUTER without blocking (ZMQ_ROUTER_MANDATORY, non-blocking send): when a
peer's ZMQ pipe is full (it is not reading), its replies wait here, in order. A peer whose backlog
passes a bound, or that has taken nothing for `stall_seconds`, is dropped: its backlog is discarded,
its further requests are ignored, and the server counts it. A peer that has disconnected is "gone".
The send function is injected, so the policy is tested without sockets.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Sent(Enum):
    ok = "ok"
    full = "full"  # the peer's pipe is at its high-water mark
    gone = "gone"  # no such peer any more


@dataclass
class _Backlog:
    messages: deque[tuple[list[Any], int]] = field(default_factory=deque)
    nbytes: int = 0
    blocked_since: float = 0.0


@dataclass(frozen=True)
class Dropped:
    peer: bytes
    reason: str  # "backlog" | "stalled" | "gone"


class Outbox:
    def __init__(
        self,
        send: Callable[[bytes, list[Any]], Sent],
        wake: Callable[[], None] = lambda: None,
        max_messages: int = 256,
        max_bytes: int = 64 << 20,
        stall_seconds: float = 30.0,
        remember: int = 4096,
    ):
        self._send = send
        self._wake = wake
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.stall_seconds = stall_seconds
        self._posted: deque[tuple[bytes, list[Any], int]] = deque()  # append/popleft are thread-safe
        self._backlogs: dict[bytes, _Backlog] = {}
        self._dropped: OrderedDict[bytes, str] = OrderedDict()
        self._remember = remember
        self._lock = threading.Lock()  # guards _dropped (read by workers through is_dropped)

    # ------------------------------------------------------------------------------ any thread

    def post(self, peer: bytes, frames: list[Any], nbytes: int = 0) -> None:
        self._posted.append((peer, frames, nbytes))
        self._wake()

    def is_dropped(self, peer: bytes) -> bool:
        with self._lock:
            return peer in self._dropped

    # ------------------------------------------------------------------------- the I/O thread

    def flush(self, now: float) -> list[Dropped]:
        """Send what can be sent; returns the peers dropped by this call."""
        events: list[Dropped] = []
        while self._posted:
            peer, frames, nbytes = self._posted.popleft()
            if self.is_dropped(peer):
                continue
            backlog = self._backlogs.get(peer)
            if backlog is None:
                sent = self._send(peer, frames)
                if sent is Sent.ok:
                    continue
                if sent is Sent.gone:
                    events.append(self.drop(peer, "gone"))
                    continue
                backlog = self._backlogs[peer] = _Backlog(blocked_since=now)
            backlog.messages.append((frames, nbytes))
            backlog.nbytes += nbytes
        for peer in list(self._backlogs):
            backlog = self._backlogs[peer]
            progress = False
            while backlog.messages:
                frames, nbytes = backlog.messages[0]
                sent = self._send(peer, frames)
                if sent is Sent.full:
                    break
                backlog.messages.popleft()
                backlog.nbytes -= nbytes
                if sent is Sent.gone:
                    events.append(self.drop(peer, "gone"))
                    break
                progress = True
            if peer not in self._backlogs:
                continue
            if not backlog.messages:
                del self._backlogs[peer]
            elif progress:
                backlog.blocked_since = now
            if len(backlog.messages) > self.max_messages or backlog.nbytes > self.max_bytes:
                events.append(self.drop(peer, "backlog"))
            elif backlog.messages and now - backlog.blocked_since > self.stall_seconds:
                events.append(self.drop(peer, "stalled"))
        return events

    def drop(self, peer: bytes, reason: str) -> Dropped:
        """Discard the peer's backlog and ignore what is posted to it from now on."""
        self._backlogs.pop(peer, None)
        with self._lock:
            self._dropped[peer] = reason
            self._dropped.move_to_end(peer)
            while len(self._dropped) > self._remember:
                self._dropped.popitem(last=False)
        return Dropped(peer, reason)

    def pending(self) -> bool:
        """Whether replies wait (the I/O thread then polls more often)."""
        return bool(self._posted or self._backlogs)

    def backlog(self, peer: bytes) -> int:
        b = self._backlogs.get(peer)
        return 0 if b is None else len(b.messages)
