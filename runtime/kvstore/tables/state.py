"""What one shard server holds and does, independent of the transport.

A `ShardTensors` keeps, per tensor name, the rows [lo, hi) of a global table (any row shape; float32,
float16 and bfloat16 tables of one row dimension may carry a sparse optimizer and its state) and serves
create-or-attach, pull, push (overwrite), push-gradients (the optimizer runs here: one writer per row),
checkpoint and restore. The ZMQ server (server.py) and the in-process backend of standalone mode
(client.py) both call it, so both modes run the same code. Every id is checked against [lo, hi) before
anything is read or written.

Initial values come from inits.py, whatever the split. On a GPU server (--device cuda) only learnable
tables and their optimizer state are on the GPU (placement.py decides; gpu.py orders the streams and
stages the copies); everything else is held and served as on a CPU server.
"""

from __future__ import annotations

import contextlib
import os
import threading
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.checkpoint import increment
from graphtrain.runtime.checkpoint import snapshot as snap
from graphtrain.runtime.data.cache import Signature
from graphtrain.runtime.dtypes import NUMPY as DTYPES
from graphtrain.runtime.dtypes import to_numpy, to_torch
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.kvstore.tables.held_checkpoints import ShardCheckpoints
from graphtrain.runtime.kvstore.tables.held_graph import ShardGraph
from graphtrain.runtime.kvstore.tables.writes import ShardWrites
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native.backend import choose
from graphtrain.runtime.optim import OptimConfig, make_state
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage import keyed as kd
from graphtrain.runtime.storage import placement as place
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.inits import init_rows
from graphtrain.runtime.storage.placement import check_usable, table_device
from graphtrain.runtime.storage.shard import TensorShard
from graphtrain.runtime.storage.sizes import state_bytes


class PullStream:
    """A pull's rows, chunk by chunk. The server gathers each chunk into a reusable buffer while the
    previous one is on the wire, and can stop between chunks (a client that does not read) without
    holding a worker; the in-process transport takes the rows in one chunk."""

    def __init__(self, t: TensorShard, local: torch.Tensor, chunk_rows: int, keys: np.ndarray | None = None):
        self.t, self.local, self.chunk_rows = t, local, chunk_rows
        self.keys = keys  # an evaluation pull of a dynamic table: keys not held (local -1) read their init
        self.count = max(1, -(-len(local) // chunk_rows))
        self.index = 0

    @property
    def done(self) -> bool:
        return self.index >= self.count

    def next_rows(self) -> int:
        """Rows of the next chunk."""
        start = self.index * self.chunk_rows
        return max(0, min(len(self.local), start + self.chunk_rows) - start)

    def next(self, out: torch.Tensor | None = None) -> tuple[int, int, np.ndarray]:
        """(chunk index, first row's position in the pull, rows) of the next chunk, into `out` if given."""
        i, start = self.index, self.index * self.chunk_rows
        self.index += 1
        local = self.local[start : start + self.chunk_rows]
        if self.keys is None:
            return i, start, ShardTensors.gather(self.t, local, out)
        rows = ShardTensors.gather(self.t, local.clamp_min(0), out)
        kd.fill_unseen(rows, self.keys[start : start + len(local)], local.cpu().numpy(), self.t.keyed, self.t)
        return i, start, rows


class ShardTensors(ShardWrites, ShardCheckpoints, ShardGraph):
    """The tensors of one shard server."""

    def __init__(
        self,
        shard: int = 0,
        use_shm: bool = False,
        shm_prefix: str = "graphtrain",
        restore_from: Path | None = None,
        device: str = "cpu",
        free: place.MemorySource = place.free_bytes,
        staging_bytes: int = snap.STAGING_BYTES,
        checkpoint_rate: float = 0.0,
        full_every: int = increment.FULL_EVERY,
        trusted: dict[str, Signature] | None = None,
    ):
        self.device = table_device(device)
        check_usable(self.device)
        self.free = free  # free memory of a device (placement.free_bytes; injected in tests)
        self.shard = shard
        self.use_shm = use_shm
        self.shm_prefix = shm_prefix
        # A restarted server restores each tensor from this checkpoint when a client (re)creates it.
        self.restore_from = restore_from
        self.trusted = trusted or {}  # files hashed before start: not hashed again while unchanged
        self.graph: GraphPart | None = None
        self.graph_shm: dict[str, shared_memory.SharedMemory] = {}  # "indptr"/"indices" when use_shm
        self.tensors: dict[str, TensorShard] = {}
        self._create_lock = threading.Lock()
        # the checkpoint written in the background (one at a time), its staging bound and bytes/s
        self.background: snap.BackgroundCheckpoint | None = None
        self.staging_bytes, self.checkpoint_rate, self.full_every = staging_bytes, checkpoint_rate, full_every
        self._checkpoint_lock = threading.Lock()

    # ------------------------------------------------------------------------------------ lookup

    def get(self, name: str) -> TensorShard:
        try:
            return self.tensors[name]
        except KeyError:
            raise StorageError(f"no tensor named {name!r} on shard {self.shard}") from None

    @staticmethod
    def local_ids(t: TensorShard, ids: np.ndarray) -> torch.Tensor:
        if ids.ndim != 1 or ids.dtype != np.int64:
            raise StorageError(f"ids must be a 1-D int64 array, got {ids.dtype} {ids.shape}")
        if ids.size:
            bad = np.flatnonzero((ids < t.lo) | (ids >= t.hi))
            if bad.size:
                first = int(bad[0])
                raise StorageError(
                    f"id {int(ids[first])} (position {first}) of {t.name!r} is outside this shard's rows "
                    f"[{t.lo}, {t.hi})"
                )
        return gpu.to_device(ids - t.lo, t.data.device)

    # ------------------------------------------------------------------------------------- create

    def create(
        self,
        name: str,
        num_rows: int,
        row_shape: tuple[int, ...],
        dtype: str,
        lo: int,
        hi: int,
        init: dict[str, Any] | None = None,
        node_data: bool = False,
        keyed: dict[str, Any] | None = None,
    ) -> TensorShard:
        """Create the tensor, or attach to it if it exists with the same description. A create that
        fails (a checkpoint that does not fit, say) leaves nothing behind: no table, no segment. The rows
        start in host memory (in shared memory with --shm where placement.shareable allows); a restored
        optimizer moves them where placement puts learnable tables. `node_data`: the partition's.
        `keyed` {"shards", "evict"}: a dynamic vocabulary (keyed.py), rows [lo, hi) its share of the
        capacity num_rows, never in shared memory."""
        if dtype not in DTYPES:
            raise StorageError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
        if not (0 <= lo <= hi <= num_rows) or num_rows < 0:
            raise StorageError(f"row range [{lo}, {hi}) does not fit a table of {num_rows} rows")
        if any(d < 1 for d in row_shape) or len(row_shape) > 3:
            raise StorageError(f"row shape {row_shape} must have 0-3 positive dims")
        with self._create_lock:
            if keyed:
                kd.check_create(name, self.shard, keyed, lo, hi, row_shape, dtype)
            if name in self.tensors:
                t = self.tensors[name]
                kd.check_attach(t, keyed)
                if (t.num_rows, t.row_shape, t.dtype, t.lo, t.hi) != (num_rows, row_shape, dtype, lo, hi):
                    raise StorageError(
                        f"tensor {name!r} exists as {t.num_rows}x{t.row_shape} {t.dtype} "
                        f"rows [{t.lo}, {t.hi}); asked for {num_rows}x{row_shape} {dtype} rows [{lo}, {hi})"
                    )
                return t
            shape = (hi - lo, *row_shape)
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(DTYPES[dtype]).itemsize
            place.fits(f"table {name!r}", nbytes, place.CPU, self.free)
            shared = self.use_shm and not keyed and place.shareable(dtype, row_shape, node_data, self.device)
            data, shm = self._allocate(name, shape, to_torch(dtype), shared)
            t = TensorShard(name, num_rows, row_shape, dtype, lo, hi, data, shm=shm)
            del data
            try:
                if keyed:  # rows take their key's initial value when a key takes them
                    t.keyed = kd.KeyedRows(
                        name, self.shard, keyed["shards"], hi - lo, keyed["evict"], init or {}
                    )
                    t.data.zero_()
                else:
                    init_rows(init or {}, lo, hi, row_shape, t.data)
                src = None if t.scratch else self.restore_from  # scratch rows are in no checkpoint
                if src is not None and ckpt.restore_into(src, t, trusted=self.trusted):
                    self._move(t, t.config, t.state)
            except BaseException:
                t.release()
                raise
            self.tensors[name] = t
            return t

    def _allocate(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, shared: bool
    ) -> tuple[torch.Tensor, shared_memory.SharedMemory | None]:
        """Host memory for a new table: a shared-memory segment if `shared`, else huge pages for the
        rows the CPU core steps (float32, float16, bfloat16: half tables were left on 4 KB pages, and
        their step gained as much from 2 MB ones, 20.6 -> 15.1 ms for 100,000 bfloat16 rows of 128),
        else torch's."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        if shared and nbytes > 0:
            seg = self._segment(name, nbytes)
            return torch.frombuffer(seg.buf, dtype=dtype).view(shape), seg
        from graphtrain.runtime.native.optim import TABLE_DTYPES  # the CPU core's

        if dtype in TABLE_DTYPES and len(shape) == 2:
            from graphtrain.runtime.native.memory import empty

            return empty(shape, dtype), None
        return torch.empty(shape, dtype=dtype), None

    def _segment(self, name: str, nbytes: int) -> shared_memory.SharedMemory:
        """A new shared-memory segment named after the job, this shard, this process and `name`. The pid
        keeps a restarted server clear of what a SIGKILLed predecessor could not unlink; a segment of
        the same name can then only be a dead process' whose pid was reused, and is replaced. A ':' of
        the tensor's name is escaped: Python's resource tracker splits its records at ':' (and died
        with a traceback on scratch:layer0)."""
        full = f"{self.shm_prefix}-{self.shard}-{os.getpid()}-{name.replace(':', '%3A')}"
        try:
            return shared_memory.SharedMemory(create=True, size=nbytes, name=full)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                stale = shared_memory.SharedMemory(name=full)
                stale.close()
                stale.unlink()
            return shared_memory.SharedMemory(create=True, size=nbytes, name=full)

    def set_optimizer(self, name: str, config: dict[str, Any]) -> None:
        """Attach a sparse optimizer (idempotent for the same config; a different one is refused). The
        state is allocated, and a learnable table moved to the GPU, before anything is recorded: an
        allocation that fails is an error naming the table and the bytes, the table stays as it was
        and a retry can succeed."""
        t = self.get(name)
        if not place.trainable(t.dtype, t.row_shape):
            raise StorageError(f"tensor {name!r} ({t.dtype}, rows {t.row_shape}) cannot have an optimizer")
        try:
            cfg = OptimConfig(**config)
        except (TypeError, ValueError) as exc:
            raise StorageError(f"optimizer of {name!r}: {exc}") from None
        if cfg.unit_complex and (len(t.row_shape) != 1 or t.row_shape[0] % 2):
            raise StorageError(
                f"optimizer of {name!r}: unit_complex needs rows of an even width, not {t.row_shape}"
            )
        with t.lock:
            if t.config is not None:
                if t.config != cfg:
                    raise StorageError(f"tensor {name!r} already has optimizer {t.config}")
                return
            self._move(t, cfg, None)

    def _move(self, t: TensorShard, cfg: OptimConfig | None, state: dict[str, torch.Tensor] | None) -> None:
        """Give `t` the optimizer `cfg` with `state` (None: a fresh one) on the device placement picks,
        moving its rows there if they are elsewhere; all or nothing (call under the table's lock)."""
        where = place.placement(t.dtype, t.row_shape, cfg is not None, self.device, t.shm is not None)
        moving = t.data.device != where
        need = t.data.numel() * t.data.element_size() if moving else 0
        if cfg is not None and (state is None or moving):
            need += state_bytes(cfg.kind, cfg.step_count, t.rows, t.row_shape[0])
        place.fits(f"optimizer state of {t.name!r}", need, where, self.free)
        try:
            if cfg is not None and state is None:
                state = make_state(cfg, t.rows, t.row_shape[0], where)
            state = {k: v.to(where) for k, v in (state or {}).items()}
            gpu.wait_written(t)
            data = t.data.to(where) if moving else t.data
        except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
            raise StorageError(
                f"optimizer state of {t.name!r}: {need} bytes do not fit on {where} "
                f"({type(exc).__name__}); the table is unchanged"
            ) from None
        t.data, t.state, t.config = data, state, cfg
        gpu.mark_written(t)

    # --------------------------------------------------------------------------------- data ops

    def pull_stream(self, name: str, ids: np.ndarray, chunk_bytes: int, insert: bool = True) -> PullStream:
        """The rows of `ids` in chunks of about `chunk_bytes` (every id checked before the first). A
        dynamic table's keys: `insert` (a training pull) gives unseen keys rows, else they read their
        initial value."""
        t = self.get(name)
        row = max(1, int(np.prod(t.row_shape, dtype=np.int64)) * np.dtype(DTYPES[t.dtype]).itemsize)
        if t.keyed is None:
            return PullStream(t, self.local_ids(t, ids), max(1, chunk_bytes // row))
        with t.lock:
            local = kd.rows_of(t, ids, insert)
        return PullStream(t, local, max(1, chunk_bytes // row), None if insert else ids)

    @staticmethod
    def gather(t: TensorShard, local: torch.Tensor, out: torch.Tensor | None = None) -> np.ndarray:
        """Rows `local` of `t` in host memory (into `out` if given), whatever the table's device, dtype
        and shape (placement.gather_route picks the core or torch)."""
        data = t.data  # one table: set_optimizer may move it meanwhile
        local = local.to(data.device, non_blocking=True)
        route = place.gather_route(data.dtype, data.dim(), data.is_contiguous(), choose(data.device))
        if route is place.Gather.NATIVE_CPU and len(local):
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            work = len(local) * data.shape[1]
            return native.gather(data, local, threads=threads(work), out=out).numpy()
        if data.is_cuda:  # after the table's last write, on this worker's stream; rows to the host
            gpu.wait_written(t)
            use_core = route is place.Gather.CUDA_CORE and len(local)
            rows = cuda.gather(data, local) if use_core else data.index_select(0, local)
            return gpu.download(rows, out)
        if out is not None:
            torch.index_select(data, 0, local, out=out)
            return to_numpy(out)
        return to_numpy(data.index_select(0, local))  # a bfloat16 table's rows as their bits

    # ---------------------------------------------------------------------------- checkpointing

    def stats(self) -> dict[str, Any]:
        graph = (
            None
            if self.graph is None
            else {"lo": self.graph.lo, "hi": self.graph.hi, "edges": int(len(self.graph.indices))}
        )
        return {
            "shard": self.shard,
            "graph": graph,
            "tensors": {n: t.describe() for n, t in self.tensors.items()},
        }

    def close(self) -> None:
        if self.background is not None:
            self.background.abort()
        for t in self.tensors.values():
            t.release()
        if self.graph_shm:
            self.graph = None  # drop the views before closing their segments
            for seg in self.graph_shm.values():
                with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped at exit
                    seg.close()
                seg.unlink()
            self.graph_shm = {}
