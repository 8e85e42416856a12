"""A graph's node data (features, labels) held whole on the trainer's device, beside the graph it samples
there (device_sampler.py): a batch's inputs are then one gather on the device.

Why: a GPU trainer that samples on its GPU still gathered each batch's input features on one host core
(a WordNet batch: ~20k random rows of 1 KB) and copied them up, on the loader thread, every step; the
graph itself had moved to the device for the same reason. Node data is read-only during training, so
one copy at start serves every batch and every evaluation. Taken only when it fits in DATA_SHARE of the
device's free memory (after the graph); otherwise batches fetch their rows as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

DATA_SHARE = 0.25  # of the device's free memory the node data may take; beyond it rows are fetched per batch
COPY_ROWS = 1 << 18  # rows pulled and copied up at a time (bounded host memory for large graphs)


def data_on_device(nbytes: int, room: int | None) -> bool:
    """Whether node data of `nbytes` goes to a device with `room` free bytes (None: no limit). The host
    (training.sampler device on a CPU trainer) counts too: its copy sits beside the shards' rows."""
    return room is None or nbytes <= DATA_SHARE * room


def row_bytes(t: Any) -> int:
    """Bytes of one row of a DistTensor."""
    return int(np.prod(t.shape[1:], dtype=np.int64)) * np.dtype(t.np_dtype).itemsize


def device_node_data(
    tensors: dict[str, Any], num_nodes: int, device: torch.device, room: int | None
) -> dict[str, torch.Tensor]:
    """Each DistTensor of `tensors` (None ones left out) whole on `device`, when together they fit
    (data_on_device); {} when they do not."""
    present = {k: v for k, v in tensors.items() if v is not None}
    if not present or not data_on_device(sum(num_nodes * row_bytes(t) for t in present.values()), room):
        return {}
    out = {}
    for name, t in present.items():
        whole = torch.empty((num_nodes, *t.shape[1:]), dtype=t.dtype, device=device)
        for lo in range(0, num_nodes, COPY_ROWS):
            hi = min(lo + COPY_ROWS, num_nodes)
            whole[lo:hi].copy_(t[np.arange(lo, hi, dtype=np.int64)])
        out[name] = whole
    return out


def data_bytes(data: dict[str, torch.Tensor]) -> int:
    return sum(v.numel() * v.element_size() for v in data.values())
