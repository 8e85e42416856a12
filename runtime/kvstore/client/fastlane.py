"""Pulls, samples and pushes over the shard servers' fast lanes (serving/fastlane.py, cuda/src/fastlane.cpp):
the client side.

ZmqTransport hands each eligible call here: a pull of a table's rows into the caller's array, of at most
fastwire.MAX_IDS ids and MAX_REPLY_BYTES of rows, a neighbour sample (untyped, a fan-out >= 1, its
reply within MAX_REPLY_BYTES at most), or a gradient push (float32 rows, or a half table's in its type)
within the same bounds (one chunk), or a push from the same host whose rows lie in the client's
shared-memory push buffer, of at most fastwire.MAX_SHARED_BYTES (wire version 3: only the ids and the
buffer's name cross), to a shard
whose health reply named a fast lane: a TCP port, or beside an ipc:// server a Unix socket. One plain
connection per shard, authenticated once with the token, one message in
flight on it at a time (pulls to several shards are in flight together). Several calls to one shard go
as one batch (wire version 2, lanecalls.take): a step's features and embedding rows cost one round
trip, not two. Rows are read straight into the caller's array when they land in order.

Whatever goes wrong here costs speed, never a result: a connection that fails or times out is closed, and
its pulls go over ZMQ, with its retries and its error messages (a pull is idempotent, so asking twice is
safe); the lane is tried again RETRY_SECONDS later, after asking the server its port again (a restarted
server may have another). A table the lane does not serve (a GPU table, a dynamic vocabulary, one created
since) is remembered and asked over ZMQ from then on. What the lane refuses (an id outside the shard)
raises as the ZMQ path's refusal does; a refused token raises KVAuthError.

A push is not idempotent: one the lane answers "busy" or "not served" was not applied and goes over ZMQ,
but one whose connection fails after it was sent raises KVTimeout (it may have been applied), as the
ZMQ path does. `begin` sends without waiting (a push with wait=False); `finish` collects the answers.
"""

from __future__ import annotations

import itertools
import socket
import sys
import time
from collections import deque

import numpy as np

from graphtrain.contract import failures
from graphtrain.runtime.kvstore.client import lanecalls, reads
from graphtrain.runtime.kvstore.client.transport import (
    SLOW_NOTE_SECONDS,
    Answer,
    Call,
    KVAuthError,
    KVTimeout,
    place,
)
from graphtrain.runtime.kvstore.wire import fastwire, protocol

RETRY_SECONDS = 2.0
SAMPLING = "\0sample"  # not_served's name for a shard's sampling (no table is named so)
PUSHES = "\0push:"  # not_served's prefix: a table whose pushes the lane does not step (its pulls it may)
LANE_OPS = ("pull", "sample", "push_grad")  # what the lane may carry (eligible() decides each call)
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
        # None: ask; 0: no TCP lane (an ipc:// server's lane is a Unix socket: `paths`)
        self.ports: list[int | None] = [
            None if h or a.startswith("ipc://") else 0 for h, a in zip(self.hosts, addresses, strict=True)
        ]
        self.paths: list[str | None] = [None] * len(addresses)
        self.versions = [1] * len(addresses)  # each lane's wire version (learn)
        self.socks: list[socket.socket | None] = [None] * len(addresses)
        self.retry_at = [0.0] * len(addresses)
        self.not_served: set[tuple[int, str]] = set()
        self._rid = itertools.count(1)
        self._head = bytearray(fastwire.REPLY.size)
        self._deadline = 0.0  # of the exchange run() is in
        self._began, self._noted = 0.0, True  # when it began, and whether its wait was logged
        self._queues: dict[int, deque[Call]] = {}  # begin()'s calls not answered yet, by shard
        # the calls in flight on each shard's connection, with their rids (a batch's first)
        self._flight: dict[int, tuple[list[Call], list[int]]] = {}
        self._unserved: list[Call] = []  # calls the lane did not serve: for ZMQ
        self._read = 0  # bytes read from the lanes: a batch's replies are checked against its length

    # ------------------------------------------------------------------------------ which pulls

    def unknown(self, calls: list[Call]) -> set[int]:
        """Shards of these pulls whose lane port is not known yet (ask their health, then `learn`)."""
        now = time.monotonic()
        return {
            c.shard
            for c in calls
            if c.op in LANE_OPS and self.ports[c.shard] is None and now >= self.retry_at[c.shard]
        }

    def learn(self, shard: int, port: int, version: int = 1, path: str = "") -> None:
        """The lane's port of `shard` (0: none), or beside an ipc:// server its Unix socket's `path`,
        and the wire version its health reply names: a server older than batches (version 1) is sent one
        request at a time, and greeted as version 1; one older than pushes from shared memory (version
        2) is sent those over ZMQ."""
        ipc = self.addresses[shard].startswith("ipc://")
        self.ports[shard] = int(port) if not ipc and 0 < int(port) < 65536 else 0
        self.paths[shard] = path if ipc and isinstance(path, str) and path.startswith("/") else None
        self.versions[shard] = max(1, min(version, fastwire.VERSION)) if isinstance(version, int) else 1

    def _has_lane(self, s: int) -> bool:
        return bool(self.ports[s]) or self.paths[s] is not None

    def eligible(self, c: Call) -> bool:
        s = c.shard
        if not self._has_lane(s) or time.monotonic() < self.retry_at[s]:
            return False
        if c.op == "sample":
            return (s, SAMPLING) not in self.not_served and lanecalls.sample_fits(c)
        if c.op == "push_grad":
            served = (s, c.name) not in self.not_served and (s, PUSHES + str(c.name)) not in self.not_served
            shared = self.versions[s] >= 3 and lanecalls.shared_push_fits(c)  # rows in a push buffer
            return served and (shared or lanecalls.push_fits(c))
        return c.op == "pull" and (s, c.name) not in self.not_served and lanecalls.pull_fits(c)

    # ------------------------------------------------------------------------ pulls and pushes

    def run(self, calls: list[Call]) -> tuple[dict[int, Answer], list[Call]]:
        """Serve `calls` (all eligible): their answers by id(call), and the calls left for ZMQ."""
        self.begin(calls)
        return self.finish()

    def begin(self, calls: list[Call]) -> None:
        """Send the first of `calls` (all eligible) to each shard, several in one batch when they fit one
        (lanecalls.take); finish() takes the answers and sends the rest, one message in flight per
        connection."""
        queues: dict[int, deque[Call]] = {}
        for c in calls:
            queues.setdefault(c.shard, deque()).append(c)
        self._unserved = []
        self._queues, self._flight = queues, {}
        self._deadline = time.monotonic() + self.timeout  # the whole exchange, as one ZMQ call's
        self._began, self._noted = time.monotonic(), False
        try:
            for s, q in queues.items():
                self._next(s, q)
        except BaseException:
            self._abandon()
            raise

    def _next(self, s: int, q: deque[Call]) -> None:
        """Send the next message of shard `s`'s queue, if any (what cannot be sent goes to ZMQ: not
        sent whole, so not applied)."""
        if not q:
            return
        group = lanecalls.take(q) if self.versions[s] >= 2 else [q[0]]
        try:
            self._flight[s] = (group, self._send(s, group))
        except _Broken:
            self._down(s)
            self._unserved += q
            q.clear()

    def pending(self) -> bool:
        return bool(self._flight)

    def _abandon(self) -> None:
        """A refusal raised: replies still on their way would desynchronise their connections."""
        for s in self._flight:
            self._fail(s)
        self._flight = {}

    def finish(self) -> tuple[dict[int, Answer], list[Call]]:
        """The answers of begin()'s calls by id(call), and the calls left for ZMQ."""
        queues, flight, left = self._queues, self._flight, self._unserved
        answers: dict[int, Answer] = {}
        # begin_many's pushes are collected at the client's next call, maybe long after they were sent:
        # their answers are waited for from now (over ZMQ an answer already there is read, however late)
        now = time.monotonic()
        self._deadline = max(self._deadline, now + self.timeout)
        if now - self._began >= SLOW_NOTE_SECONDS:
            self._began = now
        try:
            while flight:
                for s in list(flight):
                    group, rids = flight.pop(s)
                    try:
                        got = self._receive_all(s, group, rids)
                    except _Broken:
                        self._down(s)
                        pushed = [c for c in group if c.op == "push_grad"]
                        if pushed:  # it may have been applied: never sent twice
                            raise KVTimeout(
                                failures.shard_gone(
                                    s,
                                    self.addresses[s],
                                    failures.LANE_FAILED,
                                    f"before answering push_grad of {pushed[0].name!r} (not retried: it may "
                                    "have been applied); did the server stop or restart?",
                                )
                            ) from None
                        left += queues[s]
                        queues[s].clear()
                        continue
                    for c, answer in zip(group, got, strict=True):
                        queues[s].popleft()
                        if answer is None:
                            left.append(c)
                        else:
                            answers[id(c)] = answer
                    self._next(s, queues[s])
        except BaseException:
            self._abandon()
            raise
        if self._noted:
            sys.stderr.write(f"[kvstore] answered after {time.monotonic() - self._began:.1f} s\n")
        return answers, left

    def _send(self, s: int, group: list[Call]) -> list[int]:
        """Send `group` as one request, or as one batch of several; their rids."""
        sock = self._connect(s)
        reads.sent("fast_lane")
        rids = [next(self._rid) for _ in group]
        parts = [lanecalls.encode(c, rid) for c, rid in zip(group, rids, strict=True)]
        if len(group) == 1:
            self._send_parts(sock, parts[0])
            return rids
        rid = next(self._rid)
        self._send_parts(sock, lanecalls.batch(parts, rid))
        return [rid, *rids]

    def _send_parts(self, sock: socket.socket, parts: list[bytes | np.ndarray]) -> None:
        """Send `parts` as one request without joining them (a push's 256 KiB of rows is not copied)."""
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        try:
            while views:
                sock.settimeout(self._left())
                sent = sock.sendmsg(views)
                while views and sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                if sent:
                    views[0] = views[0][sent:]
        except OSError as exc:
            raise _Broken from exc

    def _receive_all(self, s: int, group: list[Call], rids: list[int]) -> list[Answer | None]:
        """The answers to `group` (a batch's: every reply read before a refusal among them raises)."""
        if len(group) == 1:
            return [self._receive(s, group[0], rids[0])]
        sock = self.socks[s]
        assert sock is not None
        self._read_into(sock, memoryview(self._head))
        magic, status, got, nbytes = fastwire.REPLY.unpack(self._head)
        if magic != fastwire.REPLY_MAGIC or got != rids[0] or status != fastwire.OK:
            raise _Broken
        before, answers, refused = self._read, [], None
        for c, rid in zip(group, rids[1:], strict=True):
            try:
                answers.append(self._receive(s, c, rid))
            except protocol.RemoteError as exc:
                answers.append(None)
                refused = refused or exc
        if self._read - before != nbytes:
            raise _Broken
        if refused is not None:
            raise refused
        return answers

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
            if status == fastwire.BUSY:
                return None  # not applied: this once over ZMQ
            if status == fastwire.NOT_HERE:
                if c.op != "sample" or "no graph" in message:  # a big sample is asked over ZMQ once
                    key = SAMPLING if c.op == "sample" else PUSHES + c.name if c.op == "push_grad" else c.name
                    self.not_served.add((s, key))  # a push not stepped here says nothing of the table's pulls
                return None
            raise protocol.RemoteError(f"shard {s} ({self.addresses[s]}) refused {c.op}: {message}")
        if c.op == "push_grad":
            if nbytes != fastwire.PUSH_REPLY.size:
                raise _Broken
            got = bytearray(nbytes)
            self._read_into(sock, memoryview(got))
            return Answer({"rows": fastwire.PUSH_REPLY.unpack(got)[0], "skipped": 0}, [])
        n = sum(len(a) for a in c.arrays)
        if c.op == "sample":
            return self._sampled(sock, n, nbytes)
        assert c.out is not None
        if nbytes != n * lanecalls.row_bytes(c.out):  # another dtype than the caller's (say): ZMQ converts
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
                        f"({self.addresses[self.socks.index(sock)]}) on its fast lane (the exchange gives up "
                        f"after {self.timeout:g} s, then goes over ZMQ)\n"
                    )
                continue
            except OSError as exc:
                raise _Broken from exc
            if n == 0:
                raise _Broken
            got += n
            self._read += n

    def _connect(self, s: int) -> socket.socket:
        sock = self.socks[s]
        if sock is not None:
            if _idle_and_open(sock):
                return sock
            # closed (a server that stopped or restarted) or holding bytes no request asked for: a push sent
            # on it would fail after it was sent, not knowing whether it was applied
            self._fail(s)
        host, port, path = self.hosts[s], self.ports[s], self.paths[s]
        try:
            if path is not None:  # beside an ipc:// server: its Unix socket
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(self._left())
                    sock.connect(path)
                except BaseException:
                    sock.close()
                    raise
            else:
                assert host is not None and port
                sock = socket.create_connection((host, port), timeout=self._left())
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(fastwire.hello(self.token, max(1, self.versions[s])))
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

    def unreachable(self, s: int) -> None:
        """Asking `s` its lane port failed: ZMQ for a while, then ask again."""
        self._down(s)

    def _down(self, s: int) -> None:
        """The lane of `s` failed: ZMQ for a while, then ask its port again."""
        self._fail(s)
        self.retry_at[s] = time.monotonic() + RETRY_SECONDS
        self.ports[s], self.paths[s] = None, None

    def close(self) -> None:
        for s in range(len(self.socks)):
            self._fail(s)


def _idle_and_open(sock: socket.socket) -> bool:
    """Whether an idle connection (no request in flight) is still open and has nothing to read."""
    timeout = sock.gettimeout()
    sock.settimeout(0.0)  # a socket with a timeout would wait for something to read first
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(timeout)
    return False  # EOF, or bytes no request asked for
