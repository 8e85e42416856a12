"""A shard server's writes to its tables: overwrites (push) and optimizer steps on gradient rows
(push_grad), each piece's dtype, shape and ids checked before any row is touched, NaN and infinity
refused (or skipped, as the table says), one writer per row under the table's lock (ShardTensors,
state.py, inherits these)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from graphtrain.runtime.dtypes import HALF, widened
from graphtrain.runtime.dtypes import NUMPY as DTYPES
from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.native.backend import CoreBackend, choose
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage import keyed as kd
from graphtrain.runtime.storage.errors import StorageError, TableBusy
from graphtrain.runtime.storage.shard import TensorShard, before_write
from graphtrain.runtime.storage.update import locked_step, nonfinite_refusal


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


Pieces = list[tuple[np.ndarray, np.ndarray]]  # a push's (ids, values) per frame


class ShardWrites:
    """push and push_grad of a ShardTensors' tables."""

    get: Callable[[str], TensorShard]  # ShardTensors' (state.py)
    local_ids: Callable[[TensorShard, np.ndarray], torch.Tensor]

    def _pieces(self, t: TensorShard, pieces: Pieces, grads: bool = False) -> tuple[np.ndarray, torch.Tensor]:
        """All ids of the pieces and their local rows, after every piece's dtype, shape and ids were
        checked. `grads`: the values are gradients, float32, or for a half table float32 or its type."""
        wires = ("float32", t.dtype) if grads and t.dtype in HALF else (t.dtype,)
        want = {np.dtype(DTYPES[w]) for w in wires}
        for i, (ids, values) in enumerate(pieces):
            if values.dtype not in want or tuple(values.shape[1:]) != t.row_shape:
                raise StorageError(
                    f"values[{i}] for {t.name!r} must be {' or '.join(wires)} rows of shape {t.row_shape}, "
                    f"got {values.dtype} {tuple(values.shape)}"
                )
            if len(values) != len(ids):
                raise StorageError(f"{len(ids)} ids but {len(values)} value rows for {t.name!r}")
        parts = [ids for ids, _ in pieces]
        ids = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.int64)
        if t.keyed is not None:  # mapped under the lock by the caller
            return ids, torch.empty(0, dtype=torch.int64)
        return ids, self.local_ids(t, ids)

    def push(self, name: str, pieces: Pieces) -> int:
        """Overwrite rows (the last of duplicate ids wins). Values holding NaN or infinity are refused
        before any row is written. Returns the rows written."""
        t = self.get(name)
        ids, local = self._pieces(t, pieces)
        for piece_ids, values in pieces:
            bad = nonfinite_rows(widened(values, t.dtype))
            if bad is not None:
                raise StorageError(
                    f"push of {name!r}: {int(bad.sum())} row(s) hold NaN or infinity "
                    f"(first id {int(piece_ids[bad][0])}); nothing was written"
                )
        with t.lock:
            if t.keyed is not None:
                local = kd.rows_of(t, ids, insert=True)
            before_write(t, local)  # a checkpoint being written keeps the old values
            local = local.to(t.data.device, non_blocking=True)
            gpu.wait_written(t)
            offset = 0
            for _, values in pieces:
                rows = local[offset : offset + len(values)]
                t.data.index_copy_(0, rows, gpu.to_device(values, t.data.device).view(t.data.dtype))
                offset += len(values)
            gpu.mark_written(t)
        return len(ids)

    def push_grad(
        self, name: str, pieces: Pieces, step: int | None = None, blocking: bool = True
    ) -> tuple[int, int]:
        """Apply the tensor's optimizer to gradient rows, all pieces as one step (duplicate ids reduced
        by the optimizer's rule; the native core reads the pieces where they lie). `step`: the client's
        step count, used by Adam with step_count "global". Gradients holding NaN or infinity refuse the
        whole push before any row is touched, or (the table's nonfinite "skip") leave their rows out.
        `blocking` False: raise TableBusy, nothing done, when the table's lock is held or a background
        checkpoint copies the table. Returns (rows updated, rows skipped)."""
        t = self.get(name)
        if t.config is None:
            raise StorageError(f"tensor {name!r} has no optimizer; send set_optimizer first")
        ids, local = self._pieces(t, pieces, grads=True)
        if t.dtype in HALF:  # gradients that crossed a socket in the table's type, widened for the step
            pieces = [(i, v if v.dtype == np.float32 else widened(v, t.dtype)) for i, v in pieces]
        if t.keyed is not None and len(pieces) > 1:  # one piece: keys dropped below mask one array
            pieces = [(ids, np.concatenate([v for _, v in pieces]))]
        refuse = t.config.nonfinite == "refuse"
        grads: list[torch.Tensor] = []
        keep: list[np.ndarray | None] = []
        skipped = 0
        for _, values in pieces:
            bad = None if refuse else nonfinite_rows(values)  # refused: the core's step scans
            if bad is not None:
                skipped += int(bad.sum())
                values = values[~bad]
            keep.append(bad)
            # where the rows are: fixed once the optimizer is set (set_optimizer moved them with it)
            grads.append(gpu.to_device(values, t.data.device))
        mask = None
        if skipped:
            mask = np.concatenate(
                [np.ones(len(i), bool) if b is None else ~b for (i, _), b in zip(pieces, keep, strict=True)]
            )
            if t.keyed is None:
                local = local[torch.from_numpy(mask).to(local.device)]
        if not t.lock.acquire(blocking=blocking):
            raise TableBusy(name)
        try:
            if not blocking and t.snapshot is not None:  # a write may have to save the checkpoint's rows
                raise TableBusy(name)  # first, to the file: a worker's wait, not the I/O thread's
            if t.keyed is not None:
                local, grads = kd.held(t, ids if mask is None else ids[mask], grads)
            # the I/O thread (not blocking) steps on itself alone: a team's spinning threads would take the
            # cores the server's other threads and the clients need, for a step of at most 256 KiB
            updated = locked_step(t, local, grads, step, finite=refuse, max_threads=None if blocking else 1)
        except NonFiniteGradient as exc:
            rows = np.concatenate([~np.isfinite(v.reshape(len(v), -1)).all(axis=1) for _, v in pieces])
            first = int(ids[rows][0]) if rows.any() else int(ids[exc.row])  # else: a sum overflowed
            raise StorageError(nonfinite_refusal(name, int(rows.sum()), first)) from None
        except SparseInputError as exc:
            raise StorageError(str(exc)) from None
        finally:
            t.lock.release()
        return updated, skipped
