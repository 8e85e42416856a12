"""The transport to shard-server processes: one authenticated DEALER per shard, bounded waits.

Every call has a timeout; idempotent operations (pull, create, stats, ...) are retried a bounded number
of times, the others (push_grad, barrier) are not, since a retried gradient push could be applied
twice. Giving up raises KVTimeout naming the shard, its address and the operation: a dead server is
reported, never waited for forever. The connections a call was given up on, or still waited on when
it raised (another shard's refusal, say), are replaced (abandon; zmq_exchange.py), so a request still
queued on one is never delivered to a server that comes up at that address later. A resend goes on the
same connection, behind the copy it repeats: a slow server starts a peer's requests in order
(serving/fairqueue.py), so an overloaded one never starts that copy after the caller's next request. A
server that refuses the token is reported as soon as the handshake fails (a socket-monitor event), not
after the timeout; so is a connection that closes while calls on it wait (a server stopped or
restarted): their replies can never come (a reconnection is a new peer to the server), so the
idempotent ones are resent at once and the others fail at once.

Calls to several shards are in flight together; a call's arrays go out in frames of at most
protocol.MAX_FRAME_BYTES (the server's per-frame limit). Pull replies arrive as chunks and are copied
straight to their rows of the caller's output.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from graphtrain.contract import failures
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.client import reads
from graphtrain.runtime.kvstore.client.fastlane import LANE_OPS, FastPulls
from graphtrain.runtime.kvstore.client.samehost import SameHost
from graphtrain.runtime.kvstore.client.transport import (
    Answer,
    Call,
    KVAuthError,
    KVTimeout,
)
from graphtrain.runtime.kvstore.client.zmq_exchange import ZmqExchange
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.kvstore.wire import auth, protocol
from graphtrain.runtime.storage.shard import TensorShard

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 2
_HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
_MONITORED = _HANDSHAKE_EVENTS | zmq.EVENT_DISCONNECTED


class ZmqTransport:
    """One DEALER per shard; requests to several shards are in flight together."""

    max_frame_bytes = protocol.MAX_FRAME_BYTES
    chunked_pushes = True
    half_gradients = True

    def __init__(
        self,
        addresses: list[str],
        token: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        shm: bool = False,
        fast: bool = True,
    ):
        if not token:
            raise GraphtrainError("a token is needed to talk to the shard servers")
        try:
            auth.check_token(token)
        except ValueError as exc:
            raise GraphtrainError(str(exc)) from None
        self.addresses = list(addresses)
        self.num_shards = len(addresses)
        self.timeout = timeout
        self.retries = retries
        self.ctx = zmq.Context()
        self.ctx.setsockopt(zmq.LINGER, 0)  # every socket, monitors included: closing never waits
        self._token = token
        self.sockets: list[zmq.Socket[Any]] = []
        self.monitors: list[zmq.Socket[Any]] = []
        for addr in addresses:
            try:
                sock, mon = self._dealer(addr)
            except zmq.ZMQError as exc:  # not an endpoint at all (no scheme, a bad port): say which
                for open_ in (*self.sockets, *self.monitors):
                    open_.close(linger=0)
                self.ctx.term()
                raise GraphtrainError(
                    f"shard-server address {addr!r}: {exc.strerror} (give tcp://host:port or ipc://path)"
                ) from None
            self.sockets.append(sock)
            self.monitors.append(mon)
        self._rid = itertools.count(1)
        self._lock = threading.Lock()  # ZMQ sockets are not thread-safe
        self.shm = shm
        self._host = SameHost()
        self._open: ZmqExchange | None = None  # begin_many's calls, collected before anything else
        self._lane_open: float | None = None  # begin_many's calls on the fast lane: their timeout
        self._open_names: frozenset[str | None] = frozenset()  # the tables begin_many's calls write
        self._fast = FastPulls(self.addresses, token, timeout) if fast else None  # small pulls' lane

    def _dealer(self, addr: str) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
        """An authenticated DEALER connecting to `addr`, and its monitor."""
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        auth.secure_client(s, self._token)
        mon = s.get_monitor_socket(_MONITORED)
        try:
            s.connect(addr)
        except zmq.ZMQError:
            s.disable_monitor()
            s.close(linger=0)
            mon.close(linger=0)
            raise
        return s, mon

    def abandon(self, shard: int) -> None:
        """Drop the connection to `shard` after a call on it was given up (ZmqExchange.drop), and open a
        new one. ZMQ keeps what a DEALER sent while its server was down queued, and delivers it to
        whichever server comes up at the address next: a push_grad reported as failed (KVTimeout) would be
        applied there later, behind the caller's back (to a restarted shard that restored its checkpoint,
        or to another job's server on a reused port). Closing the socket discards that queue; later calls
        go on the new one."""
        sock, mon = self.sockets[shard], self.monitors[shard]
        sock.disable_monitor()
        sock.close(linger=0)
        mon.close(linger=0)
        self.sockets[shard], self.monitors[shard] = self._dealer(self.addresses[shard])

    # ------------------------------------------------------------------ shared memory (same host)

    def _discover(self) -> None:
        """Ask every shard which of its tables are in shared memory on this host, and map them."""
        answers = self.call_many([Call(s, "shm_info") for s in range(self.num_shards)])
        self._host.update([a.result for a in answers])

    def local_view(self, shard: int, name: str) -> tuple[np.ndarray, int] | None:
        if not self.shm:
            return None
        with self._lock:  # its rows must include the updates in flight; another table's are read at
            if name in self._open_names:  # once (a batch's features while its embedding's push is applied)
                self._settle()
        if (shard, name) not in self._host.views:
            self._discover()  # a table created since the last look
            self._host.views.setdefault((shard, name), None)
        return self._host.views[(shard, name)]

    def push_buffer(self, nbytes: int) -> tuple[Any, str] | None:
        if not self.shm:
            return None
        self.settle()  # the servers may still be reading the buffer of a push in flight
        if self._host.shards is None:
            self._discover()
        if self._host.push is None:
            return None
        seg = self._host.push.take(nbytes)
        return seg, seg.name

    def local_graph(self, shard: int) -> GraphPart | None:
        if not self.shm:
            return None
        if self._host.shards is None:
            self._discover()
        return self._host.graphs.get(shard)

    def direct(self, name: str) -> list[TensorShard] | None:
        return None  # the pieces are in other processes: their rows cross a socket or shared memory

    def is_local(self, shard: int) -> bool:
        return self.shm and self._host.shards is not None and shard in self._host.shards

    # ------------------------------------------------------------------------------- requests

    def _send(self, c: Call, rid: int) -> None:
        frames = protocol.encode_request(c.op, rid, c.name, list(c.arrays), c.args)
        self.sockets[c.shard].send_multipart(frames, copy=False)
        reads.sent("zmq")

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]:
        with self._lock:
            self._settle()  # every earlier call answered: a pull on the fast lane sees their effects
            wait = self.timeout if timeout is None else timeout
            if self._fast is None or not any(c.op in LANE_OPS for c in calls):
                return ZmqExchange(self, calls, wait).finish()
            return self._fast_lane(self._fast, calls, wait)

    def _lane_calls(self, fast: FastPulls, calls: list[Call], wait: float) -> list[Call]:
        """The calls the fast lane may carry (client/fastlane.py), after asking the lane ports not known."""
        ask = sorted(fast.unknown(calls))
        if ask:
            try:
                health = ZmqExchange(self, [Call(s, "health") for s in ask], wait).finish()
            except KVTimeout:  # the calls themselves go over ZMQ, and fail there in their own words
                for s in ask:
                    fast.unreachable(s)
                return []
            for s, a in zip(ask, health, strict=True):
                r = a.result
                fast.learn(s, r.get("fast_port", 0), r.get("fast_version", 1), r.get("fast_path", ""))
        return [c for c in calls if fast.eligible(c)]

    def _fast_lane(self, fast: FastPulls, calls: list[Call], wait: float) -> list[Answer]:
        """The eligible pulls, samples and pushes over the fast lane; the others over ZMQ at the same
        time (one round trip for both); whatever the lane could not serve over ZMQ after it (a push it
        left was not applied)."""
        lane = self._lane_calls(fast, calls, wait)
        if not lane:
            return ZmqExchange(self, calls, wait).finish()
        on_lane = {id(c) for c in lane}
        others = [c for c in calls if id(c) not in on_lane]
        # A refusal raised by one exchange leaves the other's answers unread (replies to rids nobody waits
        # for are dropped) and its calls given up: drop() replaces their connections, nothing stays queued.
        beside = ZmqExchange(self, others, wait) if others else None
        again: ZmqExchange | None = None
        try:
            served, left = fast.run(lane)
            for c in lane:
                # counted as "socket" by KVClient, which could not know (pushes are not reads)
                if id(c) in served and c.op != "push_grad":
                    reads.moved(c.shard, "socket", "fast_lane", sum(len(a) for a in c.arrays))
            # what the lane left (a push it did not apply) is sent before anything beside it may raise
            again = ZmqExchange(self, left, wait) if left else None
            found = dict(zip(map(id, others), beside.finish() if beside is not None else [], strict=True))
            if again is not None:
                found.update(zip(map(id, left), again.finish(), strict=True))
        except BaseException:
            for ex in (beside, again):
                if ex is not None:
                    ex.drop()
            raise
        found.update(served)
        return [found[id(c)] for c in calls]

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        """Send `calls` (pushes with wait=False) and return: the next call, or settle(), collects their
        answers. Pushes the fast lane carries go there; what it leaves goes over ZMQ then."""
        with self._lock:
            self._settle()
            self._open_names = frozenset(c.name for c in calls)
            wait = self.timeout if timeout is None else timeout
            lane = [] if self._fast is None else self._lane_calls(self._fast, calls, wait)
            if lane:
                assert self._fast is not None
                # a push the lane leaves (busy, not served, not sent) is resent over ZMQ at the next call,
                # after the caller's next push_grad reused the arrays it was given (the client's dedup
                # workspace): it takes its own copy now (<= 256 KiB each)
                sent = {id(c) for c in lane}
                calls = [c for c in calls if id(c) not in sent]
                owned = [dataclasses.replace(c, arrays=[np.array(a) for a in c.arrays]) for c in lane]
                self._fast.begin(owned)
                self._lane_open = wait
            if calls:
                self._open = ZmqExchange(self, calls, wait)

    def settle(self) -> None:
        with self._lock:
            self._settle()

    def _settle(self) -> None:
        try:
            if self._lane_open is not None:
                wait, self._lane_open = self._lane_open, None
                assert self._fast is not None
                _, left = self._fast.finish()
                if left:  # pushes the lane did not apply (busy, not served, not sent): now over ZMQ
                    ZmqExchange(self, left, wait).finish()
        finally:  # the ZMQ calls' answers are collected even when a lane push was refused
            try:
                if self._open is not None:
                    exchange, self._open = self._open, None
                    exchange.finish()
            finally:  # only now: a reader of these tables on another thread waits on the lock till here
                self._open_names = frozenset()

    def check_handshakes(self, shards: set[int]) -> set[int]:
        """Raise KVAuthError if a server among `shards` refused this client's handshake, KVTimeout if one
        whose shared memory this client maps closed its connection (stopped or restarted); the shards
        whose connection closed since the last look."""
        lost = set()
        for s in shards:
            mon = self.monitors[s]
            while mon.poll(0):
                event = recv_monitor_message(mon)
                if event["event"] == zmq.EVENT_DISCONNECTED:
                    if self.is_local(s):  # what we mapped is no longer what it serves
                        raise KVTimeout(  # stopped or restarted: nothing here can tell which
                            failures.shard_gone(
                                s,
                                self.addresses[s],
                                failures.CLOSED_ITS,
                                "(the server stopped, or was restarted): the rows this client maps from its "
                                "shared memory may no longer be its rows; restart from the last checkpoint",
                            )
                        )
                    lost.add(s)
                    continue
                if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    raise KVAuthError(
                        f"shard {s} ({self.addresses[s]}) refused this client's token (authentication failed)"
                    )
                raise KVAuthError(
                    f"shard {s} ({self.addresses[s]}): the connection's handshake failed or timed out "
                    f"({_event_name(event['event'])}): is the server running (not stopped), and a "
                    "graphtrain shard server of this version?"
                )
        return lost

    def close(self) -> None:
        try:
            self.settle()  # a push still in flight is delivered (or its failure raised), not dropped
        finally:
            self._host.close()
            if self._fast is not None:
                self._fast.close()
            for s in self.sockets:
                s.disable_monitor()
                s.close(linger=0)
            for m in self.monitors:
                m.close(linger=0)
            self.ctx.term()


def _event_name(code: int) -> str:
    for name in dir(zmq):
        if name.startswith("EVENT_") and getattr(zmq, name) == code:
            return name
    return str(code)
