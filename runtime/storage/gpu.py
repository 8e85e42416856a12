"""The CUDA side of a GPU shard server: worker streams, the write order of a table across them, pinned
staging of the rows that cross the bus, and checkpoints copied in bounded chunks. Everything here is a
no-op or a plain copy for host tensors, so a CPU server runs the same code.

Streams and order. Each server worker runs on its own CUDA stream (worker_stream), so one long
optimizer step does not hold every pull behind it on the default stream. A table written on one stream
and read on another needs an order: every write (push, push_grad, restore, the move to the GPU) happens
under the table's lock and ends by recording an event (mark_written); every use of a GPU table, read or
write, first makes its stream wait for the last write's event (wait_written). Writers hold the lock, so
writes form one chain. A pull is not under the lock: like a read of a CPU table, it may see a row that a
concurrent step is updating (Hogwild, as DGL's shared-memory reads), never memory that is not the table's.

Pinned staging. Rows go device -> host with a non-blocking copy into pinned memory and one stream
synchronisation before they are handed to ZMQ; ids and gradients go host -> device from pinned memory,
non-blocking on the worker's stream, which is the stream that then uses them. Pinned blocks come from
torch's caching host allocator, which keeps a block until the copies that use it are done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from graphtrain.runtime.dtypes import to_numpy
from graphtrain.runtime.errors import GraphtrainError

if TYPE_CHECKING:
    from graphtrain.runtime.storage.shard import TensorShard

CHECKPOINT_CHUNK_BYTES = 64 << 20  # rows (and their optimizer state) copied per lock hold
FREEZE_HEADROOM = 1.25  # a frozen copy is made only when the device has this much more free than it takes


@contextlib.contextmanager
def worker_stream(device: torch.device) -> Iterator[None]:
    """Run a server worker on a stream of its own on a GPU server; nothing on a CPU one."""
    if device.type != "cuda":
        yield
        return
    with torch.cuda.device(device), torch.cuda.stream(torch.cuda.Stream(device)):
        yield


def wait_written(t: TensorShard) -> None:
    """Make this thread's current stream wait for the table's last write (recorded on any stream)."""
    event = t.written
    if event is not None and t.data.is_cuda:
        torch.cuda.current_stream(t.data.device).wait_event(event)


def mark_written(t: TensorShard) -> None:
    """Record the end of a write to a GPU table on this thread's stream (call under the table's lock)."""
    if t.data.is_cuda:
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(t.data.device))
        t.written = event
    else:
        t.written = None


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """`array` as a tensor on `device`: itself for the host; else staged through pinned memory and
    copied without blocking on the current stream (which must be the one that uses it)."""
    src = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cpu":
        return src
    staged = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    staged.copy_(src)
    return staged.to(device, non_blocking=True)


def download(rows: torch.Tensor, out: torch.Tensor | None = None) -> np.ndarray:
    """Rows on a GPU into host memory (`out`, pinned where the server's buffers are), complete on return:
    one non-blocking copy and one synchronisation of the current stream."""
    if out is None:
        out = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
    out.copy_(rows, non_blocking=True)
    sync(rows.device)
    return to_numpy(out)  # a bfloat16 table's rows as their bits


def sync(device: torch.device) -> None:
    """Wait for the work queued on this thread's stream of `device` (nothing to wait for on the host)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def save_chunked(
    directory: Path,
    view: TensorShard,
    live: TensorShard,
    chunk_bytes: int = CHECKPOINT_CHUNK_BYTES,
    stopped: Callable[[], bool] | None = None,
    rows: int | None = None,
) -> None:
    """Write a GPU table's rows (data.npy) and optimizer state (state.<key>.npy) as .npy files, in chunks
    of about `chunk_bytes` through pinned buffers, without holding the table's lock for the whole table.

    `view`: the table's tensors and config as they were when the checkpoint began; `live`: the table
    (its lock and last write). Per chunk of rows, under the lock, the rows and their state are copied on
    the device (a fast device-to-device copy, waited for before the lock is released); the download to
    host and the file write happen outside it. So each row's values and optimizer state come from the
    same step, but different chunks may come from different steps if pushes go on during a checkpoint
    (trainers checkpoint between steps, when none do). Files are written inside write_piece's
    temporary directory, so the piece is still complete or absent, and hashed after this returns.
    `rows`: only rows 0..rows-1 (a dynamic vocabulary's rows in use), else every row.
    """
    tensors = {"data.npy": view.data, **{f"state.{k}.npy": v for k, v in view.state.items()}}
    rowed = [n for n, v in tensors.items() if v.dim() and v.shape[0] == view.rows and not _scalar(n, v, view)]
    whole = [n for n in tensors if n not in rowed]  # the table-wide Adam step: one element
    total = view.rows if rows is None else rows
    outs = {
        name: np.lib.format.open_memmap(
            directory / name,
            mode="w+",
            dtype=_numpy_dtype(v.dtype),
            shape=(total, *v.shape[1:]) if name in rowed else tuple(v.shape),
        )
        for name, v in tensors.items()
    }
    width = sum(tensors[n][:1].numel() * tensors[n].element_size() for n in rowed)
    step = max(1, chunk_bytes // max(1, width))
    stage = {n: _pinned((min(step, view.rows), *tensors[n].shape[1:]), tensors[n].dtype) for n in rowed}
    for a in range(0, max(total, 1), step):
        if stopped is not None and stopped():  # an abandoned checkpoint's piece ends at the next chunk
            raise GraphtrainError("the checkpoint was abandoned")
        b = min(total, a + step)
        with live.lock:
            wait_written(live)
            copies = {n: tensors[n][a:b].clone() for n in rowed}
            if a == 0:
                copies.update({n: tensors[n].clone() for n in whole})
            sync(view.data.device)  # the copies are done before another writer may start
        for n, c in copies.items():
            host = stage[n][: b - a] if n in rowed else _pinned(tuple(c.shape), c.dtype)
            host.copy_(c, non_blocking=True)
            sync(view.data.device)
            if n in rowed:
                outs[n][a:b] = to_numpy(host)
            else:
                outs[n][...] = to_numpy(host)
    for mm in outs.values():
        mm.flush()
    del outs


def table_bytes(t: TensorShard) -> int:
    """A table's rows and optimizer state, in bytes."""
    return sum(v.numel() * v.element_size() for v in (t.data, *t.state.values()))


def working_bytes(device: torch.device) -> int:
    """The most memory this process's work has held beyond its lasting allocations (torch's peak
    reserved less what is allocated now: a training step's activations, a server's buffers): what a
    copy made between steps must leave free. 0 on the host."""
    if device.type != "cuda":
        return 0
    return max(0, torch.cuda.max_memory_reserved(device) - torch.cuda.memory_allocated(device))


def freeze(t: TensorShard, free_bytes: int) -> TensorShard | None:
    """A copy of a GPU table's rows and optimizer state on its own device, for a checkpoint written by a
    thread while pushes go on: taken under the table's lock (the caller holds it), after its last write,
    and complete on return (a device-to-device copy: ~1 ms per GB on an H100, where writing the table
    within the op paused training 1.5 s per checkpoint). `free_bytes`: the device's free memory, the
    allocator's unused blocks included. None when that, less the work's own peak (working_bytes: the
    next step must still fit), cannot hold the copy with FREEZE_HEADROOM, or when the copy runs out of
    memory: the caller then writes the table within the op (save_chunked), as before."""
    if free_bytes - working_bytes(t.data.device) < FREEZE_HEADROOM * table_bytes(t):
        return None
    wait_written(t)
    try:
        data, state = t.data.clone(), {k: v.clone() for k, v in t.state.items()}
        sync(t.data.device)
    except torch.cuda.OutOfMemoryError:
        return None
    # its own count of rounded steps: the live table's goes on while the copy is written (a half table's
    # manifest records the count its rows were rounded with, which a resumed run's rounding goes on from)
    return dataclasses.replace(
        t,
        data=data,
        state=state,
        lock=threading.Lock(),
        written=None,
        snapshot=None,
        changed=None,
        shm=None,
        round_steps=t.round_steps.copy(),
    )


def _scalar(name: str, v: torch.Tensor, view: TensorShard) -> bool:
    """The table-wide Adam step of a one-row table has as many rows as the table: not a per-row tensor."""
    return name == "state.step.npy" and view.config is not None and view.config.step_count == "global"


def _pinned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, pin_memory=torch.cuda.is_available())


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The dtype of a tensor's .npy file: bfloat16's bits as int16, as in every checkpoint (dtypes.py)."""
    return to_numpy(torch.empty((), dtype=dtype)).dtype
