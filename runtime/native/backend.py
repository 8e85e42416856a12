"""Which implementation serves a piece of work: the CUDA core, the native CPU core or the torch reference.

One decision for every call site that has a native path and a fallback (the sparse optimizers, dedup,
gather, the non-finite scan, sampling, relabelling, the fused dropout, huge-page allocation), made
from the device the data is on, an explicit request, and what is built here. Asking for a core that
is not there is an error, never a silent fallback; a core that is there but stale raises
StaleNativeCore (abi.py) wherever it is asked for.
"""

from __future__ import annotations

import functools
import os
import warnings
from enum import StrEnum

import torch

from graphtrain.runtime.native import available, cuda

ENV_BACKEND = "GRAPHTRAIN_OPTIM_BACKEND"


class CoreBackend(StrEnum):
    CUDA = "cuda"  # the CUDA core (cuda/src/*.cu): data on a GPU
    CPU = "cpu"  # the native CPU core (cuda/src/*.cpp, C++ and OpenMP): data in host memory
    TORCH = "torch"  # the reference: torch or numpy operations, always there


BACKENDS: tuple[str, ...] = tuple(b.value for b in CoreBackend)


def choose(device: torch.device | str = "cpu", requested: str | None = None) -> CoreBackend:
    """The backend for data on `device`: the native core built for that device when it loads, else the
    torch reference; or `requested`, checked.

    Raises:
        ValueError: an unknown backend, one that is not built, or one that cannot serve `device`.
        StaleNativeCore: the core for `device` was built from other sources (rebuild it).
    """
    dev = torch.device(device)
    kind, index = dev.type, dev.index or 0  # "cuda:1": "cuda", 1
    if requested is None:
        if kind == "cuda":
            return CoreBackend.CUDA if cuda.available(index) else CoreBackend.TORCH
        if kind != "cpu":
            return CoreBackend.TORCH
        if available():
            return CoreBackend.CPU
        _core_missing()
        return CoreBackend.TORCH
    if requested not in BACKENDS:
        raise ValueError(f"{ENV_BACKEND} must be one of {BACKENDS}, got {requested!r}")
    if requested == CoreBackend.CPU and (kind != "cpu" or not available()):
        raise ValueError("backend 'cpu' needs the native core (reinstall the package) and a CPU table")
    if requested == CoreBackend.CUDA and (kind != "cuda" or not cuda.available(index)):
        why = cuda.unavailable_reason(index) if kind == "cuda" else f"the table is on {dev}"
        raise ValueError(f"backend 'cuda' needs the CUDA core and a GPU table that it runs on: {why}")
    return CoreBackend(requested)


@functools.cache
def _core_missing() -> None:
    """Say once per process that the CPU work runs on the reference: it is correct but several times
    slower, and sampling draws other neighbours, so a run without its core must not pass unnoticed."""
    warnings.warn(
        "the native CPU core is not built here: sparse optimizers, gathers and sampling run the torch "
        "reference (several times slower; sampling draws differ). Reinstall with a C++ compiler "
        "(pip install -e . / make install), without GRAPHTRAIN_NATIVE=0",
        RuntimeWarning,
        stacklevel=3,
    )


def choose_for_optimizer(device: torch.device | str, requested: str | None = None) -> CoreBackend:
    """`choose` for a sparse optimizer step, where GRAPHTRAIN_OPTIM_BACKEND stands in for a request the
    caller did not make. The override is the optimizers' alone: it exists to run a table's updates on a
    given implementation (the reference, say); the other call sites' fallbacks only cover a missing
    core, and sampling's draws differently, so they ignore it."""
    return choose(device, requested or os.environ.get(ENV_BACKEND) or None)
