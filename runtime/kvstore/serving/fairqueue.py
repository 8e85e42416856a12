"""The shard server's run queue: requests per peer, served round-robin, at most `slots` at a time per peer.

Why per peer: a single FIFO lets one client that floods requests (or sends a 200 MB push in 50
requests) put every other client's 1,000-row pull behind its backlog, and a pool of workers pulling
from it can all end up serving one peer. Here the workers spread over the peers that have work, and a
peer holds at most `slots` of them. Two slots, not one: a push split into chunk requests then keeps two
workers on it, one checking the next chunk while the other applies the current one (measured: with one
slot each chunk's checks waited for the previous chunk's update). A peer's requests start in the order
they came; the client sends nothing whose effect depends on the order two requests of one call finish
in (overwrite pushes are deduplicated before they are split).

A pull whose client reads slowly "parks": its worker moves on and its slot stays taken, so a peer
that stops reading holds at most `slots` workers' worth of buffers and no worker. The stream resumes
at the front of its peer's queue when the client has taken some of it.

Thread-safe; `get` blocks with a timeout so that workers can notice shutdown.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class PeerState(Enum):
    idle = "idle"  # nothing queued or running
    ready = "ready"  # queued work, waiting in the ring for a worker
    running = "running"  # a task of it is with a worker, none waits for one
    parked = "parked"  # its only active tasks are streams waiting for it to read


@dataclass
class _Peer:
    tasks: deque[Any] = field(default_factory=deque)
    active: int = 0  # tasks with a worker or parked (each holds a slot)
    parked: int = 0
    in_ring: bool = False
    since: float = 0.0  # when it last became ready (for the deafness check)


class QueueFull(Exception):
    """The peer already has the most queued tasks allowed."""


class FairQueue:
    def __init__(self, per_peer: int = 64, slots: int = 2):
        self.per_peer = per_peer
        self.slots = slots
        self._peers: dict[Hashable, _Peer] = {}
        self._ring: deque[Hashable] = deque()
        self._cond = threading.Condition()

    def put(self, peer: Hashable, task: Any) -> None:
        """Queue a task of `peer`.

        Raises:
            QueueFull: the peer has `per_peer` tasks queued already.
        """
        with self._cond:
            p = self._peers.setdefault(peer, _Peer())
            if len(p.tasks) >= self.per_peer:
                raise QueueFull(peer)
            p.tasks.append(task)
            self._offer(peer, p)

    def get(self, timeout: float) -> tuple[Hashable, Any] | None:
        """The next task of the next ready peer, or None after `timeout` seconds."""
        with self._cond:
            if not self._ring and not self._cond.wait_for(lambda: bool(self._ring), timeout):
                return None
            peer = self._ring.popleft()
            p = self._peers[peer]
            p.in_ring = False
            task = p.tasks.popleft()
            p.active += 1
            self._offer(peer, p)  # a free slot and more work: back in the ring, behind the others
            return peer, task

    def finish(self, peer: Hashable) -> None:
        """A running task of the peer is done: its slot is free."""
        with self._cond:
            p = self._peers.get(peer)
            if p is None or p.active - p.parked <= 0:
                return
            p.active -= 1
            self._offer(peer, p)

    def park(self, peer: Hashable) -> None:
        """A running task of the peer waits for the peer (a stream it has not read); it keeps its slot."""
        with self._cond:
            p = self._peers.get(peer)
            if p is not None and p.active - p.parked > 0:
                p.parked += 1

    def resume(self, peer: Hashable, task: Any) -> None:
        """A parked task continues: first in its peer's queue."""
        with self._cond:
            p = self._peers.get(peer)
            if p is None or p.parked <= 0:
                return
            p.parked -= 1
            p.active -= 1
            p.tasks.appendleft(task)
            self._offer(peer, p)

    def drop(self, peer: Hashable) -> list[Any]:
        """Forget the peer and return the tasks it had queued (not run). A task of it still with a
        worker finishes on its own; a parked one is not resumed. (Refusing its further requests is the
        caller's part: the outbox remembers dropped peers.)"""
        with self._cond:
            p = self._peers.pop(peer, None)
            if p is None:
                return []
            if p.in_ring:
                self._ring.remove(peer)
            return list(p.tasks)

    def forget_idle(self) -> int:
        """Remove the records of peers with nothing queued or running (connections come and go)."""
        with self._cond:
            idle = [k for k, p in self._peers.items() if not p.tasks and not p.active]
            for k in idle:
                del self._peers[k]
            return len(idle)

    def state(self, peer: Hashable) -> PeerState:
        with self._cond:
            p = self._peers.get(peer)
            if p is None or (not p.tasks and not p.active):
                return PeerState.idle
            if p.in_ring:
                return PeerState.ready
            return PeerState.parked if p.active == p.parked else PeerState.running

    def queued(self) -> int:
        with self._cond:
            return sum(len(p.tasks) for p in self._peers.values())

    def oldest_wait(self, now: float) -> float:
        """Seconds the longest-waiting ready peer has waited for a worker (0: none waits)."""
        with self._cond:
            return max((now - self._peers[peer].since for peer in self._ring), default=0.0)

    def _offer(self, peer: Hashable, p: _Peer) -> None:
        if p.tasks and p.active < self.slots and not p.in_ring:
            p.in_ring = True
            p.since = time.monotonic()
            self._ring.append(peer)
            self._cond.notify()
