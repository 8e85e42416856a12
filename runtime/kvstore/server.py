"""The shard server: a ZMQ ROUTER in front of a small pool of worker threads over one ShardState.

    clients (DEALER) ──tcp:// or ipc://──> ROUTER ──proxy──> inproc DEALER ──> worker threads

A pool, not one loop, so that a 51 MB push does not stall the 1,000-row pulls behind it: the proxy
hands each message to a free worker, the native core releases the GIL, and writes to one table are
serialised by that table's lock (one writer per row) while reads go on. Every request is validated
by protocol.parse_request and authenticated with the shared token (constant-time compare) before a
handler runs; a bad request gets an error reply naming the problem, and the server keeps serving.
The ROUTER also caps message size (ZMQ_MAXMSGSIZE), so an oversized message closes that connection
instead of being buffered. Pull replies stream in chunks of a few MB. Barriers are answered when the
last participant arrives, without holding a worker.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hmac
import json
import logging
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import torch
import zmq

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore import protocol as P
from graphtrain.runtime.kvstore.metrics import ServerMetrics
from graphtrain.runtime.kvstore.shm import SegmentCache, job_prefix, view
from graphtrain.runtime.kvstore.state import ShardState

log = logging.getLogger("graphtrain.kvstore.server")
POLL_MS = 200


def host_id() -> str:
    """This machine's identity for shared-memory eligibility: hostname and boot id."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    return f"{socket.gethostname()}:{boot}"


class ShardServer:
    def __init__(
        self,
        state: ShardState,
        token: str,
        bind: str = "tcp://127.0.0.1:0",
        workers: int = 4,
        checkpoint_root: Path | None = None,
        max_request_bytes: int = P.DEFAULT_MAX_REQUEST_BYTES,
        metrics: ServerMetrics | None = None,
    ):
        if not token:
            raise GraphtrainError("a shard server needs a non-empty token")
        self.state = state
        self._token = token.encode()
        self.bind = bind
        self.workers = max(1, workers)
        self.checkpoint_root = checkpoint_root.resolve() if checkpoint_root else None
        self.max_request_bytes = max_request_bytes
        self.metrics = metrics or ServerMetrics(state.shard, lambda: self.state.stats()["tensors"])
        self.ctx = zmq.Context()
        self.address = ""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._barriers: dict[str, list[tuple[bytes, int]]] = {}
        self._barrier_lock = threading.Lock()
        self._backend = f"inproc://workers-{id(self)}"
        self._host = host_id()
        self._segments = SegmentCache(state.shm_prefix)
        self._segments_lock = threading.Lock()

    # ------------------------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Bind and start the proxy and workers; returns the bound address (port 0 resolved)."""
        frontend = self.ctx.socket(zmq.ROUTER)
        frontend.setsockopt(zmq.MAXMSGSIZE, self.max_request_bytes + P.MAX_HEADER_BYTES)
        frontend.setsockopt(zmq.ROUTER_MANDATORY, 0)
        frontend.setsockopt(zmq.SNDHWM, 0)
        frontend.setsockopt(zmq.RCVHWM, 0)
        frontend.bind(self.bind)
        self.address = frontend.getsockopt_string(zmq.LAST_ENDPOINT)
        backend = self.ctx.socket(zmq.DEALER)
        backend.setsockopt(zmq.SNDHWM, 0)
        backend.setsockopt(zmq.RCVHWM, 0)
        backend.bind(self._backend)
        control = self.ctx.socket(zmq.PAIR)
        control.bind(f"inproc://control-{id(self)}")
        self._control = self.ctx.socket(zmq.PAIR)
        self._control.connect(f"inproc://control-{id(self)}")

        def proxy() -> None:
            try:
                zmq.proxy_steerable(frontend, backend, None, control)
            except zmq.ContextTerminated:
                pass
            finally:
                frontend.close(linger=1000)  # flush replies still queued for clients
                for s in (backend, control):
                    s.close(linger=0)

        self._threads = [threading.Thread(target=proxy, name="kv-proxy", daemon=True)]
        for i in range(self.workers):
            self._threads.append(threading.Thread(target=self._worker, name=f"kv-worker-{i}", daemon=True))
        for t in self._threads:
            t.start()
        return self.address

    def wait(self, timeout: float | None = None) -> bool:
        """Block until shutdown was requested (True) or the timeout passed (False)."""
        return self._stop.wait(timeout)

    def stop(self, drain: float = 0.3) -> None:
        """Stop serving. Replies already sent by workers (the answer to a shutdown request, say) still
        cross the proxy and the socket: `drain` seconds for the proxy, then a bounded linger."""
        if self._stop.is_set() and not self._threads:
            return
        self._stop.set()
        time.sleep(drain)
        with contextlib.suppress(zmq.ZMQError, AttributeError):  # never started, or already stopped
            self._control.send(b"TERMINATE")
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        self._threads = []
        with contextlib.suppress(AttributeError):
            self._control.close(linger=0)
        self.ctx.term()
        self._segments.close()
        self.state.close()

    # --------------------------------------------------------------------------------- workers

    def _worker(self) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(self._backend)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        pool = ChunkPool()
        try:
            while not self._stop.is_set():
                if not poller.poll(POLL_MS):
                    continue
                frames = sock.recv_multipart(copy=False)
                identity, body = frames[0].bytes, [f.buffer for f in frames[1:]]
                self._serve(sock, identity, body, pool)
        except zmq.ContextTerminated:
            pass
        finally:
            sock.close(linger=0)

    def _serve(
        self, sock: zmq.Socket, identity: bytes, body: list[Any], pool: ChunkPool | None = None
    ) -> None:
        reply = Replier(sock, identity, pool)
        try:
            req = P.parse_request(body, self.max_request_bytes)
        except P.ProtocolError as exc:
            self.metrics.bad_requests.labels(self.metrics.shard, "malformed").inc()
            reply.send(P.encode_reply(_lenient_rid(body), ok=False, error=str(exc)))
            return
        if not hmac.compare_digest(req.token.encode(), self._token):
            self.metrics.bad_requests.labels(self.metrics.shard, "unauthenticated").inc()
            reply.send(
                P.encode_reply(req.rid, ok=False, error="authentication failed: wrong or missing token")
            )
            return
        start = time.perf_counter()
        outcome = "ok"
        try:
            handler = getattr(self, f"_op_{req.op}")
            handler(req, reply)
        except (P.ProtocolError, GraphtrainError, ValueError) as exc:
            outcome = "error"
            reply.send(P.encode_reply(req.rid, ok=False, error=str(exc)))
        except Exception as exc:  # a bug must not kill the server; the client gets its name
            outcome = "error"
            log.exception("op %s failed", req.op)
            reply.send(
                P.encode_reply(
                    req.rid, ok=False, error=f"internal error in {req.op}: {type(exc).__name__}: {exc}"
                )
            )
        finally:
            labels = (self.metrics.shard, req.op)
            self.metrics.requests.labels(*labels, outcome).inc()
            self.metrics.latency.labels(*labels).observe(time.perf_counter() - start)

    # ------------------------------------------------------------------------------------- ops

    def _op_health(self, req: P.Request, reply: Replier) -> None:
        reply.send(
            P.encode_reply(req.rid, result={"shard": self.state.shard, "tensors": len(self.state.tensors)})
        )

    def _op_stats(self, req: P.Request, reply: Replier) -> None:
        reply.send(P.encode_reply(req.rid, result=self.state.stats()))

    def _op_create(self, req: P.Request, reply: Replier) -> None:
        a = req.args
        row_shape = P.arg(a, "row_shape", list)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in row_shape):
            raise P.ProtocolError("argument 'row_shape' must be a list of integers")
        t = self.state.create(
            req.name,
            P.arg(a, "num_rows", int),
            tuple(row_shape),
            P.arg(a, "dtype", str),
            P.arg(a, "lo", int),
            P.arg(a, "hi", int),
            P.arg(a, "init", dict, {}),
        )
        reply.send(P.encode_reply(req.rid, result=t.describe()))

    def _op_set_optimizer(self, req: P.Request, reply: Replier) -> None:
        self.state.set_optimizer(req.name, P.arg(req.args, "config", dict))
        reply.send(P.encode_reply(req.rid))

    def _op_pull(self, req: P.Request, reply: Replier) -> None:
        if len(req.arrays) != 1:
            raise P.ProtocolError(f"pull takes one frame of ids, got {len(req.arrays)}")
        ids = req.arrays[0]
        t = self.state.get(req.name)
        per_row = max(1, int(t.data[:1].numel()) * t.data.element_size()) if t.rows else 4
        chunk_rows = max(1, P.CHUNK_BYTES // per_row)
        count = max(1, -(-len(ids) // chunk_rows))
        pool = reply.pool
        for i, (offset, rows) in enumerate(self.state.pull_chunks(req.name, ids, chunk_rows, pool.take)):
            pool.sent(
                reply.send(
                    P.encode_reply(req.rid, arrays=[rows], result={"offset": offset}, chunk=(i, count)),
                    track=True,
                )
            )
        self.metrics.rows_pulled.labels(self.metrics.shard).inc(len(ids))

    def _push_args(self, req: P.Request) -> tuple[Any, list[Any]]:
        """(ids, value chunks): values in frames, or in a client's shared-memory buffer (same host)."""
        buf = req.args.get("shm")
        if buf is None:
            if len(req.arrays) < 2:
                raise P.ProtocolError(
                    f"{req.op} takes ids and at least one frame of values, got {len(req.arrays)}"
                )
            return req.arrays[0], req.arrays[1:]
        if len(req.arrays) != 1 or not isinstance(buf, dict):
            raise P.ProtocolError(f"{req.op} with a shared-memory buffer takes one frame of ids")
        t = self.state.get(req.name)
        rows = len(req.arrays[0])
        offset = P.arg(buf, "offset", int)
        width = int(np.prod(t.row_shape, dtype=np.int64)) * np.dtype(P.DTYPES[t.dtype]).itemsize
        with self._segments_lock:
            try:
                seg = self._segments.get(P.arg(buf, "name", str))
            except (ValueError, FileNotFoundError) as exc:
                raise P.ProtocolError(f"shared-memory buffer: {exc}") from None
        if offset < 0 or offset + rows * width > seg.size:
            raise P.ProtocolError(
                f"shared-memory buffer of {seg.size} bytes cannot hold {rows} rows at {offset}"
            )
        return req.arrays[0], [view(seg, (rows, *t.row_shape), np.dtype(P.DTYPES[t.dtype]), offset)]

    def _op_push(self, req: P.Request, reply: Replier) -> None:
        ids, chunks = self._push_args(req)
        n = self.state.push(req.name, ids, chunks)
        self.metrics.rows_pushed.labels(self.metrics.shard, "overwrite").inc(n)
        reply.send(P.encode_reply(req.rid, result={"rows": n}))

    def _op_push_grad(self, req: P.Request, reply: Replier) -> None:
        ids, chunks = self._push_args(req)
        step = P.arg(req.args, "step", (int, type(None)), None)
        start = time.perf_counter()
        n = self.state.push_grad(req.name, ids, chunks, step)
        self.metrics.optimizer.labels(self.metrics.shard).observe(time.perf_counter() - start)
        self.metrics.rows_pushed.labels(self.metrics.shard, "gradient").inc(len(ids))
        reply.send(P.encode_reply(req.rid, result={"rows": n}))

    def _op_barrier(self, req: P.Request, reply: Replier) -> None:
        key = P.arg(req.args, "key", str)
        count = P.arg(req.args, "count", int)
        if count < 1 or count > 100_000:
            raise P.ProtocolError(f"barrier count must be in [1, 100000], got {count}")
        with self._barrier_lock:
            waiting = self._barriers.setdefault(key, [])
            waiting.append((reply.identity, req.rid))
            if len(waiting) < count:
                return  # answered when the last participant arrives
            del self._barriers[key]
        for who, rid in waiting:
            reply.send_to(who, P.encode_reply(rid, result={"key": key, "count": count}))

    def _checkpoint_path(self, req: P.Request) -> Path:
        if self.checkpoint_root is None:
            raise P.ProtocolError("this server has no checkpoint root (--checkpoint-root)")
        rel = P.arg(req.args, "path", str)
        path = (self.checkpoint_root / rel).resolve()
        if path != self.checkpoint_root and self.checkpoint_root not in path.parents:
            raise P.ProtocolError(f"checkpoint path {rel!r} leaves the checkpoint root")
        return path

    def _op_checkpoint(self, req: P.Request, reply: Replier) -> None:
        pieces = self.state.checkpoint(self._checkpoint_path(req))
        reply.send(P.encode_reply(req.rid, result={"pieces": pieces}))

    def _op_restore(self, req: P.Request, reply: Replier) -> None:
        restored = self.state.restore(self._checkpoint_path(req))
        reply.send(P.encode_reply(req.rid, result={"restored": restored}))

    def _op_shm_info(self, req: P.Request, reply: Replier) -> None:
        tensors = {
            n: {
                "segment": t.shm.name,
                "lo": t.lo,
                "hi": t.hi,
                "row_shape": list(t.row_shape),
                "dtype": t.dtype,
            }
            for n, t in self.state.tensors.items()
            if t.shm is not None
        }
        reply.send(
            P.encode_reply(
                req.rid,
                result={
                    "host": self._host,
                    "prefix": self.state.shm_prefix,
                    "tensors": tensors,
                    "graph": self.state.graph_info(),
                },
            )
        )

    def _op_sample(self, req: P.Request, reply: Replier) -> None:
        if len(req.arrays) != 1:
            raise P.ProtocolError(f"sample takes one frame of seeds, got {len(req.arrays)}")
        fanout = P.arg(req.args, "fanout", int)
        if fanout == 0 or fanout < -1:
            raise P.ProtocolError(f"fanout must be positive or -1 (all), got {fanout}")
        src, counts = self.state.sample(req.arrays[0], fanout, P.arg(req.args, "seed", int, 0))
        reply.send(P.encode_reply(req.rid, arrays=[src, counts]))

    def _op_shutdown(self, req: P.Request, reply: Replier) -> None:
        reply.send(P.encode_reply(req.rid))
        self._stop.set()


class ChunkPool:
    """A worker's reusable pull buffers. A chunk handed to ZMQ zero-copy is only reused once ZMQ's
    tracker says the I/O thread is done with it; fresh buffers per chunk would be faulted in page by
    page (and madvised ones compacted), which costs more than the transfer."""

    SLOTS = 6

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []
        self.trackers: list[zmq.MessageTracker | None] = []
        self.next = 0
        self._taken: int | None = None

    def take(self, rows: int, row_shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        numel = rows * int(np.prod(row_shape, dtype=np.int64))
        i = self.next
        self.next = (self.next + 1) % self.SLOTS
        if i >= len(self.buffers):
            self.buffers.append(torch.empty(0, dtype=torch.uint8))
            self.trackers.append(None)
        tracker = self.trackers[i]
        if tracker is not None and not tracker.done:
            tracker.wait(30)
        self.trackers[i] = None
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if self.buffers[i].numel() < nbytes:
            self.buffers[i] = torch.empty(nbytes, dtype=torch.uint8)
        self._taken = i
        return self.buffers[i][:nbytes].view(dtype).view(rows, *row_shape)

    def sent(self, tracker: zmq.MessageTracker | None) -> None:
        if self._taken is not None:
            self.trackers[self._taken] = tracker
            self._taken = None


class Replier:
    """Sends replies through a worker's own socket: to the requesting client, or (barriers) to any
    client by identity. No extra sockets on the backend: the proxy would deal requests to them too."""

    def __init__(self, sock: zmq.Socket, identity: bytes, pool: ChunkPool | None = None):
        self.sock = sock
        self.identity = identity
        self.pool = pool or ChunkPool()

    def send(self, frames: list[Any], track: bool = False) -> zmq.MessageTracker | None:
        return self.sock.send_multipart([self.identity, *frames], copy=False, track=track)

    def send_to(self, identity: bytes, frames: list[Any]) -> None:
        self.sock.send_multipart([identity, *frames], copy=False)


def _lenient_rid(body: list[Any]) -> int:
    """The rid of a request that failed validation, if its header can be read at all (else -1)."""
    try:
        header = msgpack.unpackb(bytes(body[0])[: P.MAX_HEADER_BYTES], raw=False, max_bin_len=0)
        rid = header.get("rid") if isinstance(header, dict) else None
        return rid if isinstance(rid, int) and rid >= 0 else -1
    except Exception:
        return -1


def announce(address: str, metrics_port: int | None) -> None:
    """The one line a launcher reads to learn where the server listens (the token is never printed)."""
    sys.stdout.write(json.dumps({"event": "ready", "address": address, "metrics_port": metrics_port}) + "\n")
    sys.stdout.flush()


def serve(
    token: str,
    bind: str,
    shard: int = 0,
    workers: int = 4,
    checkpoint_root: Path | None = None,
    restore: str | None = None,
    partition: Path | None = None,
    part: int | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    use_shm: bool = False,
    max_request_bytes: int = P.DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Run a shard server until a shutdown request or SIGTERM/SIGINT."""
    import signal

    from prometheus_client import start_http_server

    from graphtrain.runtime.kvstore import checkpoint as ckpt
    from graphtrain.runtime.native.memory import keep_freed_memory

    keep_freed_memory()
    restore_from = None
    if restore:
        if checkpoint_root is None:
            raise GraphtrainError("--restore needs --checkpoint-root")
        # a damaged latest falls back to the one before; a damaged or incomplete one is refused at start
        restore_from = ckpt.restore_point(checkpoint_root, restore, say=log.warning)
    state = ShardState(
        shard,
        use_shm=use_shm,
        shm_prefix=job_prefix(token),
        restore_from=restore_from,
    )
    if partition is not None:
        loaded = state.load_partition(partition, shard if part is None else part)
        log.info("holding %s", ", ".join(loaded) or "no node data")
    server = ShardServer(state, token, bind, workers, checkpoint_root, max_request_bytes)
    address = server.start()
    port = None
    if metrics_port is not None:
        http, _ = start_http_server(metrics_port, metrics_host, registry=server.metrics.registry)
        port = http.server_port
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server._stop.set())
    faulthandler.enable()  # a crash prints where it happened
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack to stderr
    announce(address, port)
    try:
        while not server.wait(0.5):
            pass
    finally:
        server.stop()
