"""One sparse optimizer step on a table, on the chosen backend.

Backends: "cuda" (the CUDA core, for tables on a GPU), "cpu" (the native CPU core), "torch" (the
reference), chosen by runtime/native/backend.py: the native core for the table's device when it is
built, else torch; GRAPHTRAIN_OPTIM_BACKEND=cuda|cpu|torch overrides it, and asking for one that is not
built is an error rather than a silent fallback. The native cores get each OptimConfig converted once
(`native_args`). Threads: GRAPHTRAIN_OPTIM_THREADS, else torch's setting.
"""

from __future__ import annotations

import functools
import os

import torch

from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native import optim as native
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.native.backend import choose_for_optimizer as choose_backend
from graphtrain.runtime.optim import late, reference
from graphtrain.runtime.optim.config import OptimConfig
from graphtrain.runtime.optim.state import check_state

ENV_THREADS = "GRAPHTRAIN_OPTIM_THREADS"


@functools.lru_cache(maxsize=256)
def native_args(config: OptimConfig) -> native.OptimArgs:
    """`config` in the native cores' terms (they sit below this package and never see an OptimConfig),
    built once per config: a frozen, hashable dataclass."""
    return native.optim_args(
        config.kind,
        config.lr,
        config.eps,
        config.beta1,
        config.beta2,
        config.weight_decay,
        mean=config.duplicate == "mean",
        global_step=config.step_count == "global",
        row_norm=config.row_norm or 0.0,
    )


# below this many float32 elements a core call runs on its calling thread: an OpenMP team for a 64-row
# gather or step cost a shard server ~0.3 ms of spinning per request while the team's other thread
# waited for a core (bench/RESULTS.md, "the request path, profiled"), against ~15 us of work
PARALLEL_MIN_ELEMENTS = 1 << 16


def threads(elements: int | None = None) -> int:
    """Threads for a native core call over `elements` values (None: as many as torch uses): one below
    PARALLEL_MIN_ELEMENTS, where starting a team costs more than the work. GRAPHTRAIN_OPTIM_THREADS
    overrides both."""
    env = os.environ.get(ENV_THREADS)
    if env:
        if not env.strip().isdigit():  # as an unknown GRAPHTRAIN_OPTIM_BACKEND: named, not int()'s words
            raise ValueError(f"{ENV_THREADS}={env!r}: not a whole number of threads")
        return max(1, int(env))
    if elements is not None and elements < PARALLEL_MIN_ELEMENTS:
        return 1
    return max(1, torch.get_num_threads())


HALF = (torch.float16, torch.bfloat16)  # rows stored in half, stepped in float32 by the native cores


def _validate(table: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor | list[torch.Tensor]) -> None:
    if table.dtype not in (torch.float32, *HALF) or table.dim() != 2 or not table.is_contiguous():
        raise SparseInputError(
            "table must be a contiguous 2-D float32, float16 or bfloat16 tensor, "
            f"got {table.dtype} {tuple(table.shape)}"
        )
    if ids.dtype != torch.int64 or ids.dim() != 1:
        raise SparseInputError(f"ids must be a 1-D int64 tensor, got {ids.dtype} {tuple(ids.shape)}")
    blocks = grads if isinstance(grads, list) else [grads]
    for k, g in enumerate(blocks):
        rows = len(ids) if not isinstance(grads, list) else (g.shape[0] if g.dim() else 0)
        if g.dtype != torch.float32 or g.dim() != 2 or tuple(g.shape) != (rows, table.shape[1]):
            want, got = (rows, table.shape[1]), tuple(g.shape)
            what = "grads" if not isinstance(grads, list) else f"grads[{k}]"
            raise SparseInputError(f"{what} must be float32 of shape {want}, got {g.dtype} {got}")
        if g.device != table.device:
            raise SparseInputError(f"grads and table must be on one device ({g.device}, {table.device})")
    rows = sum(len(g) for g in blocks)
    if rows != len(ids):
        raise SparseInputError(f"grads hold {rows} rows for {len(ids)} ids")
    if ids.device != table.device:
        raise SparseInputError(f"ids and table must be on one device ({ids.device}, {table.device})")


def _nonfinite_row(grads: torch.Tensor) -> int:
    """The first gradient row holding NaN or infinity, or -1. A finite sum proves every element finite
    (a NaN or an infinity propagates into it; only finite values overflowing make it infinite, which the
    exact scan then clears). The sum takes ~1.4 ms for a 100,000 x 128 batch on 2 cores; torch.isfinite
    over it took ~44 ms, more than the step itself."""
    if grads.numel() == 0 or bool(torch.isfinite(grads.sum())):
        return -1
    rows = ~torch.isfinite(grads).all(dim=1)
    return int(torch.nonzero(rows)[0]) if bool(rows.any()) else -1


def _check_finite(grads: torch.Tensor) -> None:
    row = _nonfinite_row(grads)
    if row >= 0:
        raise NonFiniteGradient(f"gradient row {row} holds NaN or infinity", row)


def _check_range(ids: torch.Tensor, num_rows: int) -> None:
    bad = (ids < 0) | (ids >= num_rows)
    if bool(bad.any()):
        pos = int(torch.nonzero(bad)[0])
        raise SparseInputError(f"ids[{pos}] = {int(ids[pos])} is outside the table's rows [0, {num_rows})")


def sparse_step(
    config: OptimConfig,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    grads: torch.Tensor | list[torch.Tensor],
    backend: str | None = None,
    finite: bool = False,
    round_seed: int = 0,
    max_threads: int | None = None,
    flags: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
) -> int:
    """Reduce duplicate ids' gradients and update their rows and optimizer state in place.

    grads: one row per id, as one tensor or as row blocks in id order (a push that reached a shard
    server in several frames: the native CPU core reads the blocks where they lie, the other backends
    get them concatenated). finite: refuse gradients holding NaN or infinity, or one id's finite
    rows that sum to infinity (the CPU core and the reference). A float16 or bfloat16 table (the native
    cores, CPU and CUDA: the same bits) is stepped in float32 and rounded back stochastically,
    keyed by `round_seed` (give each step its own: optim_math.h). max_threads caps the native CPU core's
    team (1 on a server's I/O thread: a team's threads spin at its barriers, on cores
    the server's other threads need). Returns the number of unique rows updated.

    flags (three int64 on the table's device) and, on a GPU, workspace: a step deferred for capture as a
    CUDA graph (optim/late.py). A refused id or gradient then raises nothing: its verdict is left in
    `flags` ({bad position, non-finite row, unique rows}, -1 for none) and -1 is returned; float32 tables
    without a projection after the step only.

    Raises:
        NonFiniteGradient: finite was asked and a gradient row is not; nothing is modified.
        SparseInputError: wrong dtype, shape or device, or an id outside the table; nothing is modified.
    """
    name = choose_backend(table.device, backend)
    # the CUDA binding checks every tensor itself (native/cuda.py), once; gradients in blocks are checked
    # here too, before they are joined (a block of another width would fail the join, not be refused)
    if name is not CoreBackend.CUDA or not isinstance(grads, torch.Tensor):
        _validate(table, ids, grads)
    if name is not CoreBackend.CUDA:
        check_state(config, state, table.shape[0], table.shape[1])
    if flags is not None:
        if table.dtype in HALF or config.unit_complex or not isinstance(grads, torch.Tensor):
            raise SparseInputError(
                "a deferred step takes a float32 table, one gradient tensor and no projection"
            )
        if name is not CoreBackend.CUDA:
            return _deferred_twin(config, table, state, ids, grads, backend, finite, flags)
    if table.dtype in HALF and name is CoreBackend.TORCH:
        raise SparseInputError(f"a {table.dtype} table is stepped by the native cores only, not {name.value}")
    team = 1
    if name is CoreBackend.CPU:
        team = threads(ids.shape[0] * table.shape[1])
        if max_threads is not None:
            team = max(1, min(team, max_threads))
    if isinstance(grads, list):
        # the native pieces path reads the frames where they lie (and scans them for NaN or infinity
        # inside its step, as the one-array path does, before any row is touched)
        if name is CoreBackend.CPU and len(grads) > 1:
            grads = [g.contiguous() for g in grads]
        else:
            grads = (
                grads[0]
                if len(grads) == 1
                else torch.cat(grads)
                if grads
                else table.new_empty(0, table.shape[1])
            )
    ids = ids.contiguous()
    if isinstance(grads, torch.Tensor):
        grads = grads.contiguous()
        if finite and name is CoreBackend.TORCH:  # the native cores scan themselves, before any row
            _check_finite(grads)  # is touched (the CPU core the reduced rows, in its step's team)
    if name is CoreBackend.TORCH:
        _check_range(ids, table.shape[0])
    global_adam = config.kind == "adam" and config.step_count == "global"
    # torch.optim.SparseAdam counts every step, an empty batch included. The CUDA core counts it itself, on
    # the device once its ids are checked (a check here would wait for the device a second time).
    if global_adam and name is not CoreBackend.CUDA:
        if name is not CoreBackend.TORCH:  # the native core checks ranges itself, before any update
            _check_range(ids, table.shape[0])
        state["step"] += 1
    if name is not CoreBackend.CUDA:
        try:
            if name is CoreBackend.TORCH:
                assert isinstance(grads, torch.Tensor)  # pieces were concatenated above for other paths
                updated = reference.step(config, table, state, ids, grads, finite)
            elif isinstance(grads, list):
                args = native_args(config)
                updated = native.sparse_step_pieces(args, table, state, ids, grads, team, finite, round_seed)
            else:
                args = native_args(config)
                updated = native.sparse_step(args, table, state, ids, grads, team, round_seed, finite)
        except NonFiniteGradient:
            if global_adam:
                state["step"] -= 1  # refused: the step did not happen
            raise
    else:  # the CUDA core scales a float32 table's rows in its update kernel
        fused = 0.0 if table.dtype in HALF else config.row_norm or 0.0
        assert isinstance(grads, torch.Tensor)
        updated = cuda.sparse_step(
            native_args(config), table, state, ids, grads, fused, finite, round_seed, flags, workspace
        )
        if config.row_norm and not fused and len(ids):  # a half table's: after, as on the CPU
            project_rows(table, ids, config.row_norm)
        if config.unit_complex and len(ids):
            project_complex(table, ids)
        return updated
    # the CPU core scaled a float32 table's rows in its update loop (OptimParams.row_norm); a half table's
    # are scaled after, as the CUDA core does, so the two cores keep writing the same bits
    if config.row_norm and len(ids) and (name is CoreBackend.TORCH or table.dtype in HALF):
        project_rows(table, ids, config.row_norm)
    if config.unit_complex and len(ids):
        project_complex(table, ids)
    return updated


def _deferred_twin(
    config: OptimConfig,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    grads: torch.Tensor,
    backend: str | None,
    finite: bool,
    flags: torch.Tensor,
) -> int:
    """The CPU twin of the CUDA core's deferred step: the same verdict left in `flags`, and nothing
    touched when it flags (found here by looking: on a CPU there is nothing to wait for)."""
    verdict = [int(late.first_bad(ids, table.shape[0])), -1, 0]
    if verdict[0] < 0 and finite:
        verdict[1] = _nonfinite_row(grads)
    if verdict[0] < 0 and verdict[1] < 0:
        verdict[2] = sparse_step(config, table, state, ids, grads, backend)
    flags.copy_(torch.tensor(verdict, dtype=torch.int64))
    return -1


def unit_complex(rows: torch.Tensor) -> torch.Tensor:
    """`rows` (real parts, then imaginary, in the last dimension) with every complex number scaled to
    modulus 1; a zero one becomes 1 + 0i, a rotation by nothing. Differentiable everywhere (RotatE's
    score reads its relations through it): a zero's modulus is taken of 1, not of 0, so no infinite
    gradient of the square root reaches the masked branch."""
    d = rows.shape[-1] // 2
    re, im = rows[..., :d], rows[..., d:]
    squared = re * re + im * im
    zero = squared == 0
    modulus = torch.sqrt(torch.where(zero, torch.ones_like(squared), squared))
    return torch.cat([torch.where(zero, 1.0, re / modulus), torch.where(zero, 0.0, im / modulus)], -1).to(
        rows.dtype
    )


def project_complex(table: torch.Tensor, ids: torch.Tensor) -> None:
    """Scale the complex numbers of the rows `ids` to modulus 1: RotatE's relation constraint (PyKEEN's
    complex_normalize after each step), on the rows an update touched."""
    rows = torch.unique(ids)
    table.index_copy_(0, rows, unit_complex(table.index_select(0, rows).float()).to(table.dtype))


def project_rows(table: torch.Tensor, ids: torch.Tensor, norm: float) -> None:
    """Scale the rows `ids` to L2 norm `norm`: the entity constraint of TransE and DistMult (PyKEEN
    normalizes after each step too), applied to the rows an update touched, so rows stay on the sphere."""
    rows = torch.unique(ids)
    values = table.index_select(0, rows).float()  # a half table's rows scaled in float32, rounded once
    norms = values.norm(dim=1, keepdim=True)
    over = torch.isinf(norms).squeeze(1)
    if bool(over.any()):  # squares past float32 (a row beyond ~1.8e19): in double, as the CPU core does
        norms[over] = values[over].double().norm(dim=1, keepdim=True).float()
    values.mul_(norm / norms.clamp_min_(1e-12))
    table.index_copy_(0, rows, values.to(table.dtype))
