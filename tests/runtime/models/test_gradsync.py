"""Every GNN trains data-parallel with GradSync (two gloo ranks, each on its own typed blocks): the ranks
end with the same parameters, those of one process averaging both ranks' gradients; and GradSync's rules."""

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
from graphtrain.runtime.train.gradsync import GradSync
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


def _train(model: torch.nn.Module, my_ranks: list[int], world: int, sync: GradSync | None = None) -> None:
    """3 Adam steps; with several ranks given (the one-process reference), the mean of their gradients;
    with `sync`, each step's average taken over the ranks, and its step taken a step late, when the next
    forward needs the weights (as DenseTask does)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(3):
        if sync is not None and sync.pending:
            sync.finish()
            opt.step()
        opt.zero_grad()
        for r in my_ranks:
            blocks, x, y = _data(r)
            (functional.cross_entropy(model(blocks, x), y) / len(my_ranks)).backward()
        if sync is None:
            opt.step()
        else:
            sync.start()
    if sync is not None:
        sync.finish()
        opt.step()


steps = SimpleNamespace(build=_build, train=_train)


@pytest.mark.timeout(240)
def test_every_gnn_trains_data_parallel_as_one_process_averaging_the_ranks(tmp_path: Path) -> None:
    got = ranks.run("tests.runtime.models.gradsync_scenarios.train_every_model", 2, tmp_path)
    for name in VARIANTS:
        reference = _build(name)
        _train(reference, [0, 1], 2)
        for key, want in reference.state_dict().items():
            a, b = got[0][f"{name}/{key}"], got[1][f"{name}/{key}"]
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {key}: ranks differ")
            np.testing.assert_allclose(
                a, want.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name} {key}"
            )


@pytest.mark.timeout(120)
def test_gradsync_starts_from_rank_0_counts_a_missing_gradient_as_zeros_and_averages_once(
    tmp_path: Path,
) -> None:
    got = ranks.run("tests.runtime.models.gradsync_scenarios.rules", 2, tmp_path)
    for r in got:
        np.testing.assert_array_equal(r["weight"], got[0]["rank0_weight"])
        np.testing.assert_array_equal(r["bias"], got[0]["rank0_bias"])
        np.testing.assert_array_equal(r["kept"], [0.0, 0.0])
        # weight: ones on rank 0 (the sum of it), twos on rank 1 (x = 2); bias: none on rank 0, ones on 1
        np.testing.assert_array_equal(r["weight_grad"], np.full((2, 3), 1.5, np.float32))
        np.testing.assert_array_equal(r["bias_grad"], [0.5, 0.5])
        assert "still being averaged" in str(r["refused"])


def test_one_trainer_needs_no_group_and_keeps_its_gradients() -> None:
    model = torch.nn.Linear(3, 2)
    sync = GradSync(model, 1)
    model(torch.ones(1, 3)).sum().backward()
    grad = model.weight.grad
    sync.start()
    assert not sync.pending
    sync.finish()
    assert model.weight.grad is grad
