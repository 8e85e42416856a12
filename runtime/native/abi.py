"""The native core's C ABI, declared once for both builds and checked once, when a library loads.

Two libraries share this ABI: the CPU core (cuda/src/*.cpp -> _core*.so, built by `pip install`) and
the CUDA core (cuda/src/*.cu -> _core_cuda.so, built with GRAPHTRAIN_BUILD_CUDA=1). ctypes trusts
whatever it is told about a function, so a library built from older sources would silently read
garbage, above all from OptimParams, which crosses by value. Hence every library reports its ABI
version and sizeof(OptimParams) (cuda/include/graphtrain/abi.h), `load` compares them with this
module's before any other call, and the argument types of every entry point come from SIGNATURES.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, NamedTuple

from graphtrain.runtime.errors import GraphtrainError

# = graphtrain::kAbiVersion in cuda/include/graphtrain/abi.h (tests/native/test_abi.py compares them)
ABI_VERSION = 20

CPU, CUDA = "cpu", "cuda"
REBUILD = {
    CPU: "rebuild it with `pip install -e .` (or `make install`)",
    CUDA: "rebuild it with `GRAPHTRAIN_BUILD_CUDA=1 pip install -e .` (or `make cuda`)",
}


class NativeUnavailable(GraphtrainError):
    """The native core was not built (install the package with pip, which compiles it)."""


class StaleNativeCore(GraphtrainError):
    """A native library was built from other sources than these bindings: it must be rebuilt. Not a
    NativeUnavailable, so nothing falls back to the torch reference because of it."""


# The one table of C types the bindings use (no other module declares its own).
P = ctypes.c_void_p
INT, I32, I64, U32, U64 = ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64
F64 = ctypes.c_double
F32 = ctypes.c_float


class OptimParams(ctypes.Structure):
    """Mirror of graphtrain::OptimParams in cuda/include/graphtrain/optim_math.h."""

    _fields_ = [
        ("lr", ctypes.c_float),
        ("eps", ctypes.c_float),
        ("beta1", ctypes.c_float),
        ("beta2", ctypes.c_float),
        ("one_minus_beta1", ctypes.c_float),
        ("one_minus_beta2", ctypes.c_float),
        ("weight_decay", ctypes.c_float),
        ("eps_inside_sqrt", ctypes.c_int32),
        ("beta1_exact", ctypes.c_double),
        ("beta2_exact", ctypes.c_double),
        ("row_norm", ctypes.c_float),
    ]


class Signature(NamedTuple):
    libraries: tuple[str, ...]  # which builds export it
    restype: Any
    argtypes: list[Any]


# dim, num_rows, mean, table, table_dtype, round_seed, state0, state1, row_steps, global_step, params:
# the arguments the CPU core's sparse step entry points take after their gradients
_STEP_TAIL = [I64, I64, I32, P, I32, U64, P, P, P, I64, OptimParams]
_BOTH = (CPU, CUDA)

SIGNATURES: dict[str, Signature] = {
    # the check itself (abi.h)
    "gt_abi_version": Signature(_BOTH, I32, []),
    "gt_optim_params_size": Signature(_BOTH, I64, []),
    # CPU core. Sparse steps: kind, n, ids, <the gradients>, the step tail, threads, refuse_nonfinite,
    # bad_pos
    "gt_sparse_step": Signature((CPU,), I64, [I32, I64, P, P, *_STEP_TAIL, I32, I32, P]),
    "gt_sparse_step_pieces": Signature((CPU,), I64, [I32, I64, P, I64, P, P, *_STEP_TAIL, I32, I32, P]),
    "gt_dedup": Signature((CPU,), I64, [I64, P, P, I64, I64, I32, P, P, P, I32, I32, P]),
    "gt_gather": Signature((CPU,), INT, [I64, P, P, I64, I64, P, P, I32, P]),
    "gt_scatter": Signature((CPU,), INT, [I64, P, P, P, I64, I64, I32, P]),
    # n, ids, parts, tables, bounds, los, lens, row_bytes, out, counts, threads, bad_pos (gather_parts.cpp)
    "gt_gather_parts": Signature((CPU,), INT, [I64, P, I32, P, P, P, P, I64, P, P, I32, P]),
    # rows, crow, ids, weights, parts, tables, bounds, los, lens, width, out, counts, threads, bad_pos
    "gt_gather_sum_parts": Signature((CPU,), INT, [I64, P, P, P, I32, P, P, P, P, I32, P, P, I32, P]),
    "gt_advise_hugepages": Signature((CPU,), INT, [P, I64]),
    "gt_first_nonfinite": Signature((CPU,), I64, [P, I64]),
    "gt_max_threads": Signature((CPU,), INT, []),
    "gt_partition_refine": Signature((CPU,), INT, [I64, P, P, P, I32, P, I32, P, P, I32, I32, U64, P]),
    # verts, xadj, adj, parts, weight, nparts, load, cap, alpha, gamma, seed, stats (fennel.cpp)
    "gt_fennel_assign": Signature((CPU,), INT, [I64, P, P, P, P, P, I32, P, I64, F64, F64, U64, P]),
    # the same and seen (uint8 per node): a restreaming pass (fennel.cpp)
    "gt_fennel_restream": Signature((CPU,), INT, [I64, P, P, P, P, P, I32, P, I64, F64, F64, U64, P, P]),
    # m, src, dst, parts, nparts, counts (int32, nodes x nparts): a refinement round's counts (fennel.cpp)
    "gt_fennel_count": Signature((CPU,), INT, [I64, P, P, P, I32, P]),
    "gt_sample_neighbors": Signature((CPU,), I64, [P, P, I64, I64, P, I64, I64, U64, P, P, P]),
    "gt_sample_edges": Signature((CPU,), I64, [P, P, I64, I64, P, I64, I64, P, I64, U64, P, P, P]),
    "gt_attention_sum": Signature((CPU,), None, [I64, P, P, P, P, P, P, I32, I32, I32, I32, I32, I32]),
    "gt_attention_sum_t": Signature((CPU,), None, [I64, I64, P, P, P, P, P, P, I32, I32, I32, I64, I32, I32]),
    "gt_attention_dot": Signature((CPU,), None, [I64, P, P, P, P, P, P, I32, I32, I32, I32, I32, I32]),
    "gt_edge_softmax": Signature((CPU,), None, [I64, P, P, P, I32, I32]),
    # rows, x1, c1, x2, c2, w_t, k, out, threads; its gradient: ..., g, gx1, gx2, gw, threads (thin_cpu.cpp)
    "gt_thin_product": Signature((CPU,), None, [I64, P, I32, P, I32, P, I32, P, I32]),
    "gt_thin_product_grad": Signature((CPU,), None, [I64, P, I32, P, I32, P, I32, P, P, P, P, I32]),
    "gt_edge_softmax_grad": Signature((CPU,), None, [I64, P, P, P, P, I32, I32]),
    "gt_relabel": Signature((CPU,), I64, [P, I64, P, I64, P, P]),
    # num_dst, counts, num_src, edges, src_local, crow, values, crow_t, col_t, values_t, order, bad_pos
    "gt_block_means": Signature((CPU,), INT, [I64, P, I64, I64, P, P, P, P, P, P, P, P]),
    "gt_relu_dropout": Signature((CPU,), None, [I64, P, P, P, U32, F32, U64, I32]),
    "gt_mask_scale": Signature((CPU,), None, [I64, P, P, F32, P, I32]),
    "gt_bias_relu_dropout": Signature((CPU,), None, [I64, I64, P, P, P, P, U32, F32, U64, I32]),
    "gt_mask_scale_bias_grad": Signature((CPU,), None, [I64, I64, P, P, F32, P, P, I32]),
    "gt_elu_dropout": Signature((CPU,), None, [I64, P, P, P, U32, F32, U64, I32]),
    "gt_elu_dropout_grad": Signature((CPU,), None, [I64, P, P, P, F32, P, I32]),
    # dynamic vocabularies (keymap_cpu.cpp): new(capacity), free, size, find(n, keys, rows), keys(out),
    # insert(n, keys, rows, tick, evict, evicted keys, evicted rows)
    "gt_keymap_new": Signature((CPU,), P, [I64]),
    "gt_keymap_free": Signature((CPU,), None, [P]),
    "gt_keymap_size": Signature((CPU,), I64, [P]),
    "gt_keymap_find": Signature((CPU,), None, [P, I64, P, P]),
    "gt_keymap_keys": Signature((CPU,), None, [P, P]),
    "gt_keymap_insert": Signature((CPU,), I64, [P, I64, P, P, U64, I32, P, P]),
    # n, keys, cols, base, out (n x cols doubles): the uniforms of a dynamic vocabulary's new rows
    "gt_keyed_unit": Signature((CPU,), None, [I64, P, I64, U64, P]),
    # the shard server's fast lane (fastlane.cpp): start(listen fd, token, token bytes, max connections, max
    # ids, max reply bytes, handshake ms, stall ms), set_table(server, name, name bytes, data, lo, hi, row
    # bytes, element type code, ndim, dims), stats(server, out, n), set_graph(server, indptr, indices, lo,
    # nodes), stop(server)
    "gt_fast_start": Signature((CPU,), P, [INT, ctypes.c_char_p, I64, I64, I64, I64, I64, I64]),
    "gt_fast_set_table": Signature((CPU,), INT, [P, ctypes.c_char_p, I64, P, I64, I64, I64, I32, I32, P, P]),
    "gt_lock_new": Signature((CPU,), P, []),
    "gt_lock_free": Signature((CPU,), None, [P]),
    "gt_lock_acquire": Signature((CPU,), I32, [P, I32, F64]),
    "gt_lock_release": Signature((CPU,), I32, [P]),
    "gt_lock_locked": Signature((CPU,), I32, [P]),
    "gt_lock_describe": Signature(
        (CPU,), I32, [P, I32, I32, I32, I64, I64, P, I32, U64, P, P, P, P, P, P, OptimParams]
    ),
    "gt_lock_stale": Signature((CPU,), None, [P]),
    "gt_fast_stats": Signature((CPU,), None, [P, P, I64]),
    "gt_fast_set_graph": Signature((CPU,), None, [P, P, P, I64, I64]),
    "gt_fast_set_segments": Signature((CPU,), None, [P, ctypes.c_char_p, I64]),
    "gt_fast_stop": Signature((CPU,), None, [P]),
    # CUDA core (cuda/src/optim_cuda.cu): every call returns an error code and leaves its message in
    # gt_cuda_last_error. Device pointers; the sparse step's tail has the flag "steps is the table's one
    # Adam count" where the CPU's has the count itself; then the device, the caller's stream, a workspace
    # (pointer, bytes: gt_cuda_workspace_bytes), flags_out (three int64 on the device: a deferred call, or
    # null) and bad_pos
    "gt_cuda_last_error": Signature((CUDA,), ctypes.c_char_p, []),
    "gt_cuda_probe": Signature((CUDA,), INT, [I32, P]),
    "gt_cuda_workspace_bytes": Signature((CUDA,), INT, [I32, I64, I64, I64, I32, P]),
    "gt_cuda_sparse_step": Signature(
        (CUDA,),
        I64,
        [
            I32,
            I64,
            P,
            P,
            I64,
            I64,
            I32,
            P,
            I32,
            U64,
            P,
            P,
            P,
            I32,
            OptimParams,
            F32,
            I32,
            I32,
            P,
            P,
            I64,
            P,
            P,
        ],
    ),
    "gt_cuda_gather": Signature((CUDA,), INT, [I64, P, P, I64, I64, P, I32, P, P, I64, P]),
    "gt_cuda_scatter": Signature((CUDA,), INT, [I64, P, P, P, I64, I64, I32, P, P, I64, P]),
    # neighbour sampling (sampling_cuda.cu): workspace(n, device, bytes); count(indptr, num_nodes, seeds,
    # n, fanout, counts, ends, device, stream, workspace, bytes, total, bad_pos); fill(indptr, indices,
    # seeds, n, seed, counts, ends, out, device, stream)
    "gt_cuda_sample_workspace_bytes": Signature((CUDA,), INT, [I64, I32, P]),
    "gt_cuda_sample_count": Signature((CUDA,), INT, [P, I64, P, I64, I64, P, P, I32, P, P, I64, P, P]),
    "gt_cuda_sample_fill": Signature((CUDA,), INT, [P, P, P, I64, U64, P, P, P, I32, P]),
    "gt_cuda_sample_edges_count": Signature(
        (CUDA,), INT, [P, P, I64, P, I64, I64, P, I64, P, P, I32, P, P, I64, P, P]
    ),
    "gt_cuda_sample_edges_fill": Signature((CUDA,), INT, [P, P, P, I64, I64, P, I64, U64, P, P, P, I32, P]),
}


def load(path: Path, library: str) -> ctypes.CDLL:
    """Open the `library` ("cpu" or "cuda") build at `path`, check its ABI and declare its functions.

    Raises:
        OSError: the file cannot be loaded at all.
        StaleNativeCore: it reports another ABI version or OptimParams size, or lacks an entry point.
    """
    lib = ctypes.CDLL(str(path))
    _check(lib, path, library)
    for name, sig in SIGNATURES.items():
        if library in sig.libraries:
            fn = _entry(lib, path, library, name)
            fn.argtypes, fn.restype = sig.argtypes, sig.restype
    return lib


def _check(lib: ctypes.CDLL, path: Path, library: str) -> None:
    version = _entry(lib, path, library, "gt_abi_version")
    size = _entry(lib, path, library, "gt_optim_params_size")
    version.argtypes, version.restype = [], I32
    size.argtypes, size.restype = [], I64
    got = (int(version()), int(size()))
    if got != (ABI_VERSION, ctypes.sizeof(OptimParams)):
        raise _stale(path, library, f"it reports ABI version {got[0]} with a {got[1]}-byte OptimParams")


def _entry(lib: ctypes.CDLL, path: Path, library: str, name: str) -> Any:
    try:
        return getattr(lib, name)
    except AttributeError:
        raise _stale(path, library, f"it has no {name}()") from None


def _stale(path: Path, library: str, what: str) -> StaleNativeCore:
    want = f"ABI version {ABI_VERSION} with a {ctypes.sizeof(OptimParams)}-byte OptimParams"
    return StaleNativeCore(
        f"the native {library.upper()} core {path} was built from other sources than this package "
        f"({what}; the bindings expect {want}): {REBUILD[library]}"
    )
