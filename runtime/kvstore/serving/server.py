"""The shard server: one I/O thread in front of a pool of workers over one ShardTensors (its tables
and node data).

    clients (DEALER, PLAIN) --tcp:// or ipc://--> ROUTER <-> I/O thread --FairQueue--> workers
                                                    ZAP handler (auth.py) |  ^ Outbox (replies)

Why this shape. Before, a zmq.proxy dealt every message round-robin to DEALER workers, each of which
parsed, authenticated and answered it: an exception that was not a ProtocolError ended a worker for
good (four malformed messages made a 4-worker server deaf), a worker waited on its own chunk buffers
queued to a client that had stopped reading (and the proxy kept dealing it requests), and the token
was checked only after a whole message had been buffered. Now:

- Peers authenticate at the connection (auth.py): without the token nothing is delivered, and the
  handshake is read as frames of at most MAX_FRAME_BYTES (ZMQ_MAXMSGSIZE).
- The I/O thread owns the ROUTER. It parses and validates each request (protocol.py; a bad one is
  answered there and never costs a worker), answers `health` (while workers are busy) and small pulls
  itself (inline.py), queues the rest per peer (fairqueue.py: round-robin, one task per peer at a time),
  and sends replies without ever blocking (outbox.py: ZMQ_ROUTER_MANDATORY, bounded backlog per peer,
  a peer that stops reading is dropped and counted). It also runs the ZAP handler, expires barrier
  participants and restarts a worker thread that ended (none should: see below).
- Beside the ROUTER, the fast lane (fastlane.py, cuda/src/fastlane.cpp): a second TCP port where one
  native thread answers small pulls of host tables without Python, ZMQ or a hand-off; the health reply
  names its port. The workers re-register the tables after create, restore and set_optimizer.
- Workers run requests through the Dispatcher (dispatch.py), the same path as standalone mode. No
  exception ends a worker: anything unexpected is logged and answered as an internal error.
- A pull streams CHUNK_BYTES chunks from reusable buffers (a buffer is reused once ZMQ's tracker
  says it is on the wire). A pull whose client has not taken its last WINDOW chunks parks: its worker
  moves on, and the stream resumes when a chunk is taken. ZMTP heartbeats close a connection whose
  peer stopped reading altogether, which frees what ZMQ still held for it.
- `liveness()` tells a deaf server from a busy one: the I/O thread has stopped looping, or requests
  have waited `deaf_seconds` while no worker finished anything. Served at /livez on the metrics port
  and in the health reply. `readiness()` (/readyz, the StatefulSet's readiness probe) is stricter:
  started, not stopping, and the request loop turned within seconds. A sticky CUDA error (an illegal
  address: the GPU context is dead) makes the server not live for good, so it is restarted and
  restores its checkpoint. On a GPU server each worker runs on its own CUDA stream and pull chunks are
  staged in pinned memory (gpu.py).

The role's entry point around it (token, restore, node data, probes, the ready line) is
runtime/roles/shard_server.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.serving import inline
from graphtrain.runtime.kvstore.serving.chunkbuffers import ChunkBuffers
from graphtrain.runtime.kvstore.serving.dispatch import Dispatcher
from graphtrain.runtime.kvstore.serving.fairqueue import FairQueue, PeerState, QueueFull
from graphtrain.runtime.kvstore.serving.fastlane import FastLane, LaneLimits
from graphtrain.runtime.kvstore.serving.metrics import ServerMetrics
from graphtrain.runtime.kvstore.serving.outbox import Dropped, Outbox, Sent
from graphtrain.runtime.kvstore.serving.status import ServerStatus
from graphtrain.runtime.kvstore.serving.workers import ServerWorkers, Stream, Task
from graphtrain.runtime.kvstore.tables.shm import host_id
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire import auth, opargs, protocol

log = logging.getLogger("graphtrain.kvstore.server")
IO_IDLE_MS = 200


@dataclass(frozen=True)
class Limits:
    """What one peer, and all of them together, may cost the server."""

    max_request_bytes: int = protocol.DEFAULT_MAX_REQUEST_BYTES  # one request's frames
    max_queued_bytes: int = 512 << 20  # all requests queued or running; past it the server reads no more
    per_peer_queue: int = 64  # requests one connection may have queued
    backlog_messages: int = 256  # replies waiting for one connection to read...
    backlog_bytes: int = 64 << 20  # ...or their bytes; past either, the connection is dropped
    stall_seconds: float = 30.0  # a connection that takes nothing this long with replies pending: dropped
    heartbeat_seconds: float = 5.0  # ZMTP PING interval; a peer silent for 6 of them is disconnected
    handshake_seconds: float = 10.0  # to complete authentication
    deaf_seconds: float = 300.0  # requests waiting this long with no worker finishing: not live


class ShardServer(ServerWorkers, ServerStatus):
    def __init__(
        self,
        state: ShardTensors,
        token: str,
        bind: str = "tcp://127.0.0.1:0",
        workers: int = 4,
        checkpoint_root: Path | None = None,
        limits: Limits | None = None,
        metrics: ServerMetrics | None = None,
        fast_port: int | None = 0,
    ):
        self._token = auth.check_token(token) if token else b""
        if not self._token:
            raise GraphtrainError("a shard server needs a non-empty token")
        self.state = state
        self.bind = bind
        self.limits = limits or Limits()
        self.metrics = metrics or ServerMetrics(
            state.shard, lambda: self.state.stats()["tensors"], load=self._load
        )
        self.dispatcher = Dispatcher(state, checkpoint_root, host_id(), self.metrics)
        self.ctx = zmq.Context()
        self.address = ""
        self.fast_port = fast_port  # the fast lane's (fastlane.py; None or negative: none)
        self.fastlane: FastLane | None = None
        self.n_workers = max(1, workers)
        self._queue = FairQueue(self.limits.per_peer_queue)
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.outbox = Outbox(
            self._send,
            self._wake,
            self.limits.backlog_messages,
            self.limits.backlog_bytes,
            self.limits.stall_seconds,
        )
        self._buffers = ChunkBuffers(pinned=state.device.type == "cuda")
        self._fault = ""  # a sticky CUDA error seen: the server is not live any more
        self._stop = threading.Event()  # a stop was asked for (shutdown request, signal)
        self._closing = threading.Event()  # stop() runs: the I/O thread drains and leaves
        self._threads: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []
        self._busy: list[str | None] = []
        self._parked: list[tuple[bytes, Stream]] = []
        self._parked_lock = threading.Lock()
        self._queued_bytes = 0
        self._bytes_lock = threading.Lock()
        self._io_beat = 0.0
        self._drain_until = 0.0
        self._last_done = time.monotonic()
        self._log_times: dict[str, float] = {}

    # ------------------------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Bind and start the I/O thread and the workers; returns the bound address (port 0 resolved)."""
        self._zap = self.ctx.socket(zmq.REP)  # bound before the ROUTER accepts anyone
        self._zap.bind(auth.ZAP_ENDPOINT)
        router = self.ctx.socket(zmq.ROUTER)
        auth.secure_server(router)
        lim = self.limits
        router.setsockopt(zmq.MAXMSGSIZE, max(protocol.MAX_FRAME_BYTES, protocol.MAX_HEADER_BYTES))
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a full or vanished peer is reported, not waited on
        router.setsockopt(zmq.SNDHWM, 64)
        router.setsockopt(zmq.RCVHWM, 64)
        router.setsockopt(zmq.HANDSHAKE_IVL, int(lim.handshake_seconds * 1000))
        router.setsockopt(zmq.HEARTBEAT_IVL, int(lim.heartbeat_seconds * 1000))
        router.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(lim.heartbeat_seconds * 6000))
        router.setsockopt(zmq.HEARTBEAT_TTL, int(lim.heartbeat_seconds * 6000))
        self._monitor = router.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        try:
            router.bind(self.bind)
        except zmq.ZMQError as exc:  # a bad, taken or foreign address: one line, nothing left open
            for sock in (router, self._monitor, self._zap):
                sock.close(linger=0)
            self.ctx.term()
            raise GraphtrainError(
                f"--bind {self.bind}: cannot listen there ({zmq.strerror(exc.errno)})"
            ) from None
        self.router = router
        self.address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        try:
            self.fastlane = FastLane.open(
                self.bind, self.fast_port, self._token, LaneLimits(lim.handshake_seconds, lim.stall_seconds)
            )
        except GraphtrainError:  # its port taken: nothing of this server is left open
            for sock in (router, self._monitor, self._zap):
                sock.close(linger=0)
            self.ctx.term()
            raise
        if self.fastlane is not None:
            lane = self.fastlane
            lane.allow_segments(self.state.shm_prefix)  # the same host's clients' push buffers
            self.metrics.scrape_hooks.hooks.append(lambda: lane.scrape(self.metrics))
        self.tables_changed()
        self._io_beat = time.monotonic()
        self._threads = [threading.Thread(target=self._io, name="kv-io", daemon=True)]
        self._threads[0].start()
        self._busy = [None] * self.n_workers
        self._workers = [self._start_worker(i) for i in range(self.n_workers)]
        return self.address

    def _start_worker(self, i: int) -> threading.Thread:
        t = threading.Thread(target=self._worker, args=(i,), name=f"kv-worker-{i}", daemon=True)
        t.start()
        return t

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop was asked for (True) or the timeout passed (False)."""
        return self._stop.wait(timeout)

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, drain: float = 1.0) -> None:
        """Stop serving. Replies already posted (the answer to a shutdown request, say) are sent first:
        up to `drain` seconds for the I/O thread, then a bounded linger."""
        if self._closing.is_set():
            return
        self._stop.set()
        self._drain_until = time.monotonic() + drain
        self._closing.set()
        for t in [*self._threads, *self._workers]:
            if t is not threading.current_thread():
                t.join(timeout=5)
        if self.fastlane is not None:
            self.fastlane.stop()
        self.ctx.term()
        with contextlib.suppress(OSError):
            os.close(self._wake_fd)
        self.dispatcher.close()
        self.state.close()

    # ------------------------------------------------------------------------------ I/O thread

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.eventfd_write(self._wake_fd, 1)

    def _send(self, identity: bytes, frames: list[Any]) -> Sent:
        try:
            self.router.send_multipart([identity, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return Sent.full
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return Sent.gone
            raise
        return Sent.ok

    def _io(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self._zap, zmq.POLLIN)
        poller.register(self._wake_fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        reading, last_sweep = True, time.monotonic()
        try:
            while True:
                now = self._io_beat = time.monotonic()
                if self._closing.is_set() and (not self.outbox.pending() or now > self._drain_until):
                    break
                with self._parked_lock:
                    parked = bool(self._parked)
                timeout = 1 if parked else 5 if self.outbox.pending() else IO_IDLE_MS
                try:
                    events = dict(poller.poll(timeout))
                    if self._zap in events:
                        self._authenticate()
                    if self._monitor in events:
                        self._handshake_failures()
                    if self._wake_fd in events:
                        with contextlib.suppress(BlockingIOError):
                            os.eventfd_read(self._wake_fd)
                    if self.router in events:
                        self._receive()
                    now = time.monotonic()
                    for d in self.outbox.flush(now):
                        self._dropped(d)
                    self._unpark(now)
                    self._expire_barriers(now)
                    if now - last_sweep > 1.0:
                        last_sweep = now
                        self._supervise()
                        self._queue.forget_idle()
                    throttle = self._queued_bytes > self.limits.max_queued_bytes
                    if throttle == reading:  # past the bound: leave requests in ZMQ (TCP pushes back)
                        reading = not throttle
                        poller.modify(self.router, 0 if throttle else zmq.POLLIN)
                except zmq.ContextTerminated:
                    return
                except Exception:  # noqa: BLE001 - the I/O thread must outlive any bug
                    log.exception("I/O loop error (the server keeps serving)")
        finally:
            with contextlib.suppress(zmq.ZMQError):
                self.router.disable_monitor()
                self.router.close(linger=1000)  # flush replies still queued for clients
                self._monitor.close(linger=0)
                self._zap.close(linger=0)

    def _authenticate(self) -> None:
        for _ in range(64):
            try:
                request = self._zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            reply, ok = auth.zap_reply(request, self._token)
            self._zap.send_multipart(reply)
            self.metrics.handshakes.labels(self.metrics.shard, "accepted" if ok else "refused").inc()
            if not ok:
                address = request[3].decode(errors="replace")[:64] if len(request) > 3 else "?"
                self._log_limited("auth", "refused a connection from %s: wrong or missing token", address)

    def _handshake_failures(self) -> None:
        """Connections that failed before asking for authentication (not ZMTP, or no credentials)."""
        while self._monitor.poll(0):
            recv_monitor_message(self._monitor)
            self.metrics.handshakes.labels(self.metrics.shard, "failed").inc()
            self._log_limited("handshake", "a connection failed its handshake (not a graphtrain client?)")

    def _receive(self) -> None:
        for _ in range(64):
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            identity, body = frames[0].bytes, [f.buffer for f in frames[1:]]
            self._admit(identity, body)

    def _admit(self, identity: bytes, body: list[Any]) -> None:
        shard = self.metrics.shard
        if self.outbox.is_dropped(identity):
            self.metrics.bad_requests.labels(shard, "dropped").inc()
            return
        try:
            req = protocol.parse_request(body, self.limits.max_request_bytes)
            args = opargs.validate(req)
        except protocol.ProtocolError as exc:
            self.metrics.bad_requests.labels(shard, "malformed").inc()
            self._error(identity, protocol.lenient_rid(body), str(exc))
            return
        if req.op == "health":  # answered here: a probe must not wait behind busy workers
            self.outbox.post(identity, protocol.encode_reply(req.rid, result=self.health()))
            self.metrics.requests.labels(shard, "health", "ok").inc()
            return
        idle = inline.fits(self.state, req, args) and self._queue.state(identity) is PeerState.idle
        if idle and inline.answer(
            self.dispatcher, self.outbox, self.metrics, identity, req, args, self._error
        ):
            return  # answered by this thread (a push whose table was locked goes on to the workers)
        try:
            self._queue.put(identity, Task(req, args, time.monotonic()))
        except QueueFull:
            self.metrics.bad_requests.labels(shard, "busy").inc()
            self._error(
                identity, req.rid, f"busy: {self.limits.per_peer_queue} requests of this connection wait"
            )
            return
        with self._bytes_lock:
            self._queued_bytes += req.nbytes

    def _error(self, identity: bytes, rid: int, message: str) -> None:
        self.outbox.post(identity, self._error_reply(rid, message))

    def _dropped(self, d: Dropped) -> None:
        for task in self._queue.drop(d.peer):
            if isinstance(task, Task):
                self._release(task.req.nbytes)
        self.metrics.dropped_peers.labels(self.metrics.shard, d.reason).inc()
        if d.reason != "gone":
            self._log_limited("drop", "dropped a connection (%s): it stopped reading its replies", d.reason)

    def _unpark(self, now: float) -> None:
        with self._parked_lock:
            if not self._parked:
                return
            parked, self._parked = self._parked, []
        keep = []
        for identity, st in parked:
            if self.outbox.is_dropped(identity):
                continue  # its peer is gone; the stream ends here
            if any(tracker.done for _, tracker in st.inflight):
                self._queue.resume(identity, st)
            elif now - st.parked_at > self.limits.stall_seconds:
                self._dropped(self.outbox.drop(identity, "stalled"))
            else:
                keep.append((identity, st))
        with self._parked_lock:
            self._parked += keep

    def _expire_barriers(self, now: float) -> None:
        for e in self.dispatcher.barriers.expire(now):
            identity, rid = e.who  # type: ignore[misc]
            self._error(
                identity, rid, f"barrier {e.key!r} timed out: {e.arrived} of {e.count} participants arrived"
            )

    def _supervise(self) -> None:
        if self._closing.is_set():
            return
        self.tables_changed()
        if self.fastlane is not None:
            self.fastlane.count_into(self.metrics)
        for i, t in enumerate(self._workers):
            if not t.is_alive():
                log.error("worker %d ended unexpectedly; starting a new one", i)
                self.metrics.worker_restarts.labels(self.metrics.shard).inc()
                self._busy[i] = None
                self._workers[i] = self._start_worker(i)

    def tables_changed(self) -> None:
        """(Re)register the tables the fast lane serves: after create, restore and set_optimizer."""
        if self.fastlane is not None:
            self.fastlane.sync(self.state.tensors, self.state.graph)

    def _log_limited(self, kind: str, msg: str, *args: Any) -> None:
        """At most one line per kind every 10 s: a flood of bad peers must not fill the disk with logs."""
        now = time.monotonic()
        if now - self._log_times.get(kind, -1e9) >= 10.0:
            self._log_times[kind] = now
            log.warning(msg, *args)

    # --------------------------------------------------------------------------------- workers

    def _release(self, nbytes: int) -> None:
        with self._bytes_lock:
            self._queued_bytes -= nbytes
