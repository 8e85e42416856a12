"""The calls of one ZmqTransport.call_many on the wire (zmq_transport.py): sent together, their answers
collected, idempotent calls resent after a timeout (bounded) on the connection of the copy they repeat,
and everything a failed exchange still waited on given up (its connections replaced), so no request of
it is delivered later, behind the caller's back."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import zmq

from graphtrain.contract import failures
from graphtrain.runtime.kvstore.client.transport import SLOW_NOTE_SECONDS, Answer, Call, KVTimeout, place
from graphtrain.runtime.kvstore.wire import protocol


class Connections(Protocol):
    """What an exchange uses of its transport (ZmqTransport): one DEALER and its monitor per shard."""

    addresses: list[str]
    retries: int
    sockets: list[zmq.Socket[Any]]
    monitors: list[zmq.Socket[Any]]
    _rid: Iterator[int]

    def _send(self, c: Call, rid: int) -> None: ...

    def abandon(self, shard: int) -> None: ...

    def check_handshakes(self, shards: set[int]) -> set[int]: ...


def _what(c: Call) -> str:
    """A call as its messages name it: `push of 'emb'`, `health`."""
    return f"{c.op}{'' if c.name is None else f' of {c.name!r}'}"


def slow_note(ex: ZmqExchange, waited: float) -> str:
    """The line a trainer's log gets when an exchange has waited `waited` seconds: which shards it
    waits for and what, and how long before it gives up (a network stall shows here, not only as a
    slower step)."""
    waiting = sorted({ex.calls[i].shard for i in ex.pending.values()})
    first = ex.calls[next(iter(ex.pending.values()))]
    what = _what(first)
    more = len(ex.pending) - 1
    where = ", ".join(f"shard {s} ({ex.t.addresses[s]})" for s in waiting)
    return (
        f"[kvstore] waiting {waited:.0f} s for {where}: {what}{f' and {more} more' if more else ''} "
        f"(each call gives up after {ex.timeout:g} s, idempotent ones resent {ex.t.retries} times)"
    )


class ZmqExchange:
    """The calls of one call_many on the wire: sent at construction, answers collected by finish(),
    which resends idempotent calls that time out (bounded retries) and raises naming the server."""

    def __init__(self, transport: Connections, calls: list[Call], timeout: float):
        self.t, self.calls, self.timeout = transport, calls, timeout
        self.answers: list[Answer | None] = [None] * len(calls)
        self.pending: dict[int, int] = {}  # rid -> call index
        self.chunks: dict[int, set[int]] = {}  # rid -> chunk indices received
        self.attempts = [1] * len(calls)
        self.deadline = [0.0] * len(calls)
        self.began = time.monotonic()
        self.noted = False  # said that it waits (slow_note)
        self.closed: set[int] = set()  # calls whose last copy's connection closed before an answer
        transport.check_handshakes({c.shard for c in calls})  # closings seen now predate these calls
        for i, c in enumerate(calls):
            rid = next(transport._rid)  # noqa: SLF001 - the transport's own helper
            self.pending[rid] = i
            transport._send(c, rid)  # noqa: SLF001
            self.deadline[i] = time.monotonic() + timeout

    def finish(self) -> list[Answer]:
        try:
            return self._collect()
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """Give up every call still waiting: the connections they wait on are replaced (abandon), so none
        of their requests still queued there reaches a server later, behind the caller's back (a call
        that raised, then the caller went on). Requests already with a server may still run there."""
        for s in sorted({self.calls[i].shard for i in self.pending.values()}):
            self.t.abandon(s)
        self.pending.clear()

    def _collect(self) -> list[Answer]:
        t, calls, pending = self.t, self.calls, self.pending
        shards = {c.shard for c in calls}
        poller = zmq.Poller()
        for s in shards:
            poller.register(t.sockets[s], zmq.POLLIN)
            poller.register(t.monitors[s], zmq.POLLIN)
        while pending:
            now = time.monotonic()
            due = min(self.deadline[i] for i in pending.values())
            if not self.noted:
                due = min(due, self.began + SLOW_NOTE_SECONDS)
                if now >= self.began + SLOW_NOTE_SECONDS:
                    self.noted = True
                    sys.stderr.write(slow_note(self, now - self.began) + "\n")
            wait_ms = max(0, int(1000 * (due - now)))
            events = dict(poller.poll(wait_ms))
            closed = any(t.monitors[s] in events for s in shards)
            # replies that arrived before a close are answers: read them before judging the close (a
            # server that shut down answered `shutdown`, then closed; both can show in one poll)
            for s in shards:
                if t.sockets[s] not in events and not closed:
                    continue
                while True:
                    try:
                        frames = t.sockets[s].recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._take(frames)
            if closed:
                self._lost(t.check_handshakes(shards))
            now = time.monotonic()
            for rid, i in list(pending.items()):
                if now < self.deadline[i]:
                    continue
                c = calls[i]
                idempotent = protocol.OPS[c.op][1]
                if idempotent and self.attempts[i] <= t.retries:
                    del pending[rid]
                    self.chunks.pop(rid, None)
                    new = next(t._rid)  # noqa: SLF001
                    pending[new] = i
                    t._send(c, new)  # noqa: SLF001
                    self.attempts[i] += 1
                    self.deadline[i] = now + self.timeout
                    self.closed.discard(i)
                    continue
                raise KVTimeout(self._given_up(i))  # finish() drops the connection: never sent later
        if self.noted:
            sys.stderr.write(f"[kvstore] answered after {time.monotonic() - self.began:.1f} s\n")
        return self.answers  # type: ignore[return-value]

    def _lost(self, shards: set[int]) -> None:
        """The connections to `shards` closed with calls waiting on them: no reply to those can come. An
        idempotent call falls due now (resent below, as after a timeout); any other fails at once."""
        now = time.monotonic()
        for i in self.pending.values():
            c = self.calls[i]
            if c.shard not in shards:
                continue
            if protocol.OPS[c.op][1]:
                self.deadline[i] = now
                self.closed.add(i)
                continue
            raise KVTimeout(  # finish() drops the connection
                failures.shard_gone(
                    c.shard,
                    self.t.addresses[c.shard],
                    failures.CLOSED,
                    f"before answering {_what(c)} (not retried: it "
                    "may have been applied); did the server stop or restart?",
                )
            )

    def _given_up(self, i: int) -> str:
        """Why call `i` failed after its last attempt: its connection closed (the server stopped), or no
        answer came within the timeout (the server is stuck, or the network is)."""
        c, n = self.calls[i], self.attempts[i]
        what = _what(c)
        tries = f"{n} attempt{'s' if n > 1 else ''}"
        where = (c.shard, self.t.addresses[c.shard])
        if i in self.closed:
            rest = f"before answering {what} ({tries}); did the server stop or restart?"
            return failures.shard_gone(*where, failures.CLOSED, rest)
        rest = f"{what} within {self.timeout:g} s ({tries}); is the server running?"
        return failures.shard_gone(*where, failures.NO_ANSWER, rest)

    def _take(self, frames: list[Any]) -> None:
        try:
            header, arrays = protocol.parse_reply([f.buffer for f in frames])
        except protocol.ProtocolError:
            return  # not ours to read; the call times out if no good reply follows
        rid = header["rid"]
        if rid not in self.pending:
            return  # a late reply to a call that was retried or abandoned
        i = self.pending[rid]
        c = self.calls[i]
        if not header.get("ok"):
            del self.pending[rid]
            raise protocol.RemoteError(
                f"shard {c.shard} ({self.t.addresses[c.shard]}) refused {c.op}: {header.get('error')}"
            )
        index, count = header.get("chunk", [0, 1])
        result = header.get("result", {})
        if c.out is not None and arrays:
            place(c, int(result.get("offset", 0)), arrays[0])
            arrays = []
        got = self.chunks.setdefault(rid, set())
        got.add(index)
        if self.answers[i] is None:
            self.answers[i] = Answer(result, [np.array(a) for a in arrays])  # copy out of the ZMQ frame
        if len(got) == count:
            del self.pending[rid]
            self.chunks.pop(rid, None)
