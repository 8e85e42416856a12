"""Where a trainer computes (spec trainers.device) and how its tensors get there.

A trainer on cuda takes GPU `rank mod visible GPUs`: in a pod the device plugin shows it its one GPU
(cuda:0); on one machine `graphtrain run` spreads the ranks over the GPUs it sees. Its process group then
serves both kinds of tensors: gloo for the CPU helpers (loss sums, evaluation counts, agreement),
nccl for the model's gradients. What the shard servers send stays in host memory until it is needed: the
loader copies a batch's features and blocks on its own thread, and the embedding rows are moved after the
pull, so their gradients come back to the host leaf the sparse optimizer reads (nothing else changes).
Standalone on a GPU keeps its in-process tables there (standalone_shard_device): their rows are pulled
and stepped on the device (kvstore/client/direct.py) and never cross the host.
"""

from __future__ import annotations

from typing import Any

import torch

from graphtrain.runtime.errors import GraphtrainError


def trainer_device(kind: str, rank: int, visible: int) -> torch.device:
    """cpu, or cuda:(rank mod `visible`) for a trainer on cuda.

    Raises:
        GraphtrainError: trainers.device is cuda and this process sees no GPU.
    """
    if kind != "cuda":
        return torch.device("cpu")
    if visible < 1:
        raise GraphtrainError(
            "trainers.device is cuda but this trainer sees no GPU (torch.cuda.device_count() is 0)"
        )
    return torch.device("cuda", rank % visible)


def standalone_shard_device(trainer: torch.device, shard_servers: str) -> str:
    """Where `--standalone` keeps its in-process shards' learnable tables: the trainer's GPU when it
    computes on one (rows and optimizer state beside the model, stepped by the CUDA core), or cuda:0
    when the spec puts shard servers on cuda; else the host. Node data stays in host memory either way
    (storage/placement.py), as on a GPU shard server."""
    if trainer.type == "cuda":
        return str(trainer)
    return "cuda:0" if shard_servers == "cuda" else "cpu"


def process_group_backend(backend: str) -> str:
    """The torch.distributed backend string: nccl for CUDA tensors beside gloo for CPU ones."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def to_device(value: Any, device: torch.device) -> Any:
    """`value` (a tensor, a Block, a list of them, None) on `device`: itself on the CPU; else copied
    without blocking the host (through pinned memory from the host; the copy is ordered before the
    kernels that use it, on the same stream)."""
    if device.type == "cpu" or value is None:
        return value
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu" and device.type == "cuda" and not value.is_pinned():
            # from pageable memory the copy would first wait for everything queued on the stream
            value = value.pin_memory()
        return value.to(device, non_blocking=True)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    moved = getattr(value, "to", None)
    if moved is None:
        raise TypeError(f"cannot move a {type(value).__name__} to {device}")
    return moved(device)


def device_generator(device: torch.device) -> torch.Generator | None:
    """The default generator of a GPU (what its dropout draws on), None on the CPU: the epoch loop seeds
    it with each step's seed as it seeds the CPU's, so a resumed GPU run draws the masks of the
    uninterrupted one."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.default_generators[index]
