"""Spawned-rank scenario of test_ddp.py: every GNN in DistributedDataParallel over gloo, each rank on its
own blocks, a few Adam steps; the final parameters come back to be compared with one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.nn.parallel import DistributedDataParallel as DDP

from tests.runtime.models.test_ddp import VARIANTS, steps


def train_every_model(rank: int, world: int, out: Path) -> dict[str, Any]:
    result = {}
    for name in VARIANTS:
        model = DDP(steps.build(name))
        steps.train(model, [rank], world)
        result.update({f"{name}/{k}": v.detach().numpy() for k, v in model.module.state_dict().items()})
    return result
