"""Process memory policy for training processes: keep freed memory instead of returning it.

A training step allocates and frees tensors of tens of MB (pulled rows, gradients, products). glibc
serves allocations above M_MMAP_THRESHOLD (32 MB at most by its dynamic rule) with fresh mmaps and
returns them on free, so every step faults all of them back in page by page: measured here, an
embedding step of 100,000 x 128 rows took 121 ms that way and 37 ms once freed memory stays in the
process (the same effect as MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_). The price is a resident
size at the high-water mark, which a training process reaches anyway.

Large tables (4 MB+) in host memory also ask for 2 MB pages before their first write (`empty`): random
row access to multi-GB tables then misses the TLB far less.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import torch

from graphtrain.runtime.native import core
from graphtrain.runtime.native.backend import CoreBackend, choose

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


@functools.cache
def keep_freed_memory(mmap_threshold: int = 1 << 30, trim_threshold: int = 2**31 - 1) -> bool:
    """Tell glibc to serve allocations below `mmap_threshold` from its heap and not to trim it.
    Returns True if applied (False on a libc without mallopt: nothing to do)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))


HUGE_PAGE_MIN_BYTES = 4 << 20


def advise_hugepages(t: torch.Tensor) -> bool:
    """Ask for transparent huge pages under a large CPU tensor; True if the kernel accepted.

    Only pages not touched yet are affected: call it before the tensor is first written (see `empty`).
    """
    return core().gt_advise_hugepages(t.data_ptr(), t.numel() * t.element_size()) == 0


def empty(
    shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """An uninitialised tensor; in host memory with the native core, a large one (4 MB+) is backed by
    2 MB pages when the kernel allows (an optimisation, never a need: a refusal is ignored)."""
    t = torch.empty(shape, dtype=dtype, device=device)
    if t.numel() * t.element_size() >= HUGE_PAGE_MIN_BYTES and choose(t.device) is CoreBackend.CPU:
        advise_hugepages(t)
    return t
