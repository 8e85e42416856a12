"""What one shard server holds and does, independent of the transport.

A `ShardTensors` keeps, per tensor name, the rows [lo, hi) of a global table (any row shape, float32
tables may carry a sparse optimizer and its state) and serves create-or-attach, pull, push (overwrite),
push-gradients (the optimizer runs here: one writer per row), checkpoint and restore. The ZMQ server
(server.py) and the in-process backend of standalone mode (client.py) both call it, so both modes run
the same code. Every id is checked against [lo, hi) before anything is read or written.

Initial values are generated in fixed global blocks of rows, each from its own seed, so a table's
initial rows do not depend on how it is split across servers.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from graphtrain.runtime.dtypes import NUMPY as DTYPES
from graphtrain.runtime.dtypes import to_torch, wire_name
from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.kvstore.protocol import ProtocolError
from graphtrain.runtime.kvstore.shard import TensorShard
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native.backend import CoreBackend, choose
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step

INIT_BLOCK_ROWS = 1 << 16


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
        if choose() is CoreBackend.CPU:
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


def fits(what: str, nbytes: int) -> None:
    """Refuse an allocation this machine cannot hold, before making it (a bad create must not end the
    server by the kernel's out-of-memory killer)."""
    available = psutil.virtual_memory().available
    if nbytes > available:
        raise ProtocolError(
            f"{what} needs {nbytes / 2**30:.2f} GiB; this server has {available / 2**30:.2f} GiB available"
        )


def nonfinite_rows(values: np.ndarray) -> np.ndarray | None:
    """Which rows of `values` hold a NaN or an infinity, or None when none does (the common case: one
    vectorised scan of the native core, ~28 GB/s)."""
    if values.dtype.kind != "f" or values.size == 0:
        return None
    if values.dtype == np.float32 and choose() is CoreBackend.CPU:
        from graphtrain.runtime.native.optim import first_nonfinite

        if first_nonfinite(torch.from_numpy(np.ascontiguousarray(values))) < 0:
            return None
    elif np.isfinite(values).all():
        return None
    return ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)


class PullStream:
    """A pull's rows, chunk by chunk. The server gathers each chunk into a reusable buffer while the
    previous one is on the wire, and can stop between chunks (a client that does not read) without
    holding a worker; the in-process transport takes the rows in one chunk."""

    def __init__(self, t: TensorShard, local: torch.Tensor, chunk_rows: int):
        self.t, self.local, self.chunk_rows = t, local, chunk_rows
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
        return i, start, ShardTensors.gather(self.t, self.local[start : start + self.chunk_rows], out)


def table_device(text: str) -> torch.device:
    """Where a shard server keeps its tables: cpu or cuda[:N].

    Raises:
        ProtocolError: not a device, or neither cpu nor cuda.
    """
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ProtocolError(f"--device {text!r} is not a device: cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ProtocolError(f"a shard server holds its tables on the CPU or a GPU, not on {device}")
    return device


def check_usable(device: torch.device) -> None:
    """A GPU and the CUDA core usable on `device`, checked at start: a server never announces ready
    and then fails its first create.

    Raises:
        ProtocolError: no such GPU here, or the CUDA core cannot run on it (the reason named).
    """
    if device.type != "cuda":
        return
    from graphtrain.runtime.native import cuda as core

    index = device.index or 0
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise ProtocolError(f"--device {device}: no such GPU here (torch sees {torch.cuda.device_count()})")
    if not core.available(index):
        raise ProtocolError(f"--device {device}: the CUDA core cannot run: {core.unavailable_reason(index)}")


class ShardTensors:
    """The tensors of one shard server."""

    def __init__(
        self,
        shard: int = 0,
        use_shm: bool = False,
        shm_prefix: str = "graphtrain",
        restore_from: Path | None = None,
        device: str = "cpu",
    ):
        self.device = table_device(device)
        if use_shm and self.device.type != "cpu":
            raise ProtocolError("tables in shared memory are host memory: --shm needs --device cpu")
        check_usable(self.device)
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
        local = torch.from_numpy(ids - t.lo)
        return local if t.data.device.type == "cpu" else local.to(t.data.device)

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
        """Create the tensor, or attach to it if it exists with the same description. A create that
        fails (a checkpoint that does not fit, say) leaves nothing behind: no table, no segment."""
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
            shape = (hi - lo, *row_shape)
            fits(f"table {name!r}", int(np.prod(shape, dtype=np.int64)) * np.dtype(DTYPES[dtype]).itemsize)
            data, shm = self._allocate(name, shape, to_torch(dtype))
            t = TensorShard(name, num_rows, row_shape, dtype, lo, hi, data, shm=shm)
            del data
            try:
                init_rows(init or {}, lo, hi, row_shape, t.data)
                if self.restore_from is not None:
                    ckpt.restore_into(self.restore_from, t)
            except BaseException:
                t.release()
                raise
            self.tensors[name] = t
            return t

    def _allocate(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, shared_memory.SharedMemory | None]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        if self.device.type != "cpu":  # a GPU shard server (--device cuda): rows and state on the device
            return torch.empty(shape, dtype=dtype, device=self.device), None
        if self.use_shm and nbytes > 0:
            seg = self._segment(name, nbytes)
            return torch.frombuffer(seg.buf, dtype=dtype).view(shape), seg
        if dtype == torch.float32 and len(shape) == 2:
            from graphtrain.runtime.native.memory import empty

            return empty(shape), None
        return torch.empty(shape, dtype=dtype), None

    def _segment(self, name: str, nbytes: int) -> shared_memory.SharedMemory:
        """A new shared-memory segment named after the job, this shard, this process and `name`. The pid
        keeps a restarted server clear of what a SIGKILLed predecessor could not unlink; a segment of
        the same name can then only be a dead process' whose pid was reused, and is replaced."""
        full = f"{self.shm_prefix}-{self.shard}-{os.getpid()}-{name}"
        try:
            return shared_memory.SharedMemory(create=True, size=nbytes, name=full)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                stale = shared_memory.SharedMemory(name=full)
                stale.close()
                stale.unlink()
            return shared_memory.SharedMemory(create=True, size=nbytes, name=full)

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
            per_row = {"adagrad": 1, "adam": 2}.get(cfg.kind, 0) * t.row_shape[0] + 1
            fits(f"optimizer state of {name!r}", per_row * 4 * t.rows)
            t.config = cfg
            t.state = make_state(cfg, t.rows, t.row_shape[0], t.data.device)

    # --------------------------------------------------------------------------------- data ops

    def pull_stream(self, name: str, ids: np.ndarray, chunk_bytes: int) -> PullStream:
        """The rows of `ids` in chunks of about `chunk_bytes` (every id checked before the first)."""
        t = self.get(name)
        row = max(1, int(np.prod(t.row_shape, dtype=np.int64)) * np.dtype(DTYPES[t.dtype]).itemsize)
        return PullStream(t, self.local_ids(t, ids), max(1, chunk_bytes // row))

    @staticmethod
    def gather(t: TensorShard, local: torch.Tensor, out: torch.Tensor | None = None) -> np.ndarray:
        if (
            t.data.dtype == torch.float32
            and t.data.dim() == 2
            and len(local)
            and choose(t.data.device) is CoreBackend.CPU
        ):
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            return native.gather(t.data, local, threads=threads(), out=out).numpy()
        if t.data.device.type == "cuda":  # the CUDA core where it runs, else torch; rows go to the host
            rows = cuda.gather(t.data, local) if choose(t.data.device) is CoreBackend.CUDA else t.data[local]
            return (rows.cpu() if out is None else out.copy_(rows)).numpy()
        if out is not None:
            torch.index_select(t.data, 0, local, out=out)
            return out.numpy()
        return t.data.index_select(0, local).numpy()

    @staticmethod
    def _pieces(
        t: TensorShard, pieces: list[tuple[np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, torch.Tensor]:
        """All ids of the pieces and their local rows, after every piece's dtype, shape and ids were
        checked."""
        want = np.dtype(DTYPES[t.dtype])
        for i, (ids, values) in enumerate(pieces):
            if values.dtype != want or tuple(values.shape[1:]) != t.row_shape:
                raise ProtocolError(
                    f"values[{i}] for {t.name!r} must be {t.dtype} rows of shape {t.row_shape}, "
                    f"got {values.dtype} {tuple(values.shape)}"
                )
            if len(values) != len(ids):
                raise ProtocolError(f"{len(ids)} ids but {len(values)} value rows for {t.name!r}")
        parts = [ids for ids, _ in pieces]
        ids = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.int64)
        return ids, ShardTensors.local_ids(t, ids)

    def push(self, name: str, pieces: list[tuple[np.ndarray, np.ndarray]]) -> int:
        """Overwrite rows (the last of duplicate ids wins). Values holding NaN or infinity are refused
        before any row is written. Returns the rows written."""
        t = self.get(name)
        ids, local = self._pieces(t, pieces)
        for piece_ids, values in pieces:
            bad = nonfinite_rows(values)
            if bad is not None:
                raise ProtocolError(
                    f"push of {name!r}: {int(bad.sum())} row(s) hold NaN or infinity "
                    f"(first id {int(piece_ids[bad][0])}); nothing was written"
                )
        with t.lock:
            offset = 0
            for _, values in pieces:
                rows = local[offset : offset + len(values)]
                t.data.index_copy_(0, rows, torch.from_numpy(np.ascontiguousarray(values)).to(t.data.device))
                offset += len(values)
        return len(ids)

    def push_grad(
        self, name: str, pieces: list[tuple[np.ndarray, np.ndarray]], step: int | None = None
    ) -> tuple[int, int]:
        """Apply the tensor's optimizer to gradient rows, all pieces as one step (duplicate ids reduced
        by the optimizer's rule; the native core reads the pieces where they lie). `step`: the client's
        step count, used by Adam with step_count "global". Gradients holding NaN or infinity refuse the
        whole push before any row is touched, or (the table's nonfinite "skip") leave their rows out.
        Returns (rows updated, rows skipped)."""
        t = self.get(name)
        if t.config is None:
            raise ProtocolError(f"tensor {name!r} has no optimizer; send set_optimizer first")
        ids, local = self._pieces(t, pieces)
        refuse = t.config.nonfinite == "refuse"
        grads, keep, skipped = [], [], 0
        for _, values in pieces:
            bad = None if refuse else nonfinite_rows(values)  # refused: the core's first pass scans
            if bad is not None:
                skipped += int(bad.sum())
                values = values[~bad]
            keep.append(bad)
            grads.append(torch.from_numpy(np.ascontiguousarray(values)).to(t.data.device))
        if skipped:
            mask = np.concatenate(
                [np.ones(len(i), bool) if b is None else ~b for (i, _), b in zip(pieces, keep, strict=True)]
            )
            local = local[torch.from_numpy(mask).to(local.device)]
        global_adam = t.config.kind == "adam" and t.config.step_count == "global"
        with t.lock:
            # the client's step count (so all shards agree even when a push skips some of them), else
            # this shard's next count
            saved = int(t.state["step"][0]) if global_adam else 0
            if global_adam and step is not None:
                t.state["step"][0] = step - 1  # sparse_step adds one
            try:
                updated = sparse_step(t.config, t.data, t.state, local, grads, finite=refuse)
            except NonFiniteGradient:
                if global_adam:
                    t.state["step"][0] = saved
                rows = np.concatenate([~np.isfinite(v.reshape(len(v), -1)).all(axis=1) for _, v in pieces])
                raise ProtocolError(
                    f"push_grad of {name!r}: {int(rows.sum())} gradient row(s) hold NaN or infinity "
                    f"(first id {int(ids[rows][0])}); no row was updated"
                ) from None
            except SparseInputError as exc:
                if global_adam:
                    t.state["step"][0] = saved
                raise ProtocolError(str(exc)) from None
        return updated, skipped

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
            dtype = wire_name(arr.dtype, widen=True)
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
        seg = self._segment(f"graph.{name}", array.nbytes)
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
            t.release()
        if self.graph_shm:
            self.graph = None  # drop the views before closing their segments
            for seg in self.graph_shm.values():
                with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped at exit
                    seg.close()
                seg.unlink()
            self.graph_shm = {}
