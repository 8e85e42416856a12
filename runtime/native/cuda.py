"""ctypes bindings of the CUDA core (built when GRAPHTRAIN_BUILD_CUDA=1), on CUDA torch tensors.

Same contract as the CPU bindings (runtime/native/optim.py), and three more rules:
- Every tensor's device, dtype, shape and contiguity is checked here, before any CUDA call (the checks
  work on descriptions of tensors, so they are tested on machines without a GPU): all of a call's tensors
  on the table's device, ids 1-D int64, gradients and values (len(ids), dim).
- The work runs on the table's device and its current torch stream, in a workspace from torch's caching
  allocator: a steady training loop makes no cudaMalloc, and the core waits for the device once per call
  (it reads the first bad id's position and the unique-row count together), or, deferred for a captured
  step, not at all (the verdict left in three int64 on the device: optim/late.py). An out-of-range id
  leaves everything untouched, the table's Adam step count included (the core counts it on the device).
- The core never aborts the process: a failed call returns an error code and leaves a message naming
  the function, its stage and the CUDA error, raised here as CudaCoreError.

`available()` is honest: the library must be built, load with this ABI, find a driver new enough for
the CUDA runtime it links statically, a device, and machine code or PTX for that device's architecture
(the probe asks for an update kernel's attributes). Without a GPU (as on the build machines) it is False
and `unavailable_reason()` says why; the CPU core or the torch reference then serves.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from graphtrain.runtime.errors import GraphtrainError, NonFiniteGradient, SparseInputError
from graphtrain.runtime.native import _HERE
from graphtrain.runtime.native.abi import CUDA, load
from graphtrain.runtime.native.optim import KIND_CODE, TABLE_DTYPES, OptimArgs

# Return codes of cuda/src/optim_cuda.cu
RC_BAD_ID, RC_CUDA_ERROR, RC_BAD_ARGUMENT, RC_NONFINITE = -1, -2, -3, -4
# gt_cuda_workspace_bytes' operations
OP_STEP, OP_SCATTER, OP_GATHER = 0, 1, 2
MAX_BATCH = 2**31 - 1 - 512  # the core sorts 32-bit positions (kMaxBatch in optim_cuda.cu)


class CudaCoreError(GraphtrainError, RuntimeError):
    """A call of the CUDA core failed on the device; the message names the function, the stage and the
    CUDA error (cudaErrorMemoryAllocation, cudaErrorIllegalAddress, ...)."""


class CudaUnavailable(GraphtrainError):
    """The CUDA core cannot run here (not built, no driver, an old driver, no device, no image for the
    device's architecture); the message says which."""


def _library_path() -> Path | None:
    found = sorted(_HERE.glob("_core_cuda*.so"))
    return found[0] if found else None


@functools.cache
def _lib() -> ctypes.CDLL | None:
    """The CUDA core, its ABI checked (abi.py), or None when it was not built."""
    path = _library_path()
    return load(path, CUDA) if path is not None else None


@dataclass(frozen=True)
class Probe:
    """What the core found on one device (versions as CUDA numbers them: 13000 is 13.0)."""

    ok: bool
    reason: str  # why not, or ""
    runtime: int = 0  # the CUDA runtime the core was built with (linked statically)
    driver: int = 0  # the CUDA version the driver supports; 0: no driver
    devices: int = 0
    capability: int = 0  # major * 10 + minor
    binary_version: int = 0  # of the update kernel's image the driver picked (0: none)
    ptx_version: int = 0

    def describe(self) -> str:
        def v(n: int) -> str:
            return f"{n // 1000}.{n % 1000 // 10}" if n else "none"

        return (
            f"runtime {v(self.runtime)}, driver {v(self.driver)}, {self.devices} device(s), "
            f"sm_{self.capability or '?'}, kernel binary {self.binary_version or '-'} "
            f"ptx {self.ptx_version or '-'}"
        )


def probe_library(lib: ctypes.CDLL, device: int = 0) -> Probe:
    """Ask a loaded core whether it runs on `device`; never raises for a missing driver or device."""
    info = (ctypes.c_int64 * 6)()
    rc = lib.gt_cuda_probe(device, info)
    fields = [int(x) for x in info]
    if rc != 0:
        return Probe(False, _message(lib), *fields)
    torch_cuda = torch.version.cuda
    if torch_cuda is None:
        return Probe(False, "torch is a CPU-only build: it makes no CUDA tensors", *fields)
    if int(torch_cuda.split(".")[0]) != fields[0] // 1000:
        return Probe(
            False,
            f"the core was built with CUDA {fields[0] // 1000}, torch with CUDA {torch_cuda}: rebuild it "
            "with the toolkit of torch's major version (`make cuda`)",
            *fields,
        )
    return Probe(True, "", *fields)


@functools.cache
def probe(device: int = 0) -> Probe:
    """The probe of the installed core on `device`, once per process and device.

    Raises:
        StaleNativeCore: the core was built from other sources (rebuild it).
    """
    lib = _lib()
    if lib is None:
        return Probe(
            False, "the CUDA core is not built (GRAPHTRAIN_BUILD_CUDA=1 pip install -e . / make cuda)"
        )
    return probe_library(lib, device)


def available(device: int = 0) -> bool:
    """Whether the core is built and runs on CUDA device `device` (unavailable_reason says why not)."""
    return probe(device).ok


def unavailable_reason(device: int = 0) -> str:
    """Why `available(device)` is False ("" when it is True)."""
    return probe(device).reason


def _message(lib: ctypes.CDLL) -> str:
    raw = lib.gt_cuda_last_error()
    return raw.decode(errors="replace") if raw else "(no message)"


# ----------------------------------------------------------------------------------------- checks


class Desc(NamedTuple):
    """What the checks need of a tensor: tests build these for devices this machine does not have."""

    device: torch.device
    dtype: torch.dtype
    shape: tuple[int, ...]
    contiguous: bool = True


def describe(t: torch.Tensor) -> Desc:
    if not isinstance(t, torch.Tensor):
        raise SparseInputError(f"expected a torch.Tensor, got {type(t).__name__}")
    # made as the tuple it is: the named constructor's argument handling was a quarter of this function's
    # time, and a step describes nine tensors (bench/core_call.py)
    return tuple.__new__(Desc, (t.device, t.dtype, tuple(t.shape), t.is_contiguous()))


def _device_index(d: torch.device) -> int:
    return d.index if d.index is not None else 0


def _tensor(
    name: str,
    d: Desc,
    device: torch.device,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    owner: str = "the table",
) -> None:
    # equal devices first: a device's .type builds a string (~0.2 us), and a step checks nine tensors
    if d.device != device and (d.device.type != "cuda" or _device_index(d.device) != _device_index(device)):
        raise SparseInputError(f"{name} is on {d.device}; {owner} is on {device}: move it there first")
    if d.dtype != dtype:
        raise SparseInputError(f"{name} must be {dtype}, got {d.dtype}")
    if d.shape != shape:
        raise SparseInputError(f"{name} must have shape {shape}, got {d.shape}")
    if not d.contiguous:
        raise SparseInputError(f"{name} must be contiguous")


HALF = (torch.float16, torch.bfloat16)  # tables the sparse step takes beside float32 (not gather, scatter)


def check_table(table: Desc, half: bool = False) -> None:
    """A contiguous 2-D table on a GPU: float32, or (`half`: the sparse step) float16 or bfloat16."""
    if table.device.type != "cuda":
        raise SparseInputError(f"the CUDA core needs a table on a GPU, this one is on {table.device}")
    types = (torch.float32, *HALF) if half else (torch.float32,)
    if table.dtype not in types or len(table.shape) != 2 or not table.contiguous:
        names = " or ".join(str(t).removeprefix("torch.") for t in types)
        raise SparseInputError(
            f"table must be a contiguous 2-D {names} tensor, got {table.dtype} {table.shape}"
        )


def check_ids(table: Desc, ids: Desc) -> int:
    """The number of ids, after checking them against the table; ids must be 1-D int64."""
    if len(ids.shape) != 1:
        raise SparseInputError(f"ids must be 1-D, got shape {ids.shape}")
    _tensor("ids", ids, table.device, torch.int64, ids.shape)
    if ids.shape[0] > MAX_BATCH:
        raise SparseInputError(f"{ids.shape[0]} ids in one call; the CUDA core takes at most {MAX_BATCH}")
    return ids.shape[0]


def check_step(args: OptimArgs, table: Desc, state: dict[str, Desc], ids: Desc, grads: Desc) -> int:
    """Everything the sparse step reads or writes, before any CUDA call; returns the number of ids."""
    check_table(table, half=True)
    n = check_ids(table, ids)
    rows, dim = table.shape
    _tensor("grads", grads, table.device, torch.float32, (n, dim))
    want: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    if args.kind == KIND_CODE["adagrad"]:
        want["sum"] = (torch.float32, (rows, dim))
    elif args.kind == KIND_CODE["rowwise_adagrad"]:
        want["sum"] = (torch.float32, (rows,))
    elif args.adam:
        steps = (1,) if args.global_step else (rows,)
        want = {
            "exp_avg": (torch.float32, (rows, dim)),
            "exp_avg_sq": (torch.float32, (rows, dim)),
            "step": (torch.int64, steps),
        }
    if set(state) != set(want):
        raise SparseInputError(f"the optimizer's state needs entries {sorted(want)}, got {sorted(state)}")
    for key, (dtype, shape) in want.items():
        _tensor(f"state {key!r}", state[key], table.device, dtype, shape)
    return n


def check_deferred(table: Desc, flags: Desc, workspace: Desc, need: int) -> None:
    """A deferred step's flags (three int64 the core writes on the device) and the workspace its caller
    holds for it (a captured step's own: the per-stream scratch may be replaced while a graph holds it)."""
    _tensor("flags", flags, table.device, torch.int64, (3,))
    if workspace.dtype != torch.uint8 or len(workspace.shape) != 1 or workspace.shape[0] < need:
        raise SparseInputError(f"workspace must be 1-D uint8 of at least {need} bytes, got {workspace.shape}")
    _tensor("workspace", workspace, table.device, torch.uint8, workspace.shape)


def check_gather(table: Desc, ids: Desc) -> None:
    check_table(table)
    check_ids(table, ids)


def check_scatter(table: Desc, ids: Desc, values: Desc) -> None:
    check_table(table)
    n = check_ids(table, ids)
    _tensor("values", values, table.device, torch.float32, (n, table.shape[1]))


def check_sample(indptr: Desc, indices: Desc, seeds: Desc) -> None:
    """A graph's in-CSR (indptr: nodes + 1 entries, indices: its sources) and the seeds to sample, all
    contiguous 1-D int64 on one GPU."""
    if indptr.device.type != "cuda":
        raise SparseInputError(f"the CUDA core samples a graph on a GPU, this one is on {indptr.device}")
    for name, d in (("indptr", indptr), ("indices", indices), ("seeds", seeds)):
        if len(d.shape) != 1:
            raise SparseInputError(f"{name} must be 1-D, got shape {d.shape}")
        _tensor(name, d, indptr.device, torch.int64, d.shape, owner="the graph's indptr")
    if indptr.shape[0] < 1:
        raise SparseInputError("indptr must hold at least one entry (nodes + 1)")
    if seeds.shape[0] > MAX_BATCH:
        raise SparseInputError(f"{seeds.shape[0]} seeds in one call; the CUDA core takes at most {MAX_BATCH}")


def check_sample_edges(
    indptr: Desc, indices: Desc, etype: Desc | None, seeds: Desc, type_fanouts: Desc | None
) -> None:
    """check_sample's graph and seeds, and a typed graph's edge types (one per edge, as indices) and
    fan-outs per edge type (1-D int64, on the graph's GPU; they need the edge types)."""
    check_sample(indptr, indices, seeds)
    if etype is not None:
        _tensor("etype", etype, indptr.device, torch.int64, indices.shape, owner="the graph's indptr")
    if type_fanouts is not None:
        if etype is None:
            raise SparseInputError("fan-outs per edge type need the graph's edge types")
        if len(type_fanouts.shape) != 1:
            raise SparseInputError(f"type_fanouts must be 1-D, got shape {type_fanouts.shape}")
        _tensor(
            "type_fanouts", type_fanouts, indptr.device, torch.int64, type_fanouts.shape, "the graph's indptr"
        )


# ------------------------------------------------------------------------------------------- calls


def _ready(table: torch.Tensor) -> tuple[ctypes.CDLL, int, int]:
    """The library, the table's device index and its current stream, once the core can run there."""
    device = _device_index(table.device)
    found = probe(device)
    lib = _lib()
    if not found.ok or lib is None:
        raise CudaUnavailable(f"the CUDA core cannot run on {table.device}: {found.reason}")
    return lib, device, torch.cuda.current_stream(table.device).cuda_stream


@functools.lru_cache(maxsize=1024)
def _workspace_bytes(op: int, n: int, num_rows: int, dim: int, device: int) -> int:
    """The core's workspace need for a batch of up to n ids (asked once per power of two: every part of
    it grows with n, and the core checks the actual need on every call)."""
    lib = _lib()
    assert lib is not None
    size = ctypes.c_int64(0)
    rc = lib.gt_cuda_workspace_bytes(op, n, num_rows, dim, device, ctypes.byref(size))
    _raise(lib, rc, "gt_cuda_workspace_bytes")
    return max(1, size.value)


_scratch = threading.local()


def _workspace(op: int, n: int, table: torch.Tensor, device: int, stream: int) -> torch.Tensor:
    """Device scratch of one call: one buffer per thread, device and stream, grown to the largest batch
    seen. Every call of the core that uses more than its flag waits for the device before returning, so
    the next call on this thread finds the buffer free; a call on another stream gets its own."""
    bound = 1 << max(0, n - 1).bit_length() if n > 1 else n
    need = _workspace_bytes(op, min(bound, MAX_BATCH), table.shape[0], table.shape[1], device)
    buffers: dict[tuple[int, int], torch.Tensor] = _scratch.__dict__.setdefault("buffers", {})
    buf = buffers.get((device, stream))
    if buf is None or buf.numel() < need:
        buf = buffers[(device, stream)] = torch.empty(need, dtype=torch.uint8, device=table.device)
    return buf


def step_workspace(table: torch.Tensor, n: int) -> torch.Tensor:
    """A workspace of its own for deferred steps of up to `n` ids on `table` (a captured step's)."""
    device = _device_index(table.device)
    need = _workspace_bytes(OP_STEP, n, table.shape[0], table.shape[1], device)
    return torch.empty(need, dtype=torch.uint8, device=table.device)


def _raise(lib: ctypes.CDLL, rc: int, fn: str) -> None:
    """CudaCoreError for a failed call (RC_CUDA_ERROR, RC_BAD_ARGUMENT), with the core's message."""
    if rc < 0 and rc not in (RC_BAD_ID, RC_NONFINITE):
        raise CudaCoreError(f"CUDA core call {fn} failed: {_message(lib)}")


def _result(lib: ctypes.CDLL, rc: int, fn: str, ids: torch.Tensor, bad: ctypes.c_int64, num_rows: int) -> int:
    if rc == RC_BAD_ID:
        pos = bad.value
        raise SparseInputError(f"ids[{pos}] = {int(ids[pos])} is outside the table's rows [0, {num_rows})")
    if rc == RC_NONFINITE:
        raise NonFiniteGradient(f"gradient row {bad.value} holds NaN or infinity", bad.value)
    _raise(lib, rc, fn)
    return int(rc)


def sparse_step(
    args: OptimArgs,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    grads: torch.Tensor,
    row_norm: float = 0.0,
    finite: bool = False,
    round_seed: int = 0,
    flags: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
) -> int:
    """Fused dedup + reduce + update on the table's device. Returns the unique row count. Adam with one
    step count per table: the core adds this step to state["step"] (on the device, once the ids are
    known valid; an empty batch counts), so the caller must not. row_norm > 0: every updated row is
    then scaled to that L2 norm (TransE, DistMult), in the same kernel (float32 tables only). finite:
    refuse gradients holding NaN or infinity, checked on the device in the same wait as the ids. A
    float16 or bfloat16 table is stepped in float32 and written back with stochastic rounding keyed by
    `round_seed`, bit for bit as the CPU core does (optim_math.h). flags and workspace (a step captured
    as a CUDA graph: optim/late.py): the checks' verdict is left in `flags` ({bad position, non-finite
    row, unique rows}, -1 for none) for the caller to read later, nothing waits, and -1 is returned; an
    id out of range or a refused gradient still leaves everything untouched.

    Raises:
        SparseInputError: a tensor on another device, of another dtype or shape, or an id outside the
            table; nothing was modified.
        NonFiniteGradient: finite was asked and a gradient row holds NaN or infinity; nothing was
            modified.
        CudaUnavailable: the core cannot run on the table's device.
        CudaCoreError: the device failed the call.
    """
    table_desc = describe(table)
    states = {k: describe(v) for k, v in state.items()}
    n = check_step(args, table_desc, states, describe(ids), describe(grads))
    lib, device, stream = _ready(table)
    s0 = state.get("sum", state.get("exp_avg"))
    s1 = state.get("exp_avg_sq")
    steps = state.get("step")
    if flags is not None:
        if workspace is None:
            raise SparseInputError("a deferred step needs its own workspace (step_workspace)")
        need = _workspace_bytes(OP_STEP, n, table.shape[0], table.shape[1], device)
        check_deferred(table_desc, describe(flags), describe(workspace), need)
        ws = workspace
    else:
        ws = _workspace(OP_STEP, n, table, device, stream)
    bad = ctypes.c_int64(-1)
    rc = lib.gt_cuda_sparse_step(
        args.kind,
        n,
        ids.data_ptr(),
        grads.data_ptr(),
        table.shape[1],
        table.shape[0],
        int(args.mean),
        table.data_ptr(),
        TABLE_DTYPES[table.dtype],
        round_seed & 0xFFFFFFFFFFFFFFFF,
        None if s0 is None else s0.data_ptr(),
        None if s1 is None else s1.data_ptr(),
        None if steps is None else steps.data_ptr(),
        int(args.adam and args.global_step),
        args.params,
        float(row_norm),
        int(finite),
        device,
        stream,
        ws.data_ptr(),
        ws.numel(),
        None if flags is None else flags.data_ptr(),
        ctypes.byref(bad),
    )
    if flags is not None:
        _raise(lib, rc, "gt_cuda_sparse_step")
        return -1
    return _result(lib, rc, "gt_cuda_sparse_step", ids, bad, table.shape[0])


def gather(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """table[ids] (len(ids) x dim), on the table's device."""
    check_gather(describe(table), describe(ids))
    lib, device, stream = _ready(table)
    out = torch.empty((len(ids), table.shape[1]), dtype=torch.float32, device=table.device)
    ws = _workspace(OP_GATHER, len(ids), table, device, stream)
    bad = ctypes.c_int64(-1)
    rc = lib.gt_cuda_gather(
        len(ids),
        ids.data_ptr(),
        table.data_ptr(),
        table.shape[1],
        table.shape[0],
        out.data_ptr(),
        device,
        stream,
        ws.data_ptr(),
        ws.numel(),
        ctypes.byref(bad),
    )
    _result(lib, rc, "gt_cuda_gather", ids, bad, table.shape[0])
    return out


def scatter(table: torch.Tensor, ids: torch.Tensor, values: torch.Tensor) -> None:
    """table[ids] = values; for duplicate ids the last one wins. Nothing is written when an id is bad."""
    check_scatter(describe(table), describe(ids), describe(values))
    lib, device, stream = _ready(table)
    ws = _workspace(OP_SCATTER, len(ids), table, device, stream)
    bad = ctypes.c_int64(-1)
    rc = lib.gt_cuda_scatter(
        len(ids),
        ids.data_ptr(),
        values.data_ptr(),
        table.data_ptr(),
        table.shape[1],
        table.shape[0],
        device,
        stream,
        ws.data_ptr(),
        ws.numel(),
        ctypes.byref(bad),
    )
    _result(lib, rc, "gt_cuda_scatter", ids, bad, table.shape[0])


@functools.lru_cache(maxsize=256)
def _sample_workspace_bytes(n: int, device: int) -> int:
    lib = _lib()
    assert lib is not None
    size = ctypes.c_int64(0)
    _raise(
        lib,
        lib.gt_cuda_sample_workspace_bytes(n, device, ctypes.byref(size)),
        "gt_cuda_sample_workspace_bytes",
    )
    return max(1, size.value)


def _sample_workspace(indptr: torch.Tensor, n: int, device: int, stream: int) -> torch.Tensor:
    """The stream's workspace for a layer's count of n seeds (grown to the next power of two, kept)."""
    bound = 1 << max(0, n - 1).bit_length() if n > 1 else n
    need = _sample_workspace_bytes(min(bound, MAX_BATCH), device)
    buffers: dict[tuple[str, int, int], torch.Tensor] = _scratch.__dict__.setdefault("sample", {})
    ws = buffers.get(("sample", device, stream))
    if ws is None or ws.numel() < need:
        ws = buffers[("sample", device, stream)] = torch.empty(need, dtype=torch.uint8, device=indptr.device)
    return ws


def _bad_seed(rc: int, seeds: torch.Tensor, bad: ctypes.c_int64, num_nodes: int) -> None:
    if rc == RC_BAD_ID:
        raise SparseInputError(
            f"seeds[{bad.value}] = {int(seeds[bad.value])} is outside the graph's nodes [0, {num_nodes})"
        )


def sample_neighbors(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sources, counts) on the graph's GPU: up to `fanout` distinct in-neighbours of each seed (-1: all),
    those of seed i the next counts[i] sources; the draws of the CPU core's gt_sample_neighbors for the
    same request seed (cuda/include/graphtrain/sample_math.h). One host wait, for the total.

    Raises:
        SparseInputError: a tensor on another device or of another dtype or shape, or a seed outside
            the graph's nodes.
        CudaUnavailable, CudaCoreError: as the other calls.
    """
    check_sample(describe(indptr), describe(indices), describe(seeds))
    lib, device, stream = _ready(indptr)
    n, num_nodes = len(seeds), len(indptr) - 1
    counts = torch.empty(n, dtype=torch.int64, device=indptr.device)
    ends = torch.empty(n, dtype=torch.int64, device=indptr.device)
    ws = _sample_workspace(indptr, n, device, stream)
    total, bad = ctypes.c_int64(0), ctypes.c_int64(-1)
    rc = lib.gt_cuda_sample_count(
        indptr.data_ptr(), num_nodes, seeds.data_ptr(), n, fanout, counts.data_ptr(), ends.data_ptr(),
        device, stream, ws.data_ptr(), ws.numel(), ctypes.byref(total), ctypes.byref(bad),
    )  # fmt: skip
    _bad_seed(rc, seeds, bad, num_nodes)
    _raise(lib, rc, "gt_cuda_sample_count")
    src = torch.empty(total.value, dtype=torch.int64, device=indptr.device)
    rc = lib.gt_cuda_sample_fill(
        indptr.data_ptr(), indices.data_ptr(), seeds.data_ptr(), n, seed & (2**64 - 1),
        counts.data_ptr(), ends.data_ptr(), src.data_ptr(), device, stream,
    )  # fmt: skip
    _raise(lib, rc, "gt_cuda_sample_fill")
    return src, counts


def sample_edges(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    etype: torch.Tensor | None,
    seeds: torch.Tensor,
    fanout: int,
    type_fanouts: torch.Tensor | None,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions in the graph's edge arrays, counts) on the graph's GPU: the CPU core's gt_sample_edges
    draws for the same request seed. Without `type_fanouts` up to `fanout` in-edges per seed (the
    positions of sample_neighbors' sources); with it (one per edge type on the graph's device, -1 all, 0
    none; needs `etype`, each edge's type, a node's in-edges listed by type) each relation of a seed's
    row drawn on its own. `indices` only sizes the edge arrays (the check). One host wait, for the total.

    Raises:
        SparseInputError: as sample_neighbors, or per-type fan-outs without the edge types.
        CudaUnavailable, CudaCoreError: as the other calls.
    """
    check_sample_edges(
        describe(indptr),
        describe(indices),
        None if etype is None else describe(etype),
        describe(seeds),
        None if type_fanouts is None else describe(type_fanouts),
    )
    lib, device, stream = _ready(indptr)
    n, num_nodes = len(seeds), len(indptr) - 1
    counts = torch.empty(n, dtype=torch.int64, device=indptr.device)
    ends = torch.empty(n, dtype=torch.int64, device=indptr.device)
    ws = _sample_workspace(indptr, n, device, stream)
    types = None if etype is None else etype.data_ptr()
    per_type = None if type_fanouts is None else type_fanouts.data_ptr()
    num_types = 0 if type_fanouts is None else len(type_fanouts)
    total, bad = ctypes.c_int64(0), ctypes.c_int64(-1)
    rc = lib.gt_cuda_sample_edges_count(
        indptr.data_ptr(), types, num_nodes, seeds.data_ptr(), n, fanout, per_type, num_types,
        counts.data_ptr(), ends.data_ptr(), device, stream, ws.data_ptr(), ws.numel(),
        ctypes.byref(total), ctypes.byref(bad),
    )  # fmt: skip
    _bad_seed(rc, seeds, bad, num_nodes)
    _raise(lib, rc, "gt_cuda_sample_edges_count")
    pos = torch.empty(total.value, dtype=torch.int64, device=indptr.device)
    rc = lib.gt_cuda_sample_edges_fill(
        indptr.data_ptr(), types, seeds.data_ptr(), n, fanout, per_type, num_types, seed & (2**64 - 1),
        counts.data_ptr(), ends.data_ptr(), pos.data_ptr(), device, stream,
    )  # fmt: skip
    _raise(lib, rc, "gt_cuda_sample_edges_fill")
    return pos, counts
