"""ctypes bindings of the native CPU core's sparse-optimizer operations, on CPU torch tensors.

Every tensor is checked here (device, dtype, shape, contiguity) and crosses as a raw pointer, so the
call is zero-copy; ids are range-checked by the core before any row is touched.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from graphtrain.contract.optimizers import SPARSE_OPTIMIZERS
from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.native import OptimParams, core

# graphtrain::OptimKind in cuda/include/graphtrain/optim_math.h
KIND_CODE = {
    o.name: o.code for o in SPARSE_OPTIMIZERS
}  # graphtrain::OptimKind (tests/native/test_optim_kinds.py)
ADAM = KIND_CODE["adam"]
# graphtrain::TableDtype (optim_math.h): the element types a table's rows may have; the optimizer's math
# runs in float32 and a half row is written back with stochastic rounding
TABLE_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

__all__ = [
    "ADAM",
    "KIND_CODE",
    "DedupWorkspace",
    "OptimArgs",
    "TABLE_DTYPES",
    "SparseInputError",
    "dedup",
    "first_nonfinite",
    "gather",
    "optim_args",
    "scatter",
    "sparse_step",
    "sparse_step_pieces",
]


def _check(t: torch.Tensor, name: str, dtype: torch.dtype, ndim: int) -> int:
    if not isinstance(t, torch.Tensor):
        raise SparseInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise SparseInputError(f"{name} is on {t.device}; the CPU core needs CPU tensors")
    if t.dtype != dtype:
        raise SparseInputError(f"{name} must be {dtype}, got {t.dtype}")
    if t.dim() != ndim:
        raise SparseInputError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise SparseInputError(f"{name} must be contiguous")
    return t.data_ptr()


def _bad_id(ids: torch.Tensor, pos: int, num_rows: int) -> SparseInputError:
    return SparseInputError(f"ids[{pos}] = {int(ids[pos])} is outside the table's rows [0, {num_rows})")


@dataclass(frozen=True, eq=False)
class OptimArgs:
    """An optimizer in the core's own terms: the native layer sits below runtime.optim and never sees
    its OptimConfig; runtime/optim/functional.py converts each config into one of these, once."""

    kind: int  # graphtrain::OptimKind (KIND_CODE)
    mean: bool  # duplicate gradients averaged (else summed)
    global_step: bool  # adam: one step count per table (else per row)
    params: OptimParams  # the hyper-parameters, as the struct the core reads

    @property
    def adam(self) -> bool:
        return self.kind == ADAM


def optim_args(
    kind: str,
    lr: float,
    eps: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    *,
    mean: bool,
    global_step: bool,
    row_norm: float = 0.0,
) -> OptimArgs:
    """OptimArgs from plain numbers; 1 - beta is taken here in double and rounded once (optim_math.h).
    row_norm > 0: the CPU core scales each updated row of a float32 table to that L2 norm."""
    params = OptimParams(
        lr,
        eps,
        beta1,
        beta2,
        1.0 - beta1,
        1.0 - beta2,
        weight_decay,
        int(global_step),
        beta1,
        beta2,
        row_norm,
    )
    return OptimArgs(KIND_CODE[kind], mean, global_step, params)


def state_tensors(
    args: OptimArgs, state: dict[str, torch.Tensor]
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, int]:
    """The core's state arguments: state0, state1, per-row Adam steps (or None) and the table's Adam step."""
    s0 = state.get("sum", state.get("exp_avg"))
    s1 = state.get("exp_avg_sq")
    row_steps = state["step"] if (args.adam and not args.global_step) else None
    global_step = int(state["step"][0]) if (args.adam and args.global_step) else 0
    return s0, s1, row_steps, global_step


def sparse_step(
    args: OptimArgs,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    grads: torch.Tensor,
    threads: int,
    round_seed: int = 0,
    refuse_nonfinite: bool = False,
) -> int:
    """Fused dedup + reduce + update (state checked by the caller). Returns the unique row count.
    A float16 or bfloat16 table is updated in float32 and rounded back stochastically, keyed by
    `round_seed` (give each step its own) and each row's id. refuse_nonfinite: raise NonFiniteGradient,
    nothing touched, where a reduced gradient holds NaN or infinity (each thread scans the rows it
    owns before any is updated: no pass over the batch beforehand)."""
    grads_ptr = _check(grads, "grads", torch.float32, 2)
    refuse = (int(refuse_nonfinite),)
    return _step(core().gt_sparse_step, (grads_ptr,), refuse, args, table, state, ids, threads, round_seed)


def sparse_step_pieces(
    args: OptimArgs,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    pieces: list[torch.Tensor],
    threads: int,
    refuse_nonfinite: bool = False,
    round_seed: int = 0,
) -> int:
    """sparse_step with the gradients in row blocks (pieces[0] holds the rows of the first ids, and so
    on), read where they lie: a push that reached a shard server in several frames is one step, without
    copying its frames into one array. refuse_nonfinite: raise NonFiniteGradient, nothing touched, where
    a row holds NaN or infinity or one id's finite rows sum to infinity (as sparse_step)."""
    dim = table.shape[1]
    blocks = np.empty(len(pieces), dtype=np.uint64)
    counts = np.empty(len(pieces), dtype=np.int64)
    for k, p in enumerate(pieces):
        blocks[k] = _check(p, f"grads[{k}]", torch.float32, 2)
        counts[k] = len(p)
        if p.shape[1] != dim:
            raise SparseInputError(f"grads[{k}] has rows of {p.shape[1]} values; the table's have {dim}")
    if int(counts.sum()) != len(ids):
        raise SparseInputError(f"{int(counts.sum())} gradient rows for {len(ids)} ids")
    grads_args = (len(pieces), blocks.ctypes.data, counts.ctypes.data)
    return _step(
        core().gt_sparse_step_pieces,
        grads_args,
        (int(refuse_nonfinite),),
        args,
        table,
        state,
        ids,
        threads,
        round_seed,
    )


def _step(
    fn: Any,
    grads_args: tuple[Any, ...],
    flags: tuple[int, ...],
    args: OptimArgs,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    threads: int,
    round_seed: int,
) -> int:
    """Call a sparse-step entry point: kind, n, ids, *grads_args, the common tail, threads, *flags, bad."""
    if table.dtype not in TABLE_DTYPES:
        raise SparseInputError(f"table must be float32, float16 or bfloat16, got {table.dtype}")
    _check(table, "table", table.dtype, 2)
    if not 0 <= round_seed < 2**64:
        raise SparseInputError(f"round_seed must be in [0, 2**64), got {round_seed}")
    s0, s1, row_steps, global_step = state_tensors(args, state)
    bad = ctypes.c_int64(-1)
    got = fn(
        args.kind,
        len(ids),
        _check(ids, "ids", torch.int64, 1),
        *grads_args,
        table.shape[1],
        table.shape[0],
        int(args.mean),
        table.data_ptr(),
        TABLE_DTYPES[table.dtype],
        round_seed,
        None if s0 is None else s0.data_ptr(),
        None if s1 is None else s1.data_ptr(),
        None if row_steps is None else row_steps.data_ptr(),
        global_step,
        args.params,
        threads,
        *flags,
        ctypes.byref(bad),
    )
    if got == -2:
        raise NonFiniteGradient(f"gradient row {bad.value} holds NaN or infinity", bad.value)
    if got == -4:
        raise NonFiniteGradient(f"the gradients of row {bad.value}'s id sum to infinity", bad.value)
    if got < 0:
        raise _bad_id(ids, bad.value, table.shape[0])
    return int(got)


class DedupWorkspace:
    """Output buffers of `dedup`, kept between calls: a fresh 51 MB buffer per step costs more in page
    faults than the deduplication itself."""

    def __init__(self) -> None:
        self.ids = torch.empty(0, dtype=torch.int64)
        self.grads = torch.empty(0, dtype=torch.float32)
        self.inverse = torch.empty(0, dtype=torch.int64)

    def take(self, n: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.ids.numel() < n:
            self.ids = torch.empty(n, dtype=torch.int64)
            self.inverse = torch.empty(n, dtype=torch.int64)
        if self.grads.numel() < n * dim:
            self.grads = torch.empty(n * dim, dtype=torch.float32)
        return self.ids[:n], self.grads[: n * dim].view(n, dim), self.inverse[:n]


def dedup(
    ids: torch.Tensor,
    grads: torch.Tensor,
    num_rows: int,
    mean: bool,
    threads: int,
    workspace: DedupWorkspace | None = None,
    share_distinct: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unique ids in first-occurrence order, their reduced gradients, and each position's unique index.
    num_rows < 0: the ids are keys (any int64), not checked against a row count.
    With a workspace the results are views of its buffers, valid until its next use. share_distinct:
    when every id is distinct, the reduced gradients returned are `grads` itself (no copy)."""
    n = len(ids)
    dim = grads.shape[1] if grads.dim() == 2 else 0
    if grads.shape[0] != n:
        raise SparseInputError(f"grads has {grads.shape[0]} rows but there are {n} ids")
    if workspace is not None:
        out_ids, out_grads, inverse = workspace.take(n, dim)
    else:
        out_ids = torch.empty(n, dtype=torch.int64)
        out_grads = torch.empty((n, dim), dtype=torch.float32)
        inverse = torch.empty(n, dtype=torch.int64)
    bad = ctypes.c_int64(-1)
    u = core().gt_dedup(
        n,
        _check(ids, "ids", torch.int64, 1),
        _check(grads, "grads", torch.float32, 2),
        dim,
        num_rows,
        int(mean),
        out_ids.data_ptr(),
        out_grads.data_ptr(),
        inverse.data_ptr(),
        threads,
        int(share_distinct),
        ctypes.byref(bad),
    )
    if u < 0:
        raise _bad_id(ids, bad.value, num_rows)
    if share_distinct and u == n:
        return out_ids[:u], grads, inverse
    return out_ids[:u], out_grads[:u], inverse


def gather(
    table: torch.Tensor,
    ids: torch.Tensor,
    threads: int,
    out: torch.Tensor | None = None,
    dest: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rows `ids` of `table` (n x dim): out[i] = table[ids[i]], or out[dest[i]] = table[ids[i]] when
    `dest` is given (rows of a multi-shard pull written straight to their places in the output)."""
    _check(table, "table", torch.float32, 2)
    dim = table.shape[1]
    if out is None:
        if dest is not None:
            raise SparseInputError("dest needs out")
        out = torch.empty((len(ids), dim), dtype=torch.float32)
    _check(out, "out", torch.float32, 2)
    if out.shape[1] != dim:
        raise SparseInputError(f"out has rows of {out.shape[1]}, the table {dim}")
    dest_ptr = None
    if dest is None:
        if out.shape[0] < len(ids):
            raise SparseInputError(f"out has {out.shape[0]} rows for {len(ids)} ids")
    else:
        dest_ptr = _check(dest, "dest", torch.int64, 1)
        if len(dest) != len(ids):
            raise SparseInputError(f"dest has {len(dest)} positions for {len(ids)} ids")
        if len(dest) and (int(dest.min()) < 0 or int(dest.max()) >= out.shape[0]):
            raise SparseInputError(f"dest positions must be in [0, {out.shape[0]})")
    bad = ctypes.c_int64(-1)
    rc = core().gt_gather(
        len(ids),
        _check(ids, "ids", torch.int64, 1),
        table.data_ptr(),
        dim,
        table.shape[0],
        out.data_ptr(),
        dest_ptr,
        threads,
        ctypes.byref(bad),
    )
    if rc < 0:
        raise _bad_id(ids, bad.value, table.shape[0])
    return out


def first_nonfinite(values: torch.Tensor) -> int:
    """Flat position of the first NaN or infinity of a contiguous float32 CPU tensor, or -1."""
    _check(values, "values", torch.float32, values.dim())
    return int(core().gt_first_nonfinite(values.data_ptr(), values.numel()))


def scatter(table: torch.Tensor, ids: torch.Tensor, values: torch.Tensor, threads: int) -> None:
    """table[ids] = values; for duplicate ids the last one wins."""
    _check(table, "table", torch.float32, 2)
    if tuple(values.shape) != (len(ids), table.shape[1]):
        raise SparseInputError(
            f"values must have shape {(len(ids), table.shape[1])}, got {tuple(values.shape)}"
        )
    bad = ctypes.c_int64(-1)
    rc = core().gt_scatter(
        len(ids),
        _check(ids, "ids", torch.int64, 1),
        _check(values, "values", torch.float32, 2),
        table.data_ptr(),
        table.shape[1],
        table.shape[0],
        threads,
        ctypes.byref(bad),
    )
    if rc < 0:
        raise _bad_id(ids, bad.value, table.shape[0])
