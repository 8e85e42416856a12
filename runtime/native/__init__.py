"""Python side of the native core: loads the shared library built from cuda/src at install time.

The library has a plain C ABI; arrays cross as raw pointers after the Python side checked dtype,
shape and contiguity (the C side trusts its inputs). ctypes releases the GIL for every call.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from graphtrain.runtime.native.abi import CPU, NativeUnavailable, OptimParams, StaleNativeCore, load

_HERE = Path(__file__).parent

__all__ = ["NativeUnavailable", "OptimParams", "StaleNativeCore", "available", "core", "ptr"]


@functools.cache
def _core_path() -> Path | None:
    """The built CPU core, looked for once (a missing core then costs its callers no directory scan)."""
    found = sorted(_HERE.glob("_core*.so")) + sorted(_HERE.glob("_core*.dylib"))
    return next((p for p in found if not p.name.startswith("_core_cuda")), None)


@functools.cache
def core() -> ctypes.CDLL:
    """The loaded native core library (built once by `pip install`), its ABI checked (abi.py).

    Raises:
        NativeUnavailable: it was not built.
        StaleNativeCore: it was built from other sources: rebuild it.
    """
    path = _core_path()
    if path is None:
        raise NativeUnavailable(
            f"native core not found in {_HERE}; reinstall with `pip install -e .` (needs a C++ compiler)"
        )
    return load(path, CPU)


def available() -> bool:
    """Whether the native core is built and loadable (a stale build raises StaleNativeCore instead)."""
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
