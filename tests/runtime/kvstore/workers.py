"""Client processes of the runtime tests (a module, so a forked or spawned process can import it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

NUM_ROWS, DIM, STEPS = 3000, 16, 6
INIT = {"kind": "uniform", "low": -1.0, "high": 1.0, "seed": 7}


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Heavy duplicates (a hot quarter of the table), the last row, and rows of both shards."""
    rng = np.random.default_rng([rank, step, 11])
    ids = np.concatenate(
        [rng.integers(0, NUM_ROWS // 4, 300), rng.integers(0, NUM_ROWS, 100), [NUM_ROWS - 1] * 5]
    )
    grads = rng.standard_normal((len(ids), DIM)).astype(np.float32)
    return torch.from_numpy(ids), torch.from_numpy(grads)


def train(
    addresses: list[str], token: str, rank: int, world: int, config: dict[str, Any], ckroot: str
) -> None:
    from graphtrain.runtime import kvstore
    from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
    from graphtrain.runtime.tensor import DistEmbedding

    client = kvstore.connect(addresses, token, timeout=60)
    emb = DistEmbedding(NUM_ROWS, DIM, "emb", init=INIT, client=client)
    opt = SparseOptimizer([emb], OptimConfig(**config))
    for step in range(STEPS):
        for turn in range(world):  # clients take turns, so the reference can replay the same order
            if turn == rank:
                ids, grads = batch(rank, step)
                (emb(ids) * grads).sum().backward()
                opt.step()
            client.barrier(f"step{step}.{turn}", world)
    if rank == 0:
        client.checkpoint("final", root=Path(ckroot))
    client.barrier("done", world)
    client.close()
