"""A shard server's workers: each takes the next peer's request from the fair queue and runs it
through the Dispatcher (the same path as standalone mode), or sends the next chunks of a pull stream,
parking it when its client has WINDOW chunks unread. No exception ends a worker: anything unexpected is
logged and answered as an internal error (ShardServer, server.py, inherits these)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import zmq

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.serving.chunkbuffers import ChunkBuffers
from graphtrain.runtime.kvstore.serving.dispatch import Dispatcher, Released
from graphtrain.runtime.kvstore.serving.fairqueue import FairQueue
from graphtrain.runtime.kvstore.serving.metrics import ServerMetrics
from graphtrain.runtime.kvstore.serving.outbox import Outbox
from graphtrain.runtime.kvstore.tables.state import PullStream, ShardTensors
from graphtrain.runtime.kvstore.wire import opargs, protocol
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.placement import is_sticky

log = logging.getLogger("graphtrain.kvstore.server")
WORKER_POLL = 0.2  # seconds a worker waits for a task before looking at the stop flag again
WINDOW = 4  # pull chunks of one stream handed to ZMQ and not yet on the wire
ERROR_CHARS = 500
TABLE_OPS = frozenset({"create", "restore", "set_optimizer"})  # may give a table new memory (fastlane.py)
PATIENCE = 0.005  # seconds a worker waits for its stream's oldest chunk to leave before parking it


@dataclass
class Task:
    req: protocol.Request
    args: opargs.OpArgs
    arrived: float


@dataclass
class Stream:
    """A pull on its way to a peer: chunks on the wire (buffer, tracker) and when it parked."""

    rid: int
    op_start: float
    pull: PullStream
    inflight: list[tuple[torch.Tensor, Any]] = field(default_factory=list)
    parked_at: float = 0.0


class ServerWorkers:
    """The worker side of a ShardServer."""

    state: ShardTensors
    dispatcher: Dispatcher
    metrics: ServerMetrics
    outbox: Outbox
    _queue: FairQueue
    _buffers: ChunkBuffers
    _stop: threading.Event
    _busy: list[str | None]
    _last_done: float
    _parked: list[tuple[bytes, Stream]]
    _parked_lock: threading.Lock
    _fault: str

    # ShardServer's (server.py)
    request_stop: Callable[[], None]
    note_error: Callable[[BaseException], None]
    _release: Callable[[int], None]
    _wake: Callable[[], None]
    _error: Callable[[bytes, int, str], None]
    tables_changed: Callable[[], None]

    def note_error(self, exc: BaseException) -> None:
        """Remember a sticky CUDA error (placement.is_sticky): liveness fails from now on."""
        if is_sticky(exc) and not self._fault:
            self._fault = " ".join(str(exc).split())[:ERROR_CHARS]
            log.error("sticky CUDA error, the server is not live any more: %s", self._fault)

    @staticmethod
    def _error_reply(rid: int, message: str) -> list[Any]:
        text = message if len(message) <= ERROR_CHARS else message[: ERROR_CHARS - 3] + "..."
        return protocol.encode_reply(rid, ok=False, error=text)

    def _worker(self, index: int) -> None:
        with gpu.worker_stream(self.state.device):
            self._work(index)

    def _work(self, index: int) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(WORKER_POLL)
                if item is None:
                    continue
                identity, task = item
                freed = False  # the peer's slot parked with a stream or freed already
                try:
                    if isinstance(task, Stream):
                        self._busy[index] = "pull"
                        freed = self._advance(identity, task)
                    else:
                        self._busy[index] = task.req.op
                        freed = self._run(identity, task)
                finally:
                    self._busy[index] = None
                    self._last_done = time.monotonic()
                    if not freed:
                        self._queue.finish(identity)
            except BaseException as exc:  # noqa: BLE001 - no exception may end a worker
                self.note_error(exc)
                log.exception("worker %d: unexpected error (it keeps serving)", index)

    def _run(self, identity: bytes, task: Task) -> bool:
        """Run one request and answer it; True: the peer's slot is not the caller's to free any more
        (the request became a parked stream, or the slot was freed just before the answer went out).
        Freed first, so the peer's next request, sent once it has the answer, finds the peer idle and
        can be answered on the I/O thread (inline.py): freed after, a small pull right behind a worker's
        request found its peer still running and queued for a worker. The request's effects are all in
        place by then, so that pull sees them."""
        req, shard = task.req, self.metrics.shard
        start = time.perf_counter()
        outcome = "ok"
        replies: list[tuple[bytes, list[Any], int]] = []
        try:
            out = self.dispatcher.run(req, task.args, who=(identity, req.rid))
            if req.op in TABLE_OPS:  # before the answer: a pull sent after it reads the table's memory
                self.tables_changed()
            if isinstance(out, PullStream):
                return self._advance(identity, Stream(req.rid, start, out))
            if isinstance(out, Released):
                for who, rid in out.who:  # type: ignore[misc]
                    replies.append((who, protocol.encode_reply(rid, result=out.result), 0))
            elif out is not None:
                frames = protocol.encode_reply(req.rid, result=out.result, arrays=out.arrays)
                replies.append((identity, frames, sum(a.nbytes for a in out.arrays)))
            if req.op == "shutdown":
                self.request_stop()
        except (protocol.ProtocolError, GraphtrainError, ValueError) as exc:
            outcome = "error"
            self.note_error(exc)
            replies.append((identity, self._error_reply(req.rid, str(exc)), 0))
        except Exception as exc:  # a bug must not kill the server; the client gets its name
            outcome = "error"
            self.note_error(exc)
            log.exception("op %s failed", req.op)
            message = f"internal error in {req.op}: {type(exc).__name__}: {exc}"
            replies.append((identity, self._error_reply(req.rid, message), 0))
        finally:
            self._release(req.nbytes)
        self.metrics.requests.labels(shard, req.op, outcome).inc()
        self.metrics.latency.labels(shard, req.op).observe(time.perf_counter() - start)
        self._queue.finish(identity)
        for who, frames, nbytes in replies:
            self.outbox.post(who, frames, nbytes)
        return True

    def _advance(self, identity: bytes, st: Stream) -> bool:
        """Send a pull's next chunks while fewer than WINDOW of them are on their way; True if parked."""
        pull, t = st.pull, st.pull.t
        row_shape, dtype = t.row_shape, t.data.dtype
        try:
            while not pull.done:
                if self.outbox.is_dropped(identity):
                    return False  # nobody to send to
                if len(st.inflight) >= WINDOW:
                    with contextlib.suppress(zmq.NotDone):  # a client reading at TCP speed frees one by then
                        st.inflight[0][1].wait(PATIENCE)
                for item in [x for x in st.inflight if x[1].done]:
                    st.inflight.remove(item)
                    self._buffers.give(item[0])
                if len(st.inflight) >= WINDOW:  # a slow reader: free the worker, resume when it reads
                    st.parked_at = time.monotonic()
                    self._queue.park(identity)
                    with self._parked_lock:
                        self._parked.append((identity, st))
                    self._wake()  # the I/O thread now looks at parked streams every millisecond
                    return True
                n = pull.next_rows()
                nbytes = n * t.data[:1].numel() * t.data.element_size() if t.rows else 0
                buf = self._buffers.take(nbytes)
                out = buf[:nbytes].view(dtype).view(n, *row_shape)
                i, offset, rows = pull.next(out)
                header, data = protocol.encode_reply(
                    st.rid, arrays=[rows], result={"offset": offset}, chunk=(i, pull.count)
                )
                frame = zmq.Frame(data, track=True, copy=False)
                st.inflight.append((buf, frame.tracker))
                self.outbox.post(identity, [header, frame], nbytes)
        except (protocol.ProtocolError, GraphtrainError, ValueError) as exc:
            self.note_error(exc)
            self._error(identity, st.rid, str(exc))
            self.metrics.requests.labels(self.metrics.shard, "pull", "error").inc()
            return False
        self.metrics.requests.labels(self.metrics.shard, "pull", "ok").inc()
        self.metrics.latency.labels(self.metrics.shard, "pull").observe(time.perf_counter() - st.op_start)
        return False
