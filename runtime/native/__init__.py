"""Python side of the native core: loads the shared library built from cuda/src at install time.

The library has a plain C ABI; arrays cross as raw pointers after the Python side checked dtype,
shape and contiguity (the C side trusts its inputs). ctypes releases the GIL for every call.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from graphtrain.runtime.errors import GraphtrainError

_HERE = Path(__file__).parent


class NativeUnavailable(GraphtrainError):
    """The native core was not built (install the package with pip, which compiles it)."""


@functools.cache
def core() -> ctypes.CDLL:
    """The loaded native core library (built once by `pip install`)."""
    candidates = sorted(_HERE.glob("_core*.so")) + sorted(_HERE.glob("_core*.dylib"))
    if not candidates:
        raise NativeUnavailable(
            f"native core not found in {_HERE}; reinstall with `pip install -e .` (needs a C++ compiler)"
        )
    lib = ctypes.CDLL(str(candidates[0]))
    _declare(lib)
    return lib


_P = ctypes.c_void_p
_I32, _I64, _U64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64


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
    ]


# dim, num_rows, mean, table, state0, state1, row_steps, global_step, params: the arguments every sparse
# step entry point (CPU and CUDA) takes after its gradients
STEP_TAIL = [_I64, _I64, _I32, _P, _P, _P, _P, _I64, OptimParams]


def _declare(lib: ctypes.CDLL) -> None:
    lib.gt_partition_refine.argtypes = [_I64, _P, _P, _P, _I32, _P, _I32, _P, _P, _I32, _I32, _U64, _P]
    lib.gt_partition_refine.restype = ctypes.c_int
    # kind, n, ids, <the gradients>, then STEP_TAIL, then (pieces only) refuse_nonfinite, then bad_pos
    lib.gt_sparse_step.argtypes = [_I32, _I64, _P, _P, *STEP_TAIL, _I32, _P]
    lib.gt_sparse_step.restype = _I64
    lib.gt_sparse_step_pieces.argtypes = [_I32, _I64, _P, _I64, _P, _P, *STEP_TAIL, _I32, _I32, _P]
    lib.gt_sparse_step_pieces.restype = _I64
    lib.gt_dedup.argtypes = [_I64, _P, _P, _I64, _I64, _I32, _P, _P, _P, _I32, _I32, _P]
    lib.gt_dedup.restype = _I64
    lib.gt_gather.argtypes = [_I64, _P, _P, _I64, _I64, _P, _P, _I32, _P]
    lib.gt_gather.restype = ctypes.c_int
    lib.gt_scatter.argtypes = [_I64, _P, _P, _P, _I64, _I64, _I32, _P]
    lib.gt_scatter.restype = ctypes.c_int
    lib.gt_advise_hugepages.argtypes = [_P, _I64]
    lib.gt_advise_hugepages.restype = ctypes.c_int
    lib.gt_sample_neighbors.argtypes = [_P, _P, _I64, _I64, _P, _I64, _I64, _U64, _P, _P, _P]
    lib.gt_sample_neighbors.restype = _I64
    lib.gt_relabel.argtypes = [_P, _I64, _P, _I64, _P, _P]
    lib.gt_relabel.restype = _I64
    lib.gt_relu_dropout.argtypes = [_I64, _P, _P, _P, ctypes.c_uint32, ctypes.c_float, _U64, _I32]
    lib.gt_relu_dropout.restype = None
    lib.gt_mask_scale.argtypes = [_I64, _P, _P, ctypes.c_float, _P, _I32]
    lib.gt_mask_scale.restype = None
    lib.gt_first_nonfinite.argtypes = [_P, _I64]
    lib.gt_first_nonfinite.restype = _I64
    lib.gt_max_threads.argtypes = []
    lib.gt_max_threads.restype = ctypes.c_int


def available() -> bool:
    """Whether the native core is built and loadable."""
    try:
        core()
    except (NativeUnavailable, OSError):
        return False
    return True


def ptr(array: np.ndarray | None, dtype: type, name: str) -> int | None:
    """Raw pointer of a C-contiguous array of exactly `dtype`, else a TypeError naming it."""
    if array is None:
        return None
    if array.dtype != np.dtype(dtype) or not array.flags.c_contiguous:
        raise TypeError(f"{name}: expected a C-contiguous {np.dtype(dtype)} array, got {array.dtype}")
    return array.ctypes.data
