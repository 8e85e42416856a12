"""The model registry: every spec kind has its module, each module's cost and scores are its own math."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.contract.spec import (
    GNN_KINDS,
    KGE_KINDS,
    DistMultModel,
    GraphSAGEModel,
    ModelSpec,
    TransEModel,
)
from graphtrain.runtime.models import GNNS, KGES, GNNShape, gnn_entry, kge_entry


def test_every_spec_kind_is_registered_once_and_nothing_else() -> None:
    assert set(GNNS) == set(GNN_KINDS) and set(KGES) == set(KGE_KINDS)
    assert set(GNNS) | set(KGES) == set(ModelSpec.VARIANTS)
    assert all(e.kind == k for k, e in [*GNNS.items(), *KGES.items()])


def test_an_unknown_kind_names_the_registered_ones() -> None:
    with pytest.raises(KeyError, match="registered: graphsage"):
        gnn_entry("gcn")
    with pytest.raises(KeyError, match="transe, distmult"):
        kge_entry("rotate")


def test_graphsage_macs_count_both_linear_maps_and_the_mean_over_edges() -> None:
    # layer 1: 10 destinations, 40 edges, 4 -> 3; layer 2: 2 destinations, 5 edges, 3 -> 2
    v = GraphSAGEModel(hidden_dim=3, num_layers=2)
    macs = gnn_entry("graphsage").macs(v, GNNShape(4, 2), [(10, 40), (2, 5)])
    assert macs == 10 * 4 * 3 * 2 + 40 * 4 + 2 * 3 * 2 * 2 + 5 * 3


def test_built_graphsage_has_the_variants_shape() -> None:
    v = GraphSAGEModel(hidden_dim=7, num_layers=3)
    model = gnn_entry("graphsage").build(v, GNNShape(5, 4, frozen=2))
    widths = [(layer.in_dim, layer.out_dim) for layer in model.layers]
    assert widths == [(5, 7), (7, 7), (7, 4)] and model.layers[0].frozen == 2


def test_kge_scores() -> None:
    h, r, t = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0]]), torch.tensor([[1.0, 0.0]])
    transe, distmult = kge_entry("transe"), kge_entry("distmult")
    assert transe.score(h, r, t, TransEModel(norm=1)).item() == pytest.approx(-(0.5 + 1.0))
    assert transe.score(h, r, t, TransEModel(norm=2)).item() == pytest.approx(-np.hypot(0.5, 1.0))
    assert distmult.score(h, r, t, DistMultModel()).item() == pytest.approx(0.5)
    ents = torch.randn(7, 2, generator=torch.Generator().manual_seed(1))
    for entry, m in ((transe, TransEModel()), (distmult, DistMultModel())):
        tails, heads = entry.tails(h, r, ents, m), entry.heads(r, t, ents, m)
        for e in range(7):
            assert tails[0, e].item() == pytest.approx(entry.score(h, r, ents[e : e + 1], m).item(), abs=1e-5)
            assert heads[0, e].item() == pytest.approx(entry.score(ents[e : e + 1], r, t, m).item(), abs=1e-5)
