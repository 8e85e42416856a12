"""Spawned-rank scenarios of test_gradsync.py: every GNN trained data-parallel with GradSync over gloo,
each rank on its own blocks, a few Adam steps, the dense step taken a step late as the tasks take it;
and GradSync's own rules (rank 0's start, a parameter without a gradient, one average at a time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from graphtrain.runtime.train.gradsync import GradSync
from tests.runtime.models.test_gradsync import VARIANTS, steps


def train_every_model(rank: int, world: int, out: Path) -> dict[str, Any]:
    result = {}
    for name in VARIANTS:
        model = steps.build(name)
        if rank:  # another start on rank 1: GradSync begins every rank from rank 0's weights
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
        steps.train(model, [rank], world, GradSync(model, world))
        result.update({f"{name}/{k}": v.detach().numpy() for k, v in model.state_dict().items()})
    return result


def rules(rank: int, world: int, out: Path) -> dict[str, Any]:
    """Rank 0's weights and buffers everywhere; rank 0 leaves the bias without a gradient (zeros there),
    rank 1 gives both a gradient; a second start before finish is refused."""
    torch.manual_seed(rank)
    model = torch.nn.Linear(3, 2)
    model.register_buffer("kept", torch.full((2,), float(rank)))
    torch.manual_seed(0)
    rank0 = torch.nn.Linear(3, 2)
    sync = GradSync(model, world)
    loss = model.weight.sum() if rank == 0 else model(torch.full((1, 3), 2.0)).sum()
    loss.backward()
    sync.start()
    try:
        sync.start()
        refused = ""
    except RuntimeError as exc:
        refused = str(exc)
    assert sync.pending
    sync.finish()
    assert not sync.pending
    return {
        "weight": model.weight.detach().numpy(),
        "bias": model.bias.detach().numpy(),
        "rank0_weight": rank0.weight.detach().numpy(),
        "rank0_bias": rank0.bias.detach().numpy(),
        "kept": model.kept.numpy(),
        "weight_grad": model.weight.grad.numpy(),
        "bias_grad": model.bias.grad.numpy(),
        "refused": refused,
    }
