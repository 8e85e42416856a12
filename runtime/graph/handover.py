"""Batches made on the loader thread for a GPU trainer: their kernels and copies on a side CUDA stream, handed
to the training stream without a host wait.

Why: a GPU trainer's loader thread samples on the GPU (device_sampler.py) and copies features and labels
up. On the training thread's stream, those kernels would queue behind the model's step, and the
sampler's own host waits (the size of each layer) would wait for the whole step. On its own stream the
next batch is made while the step runs. The hand-over follows torch's rules for tensors shared across
streams:
- the training stream waits for an event recorded after the batch was made (ordering, no host wait);
- each of the batch's tensors is marked as used by the training stream (record_stream), so the caching
  allocator does not give its memory to the side stream again before the training stream has finished
  with it.
On the CPU every function here does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


def side_stream(device: torch.device | None) -> torch.cuda.Stream | None:
    """A stream of its own for the loader thread of a trainer on `device` (None on the CPU)."""
    if device is None or device.type != "cuda":
        return None
    return torch.cuda.Stream(device)


def on(stream: torch.cuda.Stream | None) -> contextlib.AbstractContextManager[Any]:
    """The block's CUDA work goes to `stream` (nothing changes without one)."""
    return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)


def made(stream: torch.cuda.Stream | None) -> torch.cuda.Event | None:
    """An event marking the end of the work queued so far on `stream` (a batch made)."""
    if stream is None:
        return None
    event = torch.cuda.Event()
    event.record(stream)
    return event


def tensors_of(value: Any) -> Iterator[torch.Tensor]:
    """Every dense tensor that holds `value`'s memory: a tensor (a sparse CSR one's three arrays), a
    list, tuple or dict of them, or an object with tensor attributes (a Block, a MiniBatch)."""
    if isinstance(value, torch.Tensor):
        if value.layout == torch.sparse_csr:
            yield from (value.crow_indices(), value.col_indices(), value.values())
        elif value.layout == torch.strided:
            yield value
        return
    if isinstance(value, dict):
        for v in value.values():
            yield from tensors_of(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from tensors_of(v)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from tensors_of(getattr(value, name))


def receive(batch: Any, event: torch.cuda.Event | None, device: torch.device | None) -> None:
    """On the training thread: its stream waits for the batch's event, and owns the batch's GPU tensors
    until it is done with them."""
    if event is None or device is None:
        return
    stream = torch.cuda.current_stream(device)
    stream.wait_event(event)
    for t in tensors_of(batch):
        if t.is_cuda:
            t.record_stream(stream)
