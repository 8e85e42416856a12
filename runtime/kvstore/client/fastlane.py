"""Pulls over the shard servers' fast lanes (serving/fastlane.py, cuda/src/fastlane.cpp): the client side.

ZmqTransport hands each eligible call here: a pull of a table's rows into the caller's array, of at most
fastwire.MAX_IDS ids and MAX_REPLY_BYTES of rows, or a neighbour sample (untyped, a fan-out >= 1, its
reply within MAX_REPLY_BYTES at most), to a shard whose health reply named a fast lane port. One plain
TCP connection per shard, authenticated once with the token, one request in flight on it at a time (pulls
to several shards are in flight together). Rows are read straight into the caller's array when they land
in order.

Whatever goes wrong here costs speed, never a result: a connection that fails or times out is closed, and
its pulls go over ZMQ, with its retries and its error messages (a pull is idempotent, so asking twice is
safe); the lane is tried again RETRY_SECONDS later, after asking the server its port again (a restarted
server may have another). A table the lane does not serve (a GPU table, a dynamic vocabulary, one created
since) is remembered and asked over ZMQ from then on. What the lane refuses (an id outside the shard)
raises as the ZMQ path's refusal does; a refused token raises KVAuthError.
"""

from __future__ import annotations

import itertools
import math
import socket
import sys
import time
from collections import deque

import numpy as np

from graphtrain.runtime.kvstore.client.transport import SLOW_NOTE_SECONDS, Answer, Call, KVAuthError, place
from graphtrain.runtime.kvstore.wire import fastwire, opargs, protocol

RETRY_SECONDS = 2.0
SAMPLING = "\0sample"  # not_served's name for a shard's sampling (no table is named so)
PULLED = Answer({"offset": 0}, [])  # a pull's answer: its rows are in the caller's array


def host_of(address: str) -> str | None:
    """The host of a tcp://host:port address (None for ipc://: no fast lane there)."""
    if not address.startswith("tcp://"):
        return None
    return address[len("tcp://") :].rsplit(":", 1)[0].strip("[]")


class _Broken(Exception):
    """A connection that cannot be trusted any more: closed, its pulls go over ZMQ."""


class FastPulls:
    def __init__(self, addresses: list[str], token: str, timeout: float):
        self.addresses = addresses
        self.hosts = [host_of(a) for a in addresses]
        self.token = token.encode()
        self.timeout = timeout
        self.ports: list[int | None] = [None if h else 0 for h in self.hosts]  # None: ask; 0: none
        self.socks: list[socket.socket | None] = [None] * len(addresses)
        self.retry_at = [0.0] * len(addresses)
        self.not_served: set[tuple[int, str]] = set()
        self._rid = itertools.count(1)
        self._head = bytearray(fastwire.REPLY.size)
        self._deadline = 0.0  # of the exchange run() is in
        self._began, self._noted = 0.0, True  # when it began, and whether its wait was logged

    # ------------------------------------------------------------------------------ which pulls

    def unknown(self, calls: list[Call]) -> set[int]:
        """Shards of these pulls whose lane port is not known yet (ask their health, then `learn`)."""
        now = time.monotonic()
        return {
            c.shard
            for c in calls
            if c.op in ("pull", "sample") and self.ports[c.shard] is None and now >= self.retry_at[c.shard]
        }

    def learn(self, shard: int, port: int) -> None:
        self.ports[shard] = int(port) if 0 < int(port) < 65536 else 0

    def eligible(self, c: Call) -> bool:
        s = c.shard
        if not self.ports[s] or time.monotonic() < self.retry_at[s]:
            return False
        n = sum(len(a) for a in c.arrays)
        if c.op == "sample":
            if (s, SAMPLING) in self.not_served or set(c.args or {}) != {"fanout", "seed"}:
                return False
            try:  # the ZMQ path's own checks: what it refuses goes there, to be refused as it is
                a = opargs.validate(protocol.Request("sample", 0, None, list(c.arrays), dict(c.args or {})))
            except protocol.ProtocolError:
                return False
            assert isinstance(a, opargs.SampleArgs)
            return (
                a.fanout >= 1 and n <= fastwire.MAX_IDS and 8 * n * (a.fanout + 1) <= fastwire.MAX_REPLY_BYTES
            )
        if c.op != "pull" or c.out is None or (s, c.name) in self.not_served or not isinstance(c.name, str):
            return False
        if fastwire.row_type(c.out.dtype, c.out.shape[1:]) is None:
            return False
        return n <= fastwire.MAX_IDS and n * _row_bytes(c.out) <= fastwire.MAX_REPLY_BYTES

    # ---------------------------------------------------------------------------------- pulls

    def run(self, calls: list[Call]) -> tuple[dict[int, Answer], list[Call]]:
        """Serve `calls` (all eligible): their answers by id(call), and the calls left for ZMQ."""
        queues: dict[int, deque[Call]] = {}
        for c in calls:
            queues.setdefault(c.shard, deque()).append(c)
        left: list[Call] = []
        answers: dict[int, Answer] = {}
        flight: dict[int, tuple[Call, int]] = {}
        self._deadline = time.monotonic() + self.timeout  # the whole exchange, as one ZMQ call's
        self._began, self._noted = time.monotonic(), False
        try:
            for s, q in queues.items():
                try:
                    flight[s] = (q[0], self._send(s, q[0]))
                except _Broken:
                    self._down(s)
                    left += q
                    q.clear()
            while flight:
                for s in list(flight):
                    c, rid = flight.pop(s)
                    try:
                        answer = self._receive(s, c, rid)
                        if answer is None:
                            left.append(c)
                        else:
                            answers[id(c)] = answer
                        queues[s].popleft()
                        if queues[s]:
                            flight[s] = (queues[s][0], self._send(s, queues[s][0]))
                    except _Broken:
                        self._down(s)
                        left += queues[s]
                        queues[s].clear()
        except BaseException:  # a refusal raised: replies still on their way would desynchronise
            for s in flight:
                self._fail(s)
            raise
        if self._noted:
            sys.stderr.write(f"[kvstore] answered after {time.monotonic() - self._began:.1f} s\n")
        return answers, left

    def _send(self, s: int, c: Call) -> int:
        sock = self._connect(s)
        rid = next(self._rid)
        ids = [np.ascontiguousarray(a, dtype=np.int64) for a in c.arrays]
        n = sum(len(a) for a in ids)
        if c.op == "sample":
            args = c.args or {}
            head = fastwire.sample_request(rid, n, int(args["fanout"]), int(args["seed"]))
        else:
            assert c.out is not None
            rows = fastwire.row_type(c.out.dtype, c.out.shape[1:])
            assert rows is not None  # eligible() checked it
            head = fastwire.request(rid, c.name.encode(), n, rows)
        try:
            sock.settimeout(self._left())
            sock.sendall(b"".join([head, *[a.tobytes() for a in ids]]))
        except OSError as exc:
            raise _Broken from exc
        return rid

    def _receive(self, s: int, c: Call, rid: int) -> Answer | None:
        """Read the answer to `c` (a pull's into its rows); None: the lane does not serve it."""
        sock = self.socks[s]
        assert sock is not None
        self._read_into(sock, memoryview(self._head))
        magic, status, got, nbytes = fastwire.REPLY.unpack(self._head)
        if magic != fastwire.REPLY_MAGIC or got != rid:
            raise _Broken
        if status != fastwire.OK:
            if nbytes > 4096:
                raise _Broken
            text = bytearray(nbytes)
            self._read_into(sock, memoryview(text))
            message = text.decode(errors="replace")
            if status == fastwire.NOT_HERE:
                if c.op == "pull" or "no graph" in message:  # a big sample is asked over ZMQ once
                    self.not_served.add((s, c.name if c.op == "pull" else SAMPLING))
                return None
            raise protocol.RemoteError(f"shard {s} ({self.addresses[s]}) refused {c.op}: {message}")
        n = sum(len(a) for a in c.arrays)
        if c.op == "sample":
            return self._sampled(sock, n, nbytes)
        assert c.out is not None
        if nbytes != n * _row_bytes(c.out):  # another dtype than the caller's (say): ZMQ converts
            self.not_served.add((s, c.name))
            raise _Broken
        if c.dest is None and c.out.flags.c_contiguous:
            self._read_into(sock, memoryview(c.out).cast("B"))
        else:
            rows = np.empty((n, *c.out.shape[1:]), dtype=c.out.dtype)
            self._read_into(sock, memoryview(rows).cast("B"))
            place(c, 0, rows)
        return PULLED

    def _sampled(self, sock: socket.socket, n: int, nbytes: int) -> Answer:
        """A sample's reply: `n` counts, then the sources they count (as the ZMQ reply's arrays)."""
        if nbytes % 8 or nbytes < 8 * n or nbytes > fastwire.MAX_REPLY_BYTES:
            raise _Broken
        got = np.empty(nbytes // 8, dtype=np.int64)
        self._read_into(sock, memoryview(got).cast("B"))
        counts, src = got[:n], got[n:]
        if (counts < 0).any() or int(counts.sum()) != len(src):
            raise _Broken
        return Answer({}, [src, counts])

    def _left(self) -> float:
        """Seconds left of the exchange's deadline (_Broken when none)."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise _Broken
        return left

    def _read_into(self, sock: socket.socket, view: memoryview) -> None:
        """Fill `view` from `sock` within the exchange's deadline (a server that drips its bytes is
        given up at it, as a silent one), or raise _Broken."""
        got = 0
        while got < len(view):
            wait = self._left()
            note_at = self._began + SLOW_NOTE_SECONDS
            if not self._noted:
                wait = min(wait, max(0.001, note_at - time.monotonic()))
            try:
                sock.settimeout(wait)
                n = sock.recv_into(view[got:])
            except TimeoutError:  # the deadline is _left()'s to judge; past 5 s the log says so once
                if not self._noted and time.monotonic() >= note_at:
                    self._noted = True
                    sys.stderr.write(
                        f"[kvstore] waiting {SLOW_NOTE_SECONDS:.0f} s for shard {self.socks.index(sock)} "
                        f"({self.hosts[self.socks.index(sock)]}) on its fast lane (the exchange gives up "
                        f"after {self.timeout:g} s, then goes over ZMQ)\n"
                    )
                continue
            except OSError as exc:
                raise _Broken from exc
            if n == 0:
                raise _Broken
            got += n

    def _connect(self, s: int) -> socket.socket:
        sock = self.socks[s]
        if sock is not None:
            return sock
        host, port = self.hosts[s], self.ports[s]
        assert host is not None and port
        try:
            sock = socket.create_connection((host, port), timeout=self._left())
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(fastwire.hello(self.token))
            head = bytearray(fastwire.HELLO_REPLY.size)
            self._read_into(sock, memoryview(head))
        except (OSError, _Broken) as exc:
            raise _Broken from exc
        magic, status = fastwire.HELLO_REPLY.unpack(head)
        if magic != fastwire.HELLO_MAGIC:
            sock.close()
            raise _Broken
        if status != 0:
            sock.close()
            raise KVAuthError(f"shard {s} ({self.addresses[s]}) refused this client's token (fast lane)")
        self.socks[s] = sock
        return sock

    def _fail(self, s: int) -> None:
        sock, self.socks[s] = self.socks[s], None
        if sock is not None:
            sock.close()

    def _down(self, s: int) -> None:
        """The lane of `s` failed: ZMQ for a while, then ask its port again."""
        self._fail(s)
        self.retry_at[s] = time.monotonic() + RETRY_SECONDS
        self.ports[s] = None

    def close(self) -> None:
        for s in range(len(self.socks)):
            self._fail(s)


def _row_bytes(out: np.ndarray) -> int:
    return out.dtype.itemsize * math.prod(out.shape[1:])
