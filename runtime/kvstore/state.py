"""What one shard server holds and does, independent of the transport.

A `ShardState` keeps, per tensor name, the rows [lo, hi) of a global table (any row shape, float32
tables may carry a sparse optimizer and its state) and serves create-or-attach, pull, push (overwrite),
push-gradients (the optimizer runs here: one writer per row), checkpoint and restore. The ZMQ server
(server.py) and the in-process backend of standalone mode (client.py) both call it, so both modes run
the same code. Every id is checked against [lo, hi) before anything is read or written.

Initial values are generated in fixed global blocks of rows, each from its own seed, so a table's
initial rows do not depend on how it is split across servers.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.kvstore.protocol import DTYPES, ProtocolError
from graphtrain.runtime.native import available as native_available
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step

INIT_BLOCK_ROWS = 1 << 16
TORCH_DTYPES = {
    "float32": torch.float32,
    "int64": torch.int64,
    "int32": torch.int32,
    "float64": torch.float64,
}


@dataclass
class TensorShard:
    """Rows [lo, hi) of the global tensor `name` of shape (num_rows, *row_shape)."""

    name: str
    num_rows: int
    row_shape: tuple[int, ...]
    dtype: str
    lo: int
    hi: int
    data: torch.Tensor
    config: OptimConfig | None = None
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one writer per row
    shm: shared_memory.SharedMemory | None = None
    from_partition: bool = False  # node data loaded from the partition files: not checkpointed

    @property
    def rows(self) -> int:
        return self.hi - self.lo

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_rows": self.num_rows,
            "row_shape": list(self.row_shape),
            "dtype": self.dtype,
            "lo": self.lo,
            "hi": self.hi,
            "bytes": self.data.numel() * self.data.element_size(),
            "optimizer": None if self.config is None else self.config.kind,
            "shm": None if self.shm is None else self.shm.name,
        }


def init_rows(spec: dict[str, Any], lo: int, hi: int, row_shape: tuple[int, ...], out: torch.Tensor) -> None:
    """Fill `out` (rows lo..hi) from an init spec, the same values whatever the split.

    spec: {"kind": "zeros"|"uniform"|"normal", "low", "high", "mean", "std", "seed"}.
    """
    kind = spec.get("kind", "zeros")
    if kind == "zeros" or out.numel() == 0:
        out.zero_()
        return
    if kind not in ("uniform", "normal"):
        raise ProtocolError(f"init kind must be zeros, uniform or normal, got {kind!r}")
    seed = int(spec.get("seed", 0))
    first, last = lo // INIT_BLOCK_ROWS, (hi - 1) // INIT_BLOCK_ROWS
    for block in range(first, last + 1):
        b_lo = block * INIT_BLOCK_ROWS
        a, b = max(lo, b_lo), min(hi, b_lo + INIT_BLOCK_ROWS)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + block)
        vals = torch.empty((INIT_BLOCK_ROWS, *row_shape), dtype=out.dtype)
        if kind == "uniform":
            vals.uniform_(float(spec.get("low", -1.0)), float(spec.get("high", 1.0)), generator=gen)
        else:
            vals.normal_(float(spec.get("mean", 0.0)), float(spec.get("std", 1.0)), generator=gen)
        out[a - lo : b - lo] = vals[a - b_lo : b - b_lo]


@dataclass
class GraphPart:
    """The in-edges of one partition's nodes [lo, hi): in-CSR over local rows, global source ids."""

    lo: int
    hi: int
    indptr: np.ndarray
    indices: np.ndarray

    def sample(self, seeds: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to `fanout` in-neighbours of every seed, without replacement (fanout < 0: all of them).

        Returns (sources, counts): the sampled sources of seed i are the next counts[i] entries. The
        native sampler draws per (seed, node); the numpy fallback per request."""
        if seeds.ndim != 1 or seeds.dtype != np.int64:
            raise ProtocolError(f"seeds must be a 1-D int64 array, got {seeds.dtype} {seeds.shape}")
        if native_available():
            from graphtrain.runtime.native.graph import sample_neighbors

            try:
                return sample_neighbors(
                    self.indptr, self.indices, self.lo, np.ascontiguousarray(seeds), fanout, seed
                )
            except SparseInputError as exc:
                raise ProtocolError(str(exc)) from None
        bad = np.flatnonzero((seeds < self.lo) | (seeds >= self.hi))
        if bad.size:
            raise ProtocolError(
                f"seed {int(seeds[bad[0]])} is outside this partition's nodes [{self.lo}, {self.hi})"
            )
        local = seeds - self.lo
        starts = self.indptr[local]
        degs = self.indptr[local + 1] - starts
        counts = degs if fanout < 0 else np.minimum(degs, fanout)
        out = np.empty(int(counts.sum()), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        full = counts == degs
        if full.any():  # every in-neighbour
            f_starts, f_counts = starts[full], counts[full]
            src_pos = _ranges(f_starts, f_counts)
            dst_pos = _ranges(offsets[:-1][full], f_counts)
            out[dst_pos] = self.indices[src_pos]
        part = ~full
        if part.any():  # `fanout` of them: the smallest random keys within each seed's edges
            p_starts, p_degs = starts[part], degs[part]
            keys = np.random.default_rng([seed, int(seeds[0]), len(seeds)]).random(int(p_degs.sum()))
            seg = np.repeat(np.arange(len(p_degs)), p_degs)
            order = np.lexsort((keys, seg))
            rank = np.arange(len(order)) - np.repeat(np.cumsum(p_degs) - p_degs, p_degs)
            keep = order[rank < fanout]  # positions (in the concatenated edge lists) of the winners
            edge = _ranges(p_starts, p_degs)[keep]
            dst_pos = _ranges(offsets[:-1][part], np.full(len(p_degs), fanout))
            out[dst_pos] = self.indices[edge]
        return out, counts.astype(np.int64)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + c) for each (s, c)."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)


class ShardState:
    """The tensors of one shard server."""

    def __init__(
        self,
        shard: int = 0,
        use_shm: bool = False,
        shm_prefix: str = "graphtrain",
        restore_from: Path | None = None,
    ):
        self.shard = shard
        self.use_shm = use_shm
        self.shm_prefix = shm_prefix
        # A restarted server restores each tensor from this checkpoint when a client (re)creates it.
        self.restore_from = restore_from
        self.graph: GraphPart | None = None
        self.graph_shm: dict[str, shared_memory.SharedMemory] = {}  # "indptr"/"indices" when use_shm
        self.tensors: dict[str, TensorShard] = {}
        self._create_lock = threading.Lock()

    # ------------------------------------------------------------------------------------ lookup

    def get(self, name: str) -> TensorShard:
        try:
            return self.tensors[name]
        except KeyError:
            raise ProtocolError(f"no tensor named {name!r} on shard {self.shard}") from None

    @staticmethod
    def local_ids(t: TensorShard, ids: np.ndarray) -> torch.Tensor:
        if ids.ndim != 1 or ids.dtype != np.int64:
            raise ProtocolError(f"ids must be a 1-D int64 array, got {ids.dtype} {ids.shape}")
        if ids.size:
            bad = np.flatnonzero((ids < t.lo) | (ids >= t.hi))
            if bad.size:
                first = int(bad[0])
                raise ProtocolError(
                    f"id {int(ids[first])} (position {first}) of {t.name!r} is outside this shard's rows "
                    f"[{t.lo}, {t.hi})"
                )
        return torch.from_numpy(ids - t.lo)

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
    ) -> TensorShard:
        """Create the tensor, or attach to it if it exists with the same description."""
        if dtype not in DTYPES:
            raise ProtocolError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
        if not (0 <= lo <= hi <= num_rows) or num_rows < 0:
            raise ProtocolError(f"row range [{lo}, {hi}) does not fit a table of {num_rows} rows")
        if any(d < 1 for d in row_shape) or len(row_shape) > 3:
            raise ProtocolError(f"row shape {row_shape} must have 0-3 positive dims")
        with self._create_lock:
            if name in self.tensors:
                t = self.tensors[name]
                if (t.num_rows, t.row_shape, t.dtype, t.lo, t.hi) != (num_rows, row_shape, dtype, lo, hi):
                    raise ProtocolError(
                        f"tensor {name!r} exists as {t.num_rows}x{t.row_shape} {t.dtype} "
                        f"rows [{t.lo}, {t.hi}); asked for {num_rows}x{row_shape} {dtype} rows [{lo}, {hi})"
                    )
                return t
            data, shm = self._allocate(name, (hi - lo, *row_shape), TORCH_DTYPES[dtype])
            init_rows(init or {}, lo, hi, row_shape, data)
            t = TensorShard(name, num_rows, row_shape, dtype, lo, hi, data, shm=shm)
            if self.restore_from is not None:
                ckpt.restore_into(self.restore_from, t)
            self.tensors[name] = t
            return t

    def _allocate(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, shared_memory.SharedMemory | None]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        if self.use_shm and nbytes > 0:
            seg = shared_memory.SharedMemory(
                create=True, size=nbytes, name=f"{self.shm_prefix}-{self.shard}-{name}"
            )
            return torch.frombuffer(seg.buf, dtype=dtype).view(shape), seg
        if dtype == torch.float32 and native_available() and len(shape) == 2:
            from graphtrain.runtime.native.optim import empty

            return empty(shape), None
        return torch.empty(shape, dtype=dtype), None

    def set_optimizer(self, name: str, config: dict[str, Any]) -> None:
        """Attach a sparse optimizer (idempotent for the same config; a different one is refused)."""
        t = self.get(name)
        if t.dtype != "float32" or len(t.row_shape) != 1:
            raise ProtocolError(f"tensor {name!r} ({t.dtype}, rows {t.row_shape}) cannot have an optimizer")
        try:
            cfg = OptimConfig(**config)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"optimizer of {name!r}: {exc}") from None
        with t.lock:
            if t.config is not None:
                if t.config != cfg:
                    raise ProtocolError(f"tensor {name!r} already has optimizer {t.config}")
                return
            t.config = cfg
            t.state = make_state(cfg, t.rows, t.row_shape[0])

    # --------------------------------------------------------------------------------- data ops

    def pull_chunks(self, name: str, ids: np.ndarray, chunk_rows: int, buffer: Any = None):
        """Yield (offset, rows) of `ids` in chunks of at most `chunk_rows` (ids checked first).
        `buffer(rows, row_shape, dtype)`, if given, supplies reusable output arrays."""
        t = self.get(name)
        local = self.local_ids(t, ids)
        for start in range(0, max(len(local), 1), chunk_rows):
            part = local[start : start + chunk_rows]
            out = buffer(len(part), t.row_shape, t.data.dtype) if buffer is not None else None
            yield start, self._gather(t, part, out)

    def pull(self, name: str, ids: np.ndarray) -> np.ndarray:
        t = self.get(name)
        return self._gather(t, self.local_ids(t, ids))

    @staticmethod
    def _gather(t: TensorShard, local: torch.Tensor, out: torch.Tensor | None = None) -> np.ndarray:
        if t.data.dtype == torch.float32 and t.data.dim() == 2 and native_available() and len(local):
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            return native.gather(t.data, local, threads=threads(), out=out).numpy()
        if out is not None:
            torch.index_select(t.data, 0, local, out=out)
            return out.numpy()
        return t.data.index_select(0, local).numpy()

    def _values(
        self, t: TensorShard, ids: np.ndarray, chunks: list[np.ndarray]
    ) -> list[tuple[int, np.ndarray]]:
        """(offset, values) per chunk, checked against the ids and the row shape."""
        out, offset = [], 0
        want = np.dtype(DTYPES[t.dtype])
        for i, c in enumerate(chunks):
            if c.dtype != want or tuple(c.shape[1:]) != t.row_shape:
                raise ProtocolError(
                    f"values[{i}] for {t.name!r} must be {t.dtype} rows of shape {t.row_shape}, "
                    f"got {c.dtype} {tuple(c.shape)}"
                )
            out.append((offset, c))
            offset += c.shape[0]
        if offset != len(ids):
            raise ProtocolError(f"{len(ids)} ids but {offset} value rows for {t.name!r}")
        return out

    def push(self, name: str, ids: np.ndarray, chunks: list[np.ndarray]) -> int:
        """Overwrite rows (the last of duplicate ids wins). Returns the rows written."""
        t = self.get(name)
        local = self.local_ids(t, ids)
        parts = self._values(t, ids, chunks)
        with t.lock:
            for offset, values in parts:
                idx = local[offset : offset + len(values)]
                t.data.index_copy_(0, idx, torch.from_numpy(np.ascontiguousarray(values)))
        return len(ids)

    def push_grad(self, name: str, ids: np.ndarray, chunks: list[np.ndarray], step: int | None = None) -> int:
        """Apply the tensor's optimizer to gradient rows. Chunks must not share ids (the client
        deduplicates before pushing); duplicates inside one chunk are reduced by the optimizer's rule.
        `step`: the client's step count, used by Adam with step_count "global"."""
        t = self.get(name)
        if t.config is None:
            raise ProtocolError(f"tensor {name!r} has no optimizer; send set_optimizer first")
        local = self.local_ids(t, ids)
        parts = self._values(t, ids, chunks)
        global_adam = t.config.kind == "adam" and t.config.step_count == "global"
        updated = 0
        with t.lock:
            # One optimizer step for the whole push: every frame runs at the client's step count (so all
            # shards agree even when a push skips some of them), else at this shard's next count.
            target = (step if step is not None else int(t.state["step"][0]) + 1) if global_adam else 0
            for offset, values in parts:
                if global_adam:
                    t.state["step"][0] = target - 1  # sparse_step adds one
                grads = torch.from_numpy(np.ascontiguousarray(values))
                try:
                    updated += sparse_step(
                        t.config, t.data, t.state, local[offset : offset + len(values)], grads
                    )
                except SparseInputError as exc:
                    raise ProtocolError(str(exc)) from None
        return updated

    # ---------------------------------------------------------------------------- checkpointing

    def checkpoint(self, root: Path) -> list[dict[str, Any]]:
        """Write every tensor's rows and optimizer state under `root` (atomic per piece). Node data
        loaded from the partition is left out: the partition files already hold it, unchanged."""
        pieces = []
        for t in self.tensors.values():
            if t.from_partition and t.config is None:
                continue
            with t.lock:
                pieces.append(ckpt.write_piece(root, t))
        return pieces

    def restore(self, root: Path) -> list[str]:
        """Load every tensor this shard holds from a checkpoint written by any number of shards."""
        restored = []
        for t in self.tensors.values():
            with t.lock:
                if ckpt.restore_into(root, t):
                    restored.append(t.name)
        return restored

    def sample(self, seeds: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        if self.graph is None:
            raise ProtocolError(f"shard {self.shard} holds no graph partition (start it with --partition)")
        return self.graph.sample(seeds, fanout, seed)

    def load_partition(self, config_path: Path, part: int) -> list[str]:
        """Hold partition `part`: its in-edges (for sampling) and its dense node data (features, labels,
        masks) as tensors "ndata.<key>", rows in the partition's new-id range. Sparse features are not
        held (project them first: graph.featureProjection)."""
        from graphtrain.runtime.partition import load_config, load_part

        cfg = load_config(config_path)
        data = load_part(cfg, part, verify=True, mmap=True)
        lo, hi = data.node_range
        self.graph = GraphPart(
            lo, hi, self._structure("indptr", data.indptr), self._structure("indices", data.indices)
        )
        loaded = []
        for key, value in data.ndata.items():
            if hasattr(value, "tocsr"):
                continue
            arr = np.asarray(value)
            if arr.dtype == np.bool_ or arr.dtype == np.int8:
                arr = arr.astype(np.int32)
            dtype = {
                np.dtype(np.float32): "float32",
                np.dtype(np.int64): "int64",
                np.dtype(np.int32): "int32",
                np.dtype(np.float64): "float64",
            }.get(arr.dtype)
            if dtype is None:
                continue
            t = self.create(f"ndata.{key}", int(cfg.data["num_nodes"]), tuple(arr.shape[1:]), dtype, lo, hi)
            t.data.copy_(torch.from_numpy(np.ascontiguousarray(arr.astype(DTYPES[dtype]))))
            t.from_partition = True
            loaded.append(t.name)
        return loaded

    def _structure(self, name: str, array: np.ndarray) -> np.ndarray:
        """The partition's CSR array, copied into shared memory with --shm so that trainers on this host
        sample it themselves (no request, no server CPU), as they read features; else the file's map."""
        array = np.asarray(array)
        if not self.use_shm or array.nbytes == 0:
            return array
        seg = shared_memory.SharedMemory(
            create=True, size=array.nbytes, name=f"{self.shm_prefix}-{self.shard}-graph.{name}"
        )
        self.graph_shm[name] = seg
        out = np.ndarray(array.shape, dtype=array.dtype, buffer=seg.buf)
        out[:] = array
        return out

    def graph_info(self) -> dict[str, Any] | None:
        """Where this shard's structure is in shared memory (for shm_info), if it is."""
        if self.graph is None or set(self.graph_shm) != {"indptr", "indices"}:
            return None
        g = self.graph
        return {
            "lo": g.lo,
            "hi": g.hi,
            "indptr": [self.graph_shm["indptr"].name, len(g.indptr)],
            "indices": [self.graph_shm["indices"].name, len(g.indices)],
        }

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
        for t in self.tensors.values():
            if t.shm is not None:
                t.data = torch.empty(0)
                t.shm.close()
                t.shm.unlink()
                t.shm = None
        if self.graph_shm:
            self.graph = None  # drop the views before closing their segments
            for seg in self.graph_shm.values():
                with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped at exit
                    seg.close()
                seg.unlink()
            self.graph_shm = {}
