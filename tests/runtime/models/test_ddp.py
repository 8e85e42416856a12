"""Every GNN trains under DistributedDataParallel (two gloo ranks, each on its own typed blocks): the
ranks end with the same parameters, those of one process averaging both ranks' gradients."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.nn import functional

from graphtrain.contract.spec import GATModel, GraphSAGEModel, RGCNModel
from graphtrain.contract.spec.model import RGATModel
from graphtrain.runtime.models import GNNShape, gnn_entry
from tests.runtime.collective import ranks
from tests.runtime.models.test_layers import block

VARIANTS = {
    "graphsage": GraphSAGEModel(hidden_dim=8, dropout=0.0),
    "gat": GATModel(hidden_dim=8, heads=2, dropout=0.0),
    "rgcn": RGCNModel(hidden_dim=8, num_bases=2, dropout=0.0),
    "rgat": RGATModel(hidden_dim=8, heads=2, dropout=0.0, edge_features=True),
}
SHAPE = GNNShape(5, 3, num_relations=3, edge_dim=2)


def _build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return gnn_entry(VARIANTS[name].KIND).build(VARIANTS[name], SHAPE)


def _data(rank: int) -> tuple[list, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    b0, b1 = block(15, 30, 80, seed=10 + rank), block(6, 15, 40, seed=20 + rank)
    return [b0, b1], torch.randn(30, 5, generator=g), torch.randint(0, 3, (6,), generator=g)


def _train(model: torch.nn.Module, my_ranks: list[int], world: int) -> None:
    """3 Adam steps; with several ranks given (the one-process reference), the mean of their gradients."""
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        for r in my_ranks:
            blocks, x, y = _data(r)
            (functional.cross_entropy(model(blocks, x), y) / len(my_ranks)).backward()
        opt.step()


steps = SimpleNamespace(build=_build, train=_train)


@pytest.mark.timeout(240)
def test_every_gnn_trains_in_ddp_as_one_process_averaging_the_ranks(tmp_path: Path) -> None:
    got = ranks.run("tests.runtime.models.ddp_scenarios.train_every_model", 2, tmp_path)
    for name in VARIANTS:
        reference = _build(name)
        _train(reference, [0, 1], 2)
        for key, want in reference.state_dict().items():
            a, b = got[0][f"{name}/{key}"], got[1][f"{name}/{key}"]
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {key}: ranks differ")
            np.testing.assert_allclose(
                a, want.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name} {key}"
            )
