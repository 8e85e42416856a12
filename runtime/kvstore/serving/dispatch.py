"""The one request path behind the transports: a validated request executed against a ShardTensors
(the tensors of one shard).

The shard server's workers and the in-process transport of standalone mode both hand requests to a
`Dispatcher` after `opargs.validate`, so both modes check the same things and answer the same
results and errors. What is not the same is only what the transport does with the outcome:

    Reply       one answer (result and arrays)
    PullStream  rows to send chunk by chunk (the server streams them; in process, one chunk)
    Released    a barrier round is complete: answer every participant
    None        a barrier participant waits (answered when its round completes or it expires)

Errors are raised (ProtocolError, GraphtrainError, ValueError: their message goes back to the
client); the caller turns anything else into an "internal error" reply and keeps serving.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphtrain.runtime.dtypes import HALF
from graphtrain.runtime.kvstore.serving.barrier import Barriers
from graphtrain.runtime.kvstore.tables.shm import SegmentCache, view
from graphtrain.runtime.kvstore.tables.state import PullStream, ShardTensors
from graphtrain.runtime.kvstore.wire import opargs, protocol
from graphtrain.runtime.storage.errors import StorageError

if TYPE_CHECKING:
    from graphtrain.runtime.kvstore.serving.metrics import ServerMetrics

BARRIER_MARGIN = 0.5  # seconds a barrier gives up before its client does, so the client hears why


@dataclass
class Reply:
    result: dict[str, Any] = field(default_factory=dict)
    arrays: list[np.ndarray] = field(default_factory=list)


@dataclass
class Released:
    who: list[Hashable]
    result: dict[str, Any]


Outcome = Reply | PullStream | Released | None


class Dispatcher:
    def __init__(
        self,
        state: ShardTensors,
        checkpoint_root: Path | None = None,
        host: str = "",
        metrics: ServerMetrics | None = None,
        chunk_bytes: int = protocol.CHUNK_BYTES,
    ):
        self.state = state
        self.checkpoint_root = checkpoint_root.resolve() if checkpoint_root else None
        self.host = host
        self.metrics = metrics
        self.chunk_bytes = chunk_bytes
        self.barriers = Barriers()
        self._segments = SegmentCache(state.shm_prefix)
        self._segments_lock = threading.Lock()

    def run(
        self, req: protocol.Request, args: opargs.OpArgs, who: Hashable = None, now: float | None = None
    ) -> Outcome:
        """Execute one validated request; `who` names the requester (barriers answer it later)."""
        handler = getattr(self, f"_op_{req.op}")
        return handler(req, args, who, time.monotonic() if now is None else now)

    def close(self) -> None:
        with self._segments_lock:
            self._segments.close()

    # ------------------------------------------------------------------------------------- ops

    def _op_health(self, req: protocol.Request, args: opargs.OpArgs, who: Hashable, now: float) -> Reply:
        return Reply({"shard": self.state.shard, "tensors": len(self.state.tensors)})

    def _op_stats(self, req: protocol.Request, args: opargs.OpArgs, who: Hashable, now: float) -> Reply:
        return Reply(self.state.stats())

    def _op_create(self, req: protocol.Request, a: opargs.CreateArgs, who: Hashable, now: float) -> Reply:
        t = self.state.create(req.name, a.num_rows, a.row_shape, a.dtype, a.lo, a.hi, a.init, keyed=a.keyed)
        return Reply(t.describe())

    def _op_set_optimizer(
        self, req: protocol.Request, a: opargs.OptimizerArgs, who: Hashable, now: float
    ) -> Reply:
        self.state.set_optimizer(req.name, a.config)
        return Reply()

    def _op_pull(self, req: protocol.Request, a: opargs.PullArgs, who: Hashable, now: float) -> PullStream:
        ids = opargs.joined(a.ids)
        stream = self.state.pull_stream(req.name, ids, self.chunk_bytes, a.insert)
        if self.metrics is not None:
            self.metrics.rows_pulled.labels(self.metrics.shard).inc(len(ids))
        return stream

    def _pieces(self, req: protocol.Request, a: opargs.PushArgs) -> list[tuple[np.ndarray, np.ndarray]]:
        """The push's (ids, values) pieces: from its frames, or from the client's shared buffer."""
        if a.shm is None:
            return a.pieces()
        ids = opargs.joined(a.ids)
        t = self.state.get(req.name)
        grads_of_half = req.op == "push_grad" and t.dtype in HALF  # gradients are float32 whatever the rows
        dtype = np.dtype(protocol.DTYPES["float32" if grads_of_half else t.dtype])
        width = math.prod(t.row_shape) * dtype.itemsize
        with self._segments_lock:
            try:
                seg = self._segments.get(a.shm.name)
            except (ValueError, FileNotFoundError) as exc:
                raise protocol.ProtocolError(f"shared-memory buffer: {exc}") from None
        rows = len(ids)
        if a.shm.offset + rows * width > seg.size:
            raise protocol.ProtocolError(
                f"shared-memory buffer of {seg.size} bytes cannot hold {rows} rows at {a.shm.offset}"
            )
        return [(ids, view(seg, (rows, *t.row_shape), dtype, a.shm.offset))]

    def _op_push(self, req: protocol.Request, a: opargs.PushArgs, who: Hashable, now: float) -> Reply:
        n = self.state.push(req.name, self._pieces(req, a))
        if self.metrics is not None:
            self.metrics.rows_pushed.labels(self.metrics.shard, "overwrite").inc(n)
        return Reply({"rows": n})

    def _op_push_grad(self, req: protocol.Request, a: opargs.PushArgs, who: Hashable, now: float) -> Reply:
        return self.push_grad(req, a)

    def push_grad(self, req: protocol.Request, a: opargs.PushArgs, blocking: bool = True) -> Reply:
        """The push's optimizer step; `blocking` False: TableBusy, nothing done, if the table is locked
        (the I/O thread's inline push, serving/inline.py)."""
        pieces = self._pieces(req, a)
        start = time.perf_counter()
        try:
            n, skipped = self.state.push_grad(req.name, pieces, a.step, blocking)
        except StorageError as exc:
            if self.metrics is not None and "NaN or infinity" in str(exc):
                rows = sum(len(ids) for ids, _ in pieces)
                self.metrics.nonfinite.labels(self.metrics.shard, "refused").inc(rows)
            raise
        if self.metrics is not None:
            m, s = self.metrics, self.metrics.shard
            m.optimizer.labels(s).observe(time.perf_counter() - start)
            m.rows_pushed.labels(s, "gradient").inc(sum(len(ids) for ids, _ in pieces) - skipped)
            if skipped:
                m.nonfinite.labels(s, "skipped").inc(skipped)
        return Reply({"rows": n, "skipped": skipped})

    def _op_barrier(
        self, req: protocol.Request, a: opargs.BarrierArgs, who: Hashable, now: float
    ) -> Released | None:
        limit = a.timeout if a.timeout is not None else 3600.0
        deadline = now + max(0.1, limit - BARRIER_MARGIN)
        released = self.barriers.arrive(a.key, a.count, who, deadline)
        if released is None:
            return None
        return Released(released, {"key": a.key, "count": a.count})

    def _checkpoint_path(self, a: opargs.PathArgs) -> Path:
        if self.checkpoint_root is None:
            raise protocol.ProtocolError("this shard has no checkpoint root (--checkpoint-root)")
        path = (self.checkpoint_root / a.path).resolve()
        if path != self.checkpoint_root and self.checkpoint_root not in path.parents:
            raise protocol.ProtocolError(
                f"checkpoint path {protocol.echo(a.path)} leaves the checkpoint root"
            )
        return path

    def _op_checkpoint(self, req: protocol.Request, a: opargs.PathArgs, who: Hashable, now: float) -> Reply:
        return Reply({"pieces": self.state.checkpoint(self._checkpoint_path(a), a.background)})

    def _op_checkpoint_status(
        self, req: protocol.Request, a: opargs.PathArgs, who: Hashable, now: float
    ) -> Reply:
        return Reply(self.state.checkpoint_status(self._checkpoint_path(a)))

    def _op_restore(self, req: protocol.Request, a: opargs.PathArgs, who: Hashable, now: float) -> Reply:
        return Reply({"restored": self.state.restore(self._checkpoint_path(a))})

    def _op_shm_info(self, req: protocol.Request, args: opargs.OpArgs, who: Hashable, now: float) -> Reply:
        tensors = {
            n: {
                "segment": t.shm.name,
                "lo": t.lo,
                "hi": t.hi,
                "row_shape": list(t.row_shape),
                "dtype": t.dtype,
            }
            for n, t in list(self.state.tensors.items())
            if t.shm is not None
        }
        return Reply(
            {
                "host": self.host,
                "prefix": self.state.shm_prefix,
                "tensors": tensors,
                "graph": self.state.graph_info(),
            }
        )

    def _op_sample(self, req: protocol.Request, a: opargs.SampleArgs, who: Hashable, now: float) -> Reply:
        if not a.edges and a.type_fanouts is None:
            src, counts = self.state.sample(opargs.joined(a.seeds), a.fanout, a.seed)
            return Reply(arrays=[src, counts])
        got = self.state.sample_edges(opargs.joined(a.seeds), a.fanout, a.seed, a.type_fanouts)
        etype = got.etype if got.etype is not None else np.full(len(got.src), -1, dtype=np.int64)
        assert got.eid is not None
        return Reply(arrays=[got.src, got.counts, etype, got.eid])

    def _op_shutdown(self, req: protocol.Request, args: opargs.OpArgs, who: Hashable, now: float) -> Reply:
        return Reply()  # the server stops after answering; in process there is nothing to stop
