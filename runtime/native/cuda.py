"""ctypes bindings of the CUDA core (built when GRAPHTRAIN_BUILD_CUDA=1), on CUDA torch tensors.

Same contract as the CPU bindings (runtime/native/optim.py): tensors are checked here, pass as device
pointers with the current CUDA stream, and ids are range-checked on the device before any row is
touched. Without a GPU (as on the project's build machines) `available()` is False and the CPU core
or the torch reference serves.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import _HERE
from graphtrain.runtime.native.abi import CUDA, load
from graphtrain.runtime.native.optim import OptimArgs, state_tensors


@functools.cache
def _lib() -> ctypes.CDLL | None:
    """The CUDA core, its ABI checked (abi.py), or None when it was not built."""
    found = sorted(_HERE.glob("_core_cuda*.so"))
    return load(found[0], CUDA) if found else None


def available() -> bool:
    return torch.cuda.is_available() and _lib() is not None


def _ptr(t: torch.Tensor | None, name: str, dtype: torch.dtype) -> int | None:
    if t is None:
        return None
    if t.device.type != "cuda" or t.dtype != dtype or not t.is_contiguous():
        raise SparseInputError(
            f"{name} must be a contiguous {dtype} CUDA tensor, got {t.dtype} on {t.device}"
        )
    return t.data_ptr()


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def _result(rc: int, ids: torch.Tensor, bad: ctypes.c_int64, num_rows: int) -> int:
    if rc == -1:
        pos = bad.value
        raise SparseInputError(f"ids[{pos}] = {int(ids[pos])} is outside the table's rows [0, {num_rows})")
    if rc < -1:
        raise RuntimeError("CUDA core kernel failed (see CUDA error state)")
    return rc


def sparse_step(
    args: OptimArgs,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    grads: torch.Tensor,
) -> int:
    lib = _lib()
    assert lib is not None
    s0, s1, row_steps, global_step = state_tensors(args, state)
    bad = ctypes.c_int64(-1)
    rc = lib.gt_cuda_sparse_step(
        args.kind,
        len(ids),
        _ptr(ids, "ids", torch.int64),
        _ptr(grads, "grads", torch.float32),
        table.shape[1],
        table.shape[0],
        int(args.mean),
        _ptr(table, "table", torch.float32),
        _ptr(s0, "state", torch.float32),
        _ptr(s1, "exp_avg_sq", torch.float32),
        _ptr(row_steps, "step", torch.int64),
        global_step,
        args.params,
        _stream(),
        ctypes.byref(bad),
    )
    return _result(rc, ids, bad, table.shape[0])


def gather(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    lib = _lib()
    assert lib is not None
    out = torch.empty((len(ids), table.shape[1]), dtype=torch.float32, device=table.device)
    bad = ctypes.c_int64(-1)
    rc = lib.gt_cuda_gather(
        len(ids),
        _ptr(ids, "ids", torch.int64),
        _ptr(table, "table", torch.float32),
        table.shape[1],
        table.shape[0],
        out.data_ptr(),
        _stream(),
        ctypes.byref(bad),
    )
    _result(rc, ids, bad, table.shape[0])
    return out


def scatter(table: torch.Tensor, ids: torch.Tensor, values: torch.Tensor) -> None:
    lib = _lib()
    assert lib is not None
    bad = ctypes.c_int64(-1)
    rc = lib.gt_cuda_scatter(
        len(ids),
        _ptr(ids, "ids", torch.int64),
        _ptr(values, "values", torch.float32),
        _ptr(table, "table", torch.float32),
        table.shape[1],
        table.shape[0],
        _stream(),
        ctypes.byref(bad),
    )
    _result(rc, ids, bad, table.shape[0])
