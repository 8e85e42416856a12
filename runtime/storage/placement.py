"""Where a shard server keeps each table, how its rows are gathered, and whether memory for it is free:
pure decisions, tested without a GPU.

A GPU shard server (--device cuda) keeps on the GPU only what the GPU computes on: learnable tables
(float32, float16 or bfloat16 rows of one dimension, once a sparse optimizer is attached: the CUDA core
steps all three, tests/gpu/test_half_tables.py) and their optimizer state. Node
data from the partition (features, labels, masks) and every other table stay in host memory, served as
a CPU server serves them (one native gather, shared memory for trainers on the host): the server does no
compute on them, and GPU memory is the scarce resource. A table is created on the host and moves to the
GPU when its optimizer attaches (set_optimizer, or a restore that brings one).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import psutil
import torch

from graphtrain.runtime.dtypes import HALF
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.storage.errors import StorageError

CPU = torch.device("cpu")

# What a sticky CUDA error says: after one the context is dead and every later call fails too.
STICKY = (
    "cudaErrorIllegalAddress",
    "illegal memory access",
    "cudaErrorLaunchFailure",
    "unspecified launch failure",
    "cudaErrorMisalignedAddress",
    "misaligned address",
    "cudaErrorIllegalInstruction",
    "illegal instruction",
    "cudaErrorHardwareStackError",
    "cudaErrorInvalidPc",
    "cudaErrorAssert",
    "device-side assert",
    "cudaErrorLaunchTimeout",
    "cudaErrorECCUncorrectable",
    "uncorrectable ECC error",
)


def trainable(dtype: str, row_shape: tuple[int, ...]) -> bool:
    """A table that may take a sparse optimizer: float32, float16 or bfloat16 rows of one dimension."""
    return dtype in ("float32", *HALF) and len(row_shape) == 1


def placement(
    dtype: str, row_shape: tuple[int, ...], learnable: bool, server: torch.device, shared: bool = False
) -> torch.device:
    """The device of a table on a server whose --device is `server`: the server's GPU for a learnable
    (optimizer attached) trainable table, else host memory. `shared`: the table is in shared memory,
    where clients on this host may have mapped it; it stays there (moving it would leave them reading a
    stale copy) and its optimizer runs on the CPU."""
    if server.type == "cuda" and learnable and trainable(dtype, row_shape) and not shared:
        return server
    return CPU


def shareable(dtype: str, row_shape: tuple[int, ...], node_data: bool, server: torch.device) -> bool:
    """May the table go in shared memory (with --shm)? On a GPU server not a client's trainable table:
    it moves to the GPU when its optimizer attaches. Node data from the partition stays shared."""
    return server.type == "cpu" or node_data or not trainable(dtype, row_shape)


class Gather(StrEnum):
    NATIVE_CPU = "native-cpu"  # the CPU core's multi-threaded gather: float32 2-D in host memory
    CUDA_CORE = "cuda-core"  # the CUDA core's gather: float32 2-D contiguous on a GPU
    INDEX_SELECT = "index-select"  # torch index_select where the rows are: any dtype and shape


def gather_route(dtype: torch.dtype, dim: int, contiguous: bool, backend: CoreBackend) -> Gather:
    """How to gather rows of a table: a core only for what it takes (float32, 2-D, contiguous), else
    torch, so that any table of any supported dtype and shape can be pulled whatever its device.
    `backend`: choose() for the table's device."""
    if dtype == torch.float32 and dim == 2 and contiguous:
        if backend is CoreBackend.CPU:
            return Gather.NATIVE_CPU
        if backend is CoreBackend.CUDA:
            return Gather.CUDA_CORE
    return Gather.INDEX_SELECT


def is_sticky(exc: BaseException) -> bool:
    """A CUDA error after which the process's context is unusable (an illegal address, a failed
    launch, ...): the server cannot serve any more and must be restarted (it restores its checkpoint).
    An out-of-memory or a bad argument is not sticky."""
    if not isinstance(exc, RuntimeError):  # CudaCoreError and torch's CUDA errors are RuntimeErrors
        return False
    text = str(exc)
    return any(s in text for s in STICKY)


def free_bytes(device: torch.device) -> int:
    """Memory free for a new allocation on `device`: the GPU's free memory plus what torch's caching
    allocator holds unused (it serves from there first), or the host's available memory."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + max(0, cached)
    return int(psutil.virtual_memory().available)


MemorySource = Callable[[torch.device], int]


def fits(what: str, nbytes: int, device: torch.device = CPU, free: MemorySource = free_bytes) -> None:
    """Refuse an allocation `device` cannot hold, before making it (a bad create must not end the server
    by the kernel's out-of-memory killer, nor a GPU table fail with an out-of-memory later). `free`:
    where the free memory is read (injected in tests).

    Raises:
        StorageError: naming `what`, the bytes needed and the bytes available.
    """
    available = free(device)
    if nbytes > available:
        where = "this server" if device.type == "cpu" else str(device)
        raise StorageError(
            f"{what} needs {nbytes / 2**30:.2f} GiB; {where} has {available / 2**30:.2f} GiB available"
        )


def table_device(text: str) -> torch.device:
    """Where a shard server keeps its tables: cpu or cuda[:N]; a bare "cuda" is cuda:0, so tables, their
    events and messages name one device.

    Raises:
        StorageError: not a device, or neither cpu nor cuda.
    """
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise StorageError(f"--device {text!r} is not a device: cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise StorageError(f"a shard server holds its tables on the CPU or a GPU, not on {device}")
    return torch.device("cuda", 0) if device.type == "cuda" and device.index is None else device


def check_usable(device: torch.device) -> None:
    """A GPU and the CUDA core usable on `device`, checked at start: a server never announces ready
    and then fails its first create.

    Raises:
        StorageError: no such GPU here, or the CUDA core cannot run on it (the reason named).
    """
    if device.type != "cuda":
        return
    from graphtrain.runtime.native import cuda as core

    index = device.index or 0
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise StorageError(f"--device {device}: no such GPU here (torch sees {torch.cuda.device_count()})")
    if not core.available(index):
        raise StorageError(f"--device {device}: the CUDA core cannot run: {core.unavailable_reason(index)}")
