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
    KGEModel,
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
    with pytest.raises(KeyError, match="transe, distmult, complex, rotate"):
        kge_entry("tucker")


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


def _kge_variant(kind: str) -> KGEModel:
    return ModelSpec(kind=kind, entityEmbedding="e", relationEmbedding="r").variant


def _as_complex(rows: torch.Tensor) -> torch.Tensor:
    d = rows.shape[-1] // 2
    return torch.complex(rows[..., :d].double(), rows[..., d:].double())


@pytest.mark.parametrize("kind", ["complex", "rotate"])
def test_complex_valued_scores_are_the_papers_formula_in_complex_arithmetic(kind: str) -> None:
    """ComplEx: Re(sum h r conj(t)); RotatE: -||h r/|r| - t||, both computed here with torch's complex
    numbers from rows laid out as [real parts, imaginary parts]; tails and heads score each entity as
    score() does, for one query and for a chunk of queries against its own entities (joint negatives)."""
    g = torch.Generator().manual_seed(3)
    entry = kge_entry(kind)
    m = _kge_variant(kind)
    h, r, t = (torch.randn(5, 8, generator=g) for _ in range(3))
    hc, rc, tc = _as_complex(h), _as_complex(r), _as_complex(t)
    if kind == "complex":
        want = (hc * rc * tc.conj()).real.sum(-1)
    else:
        want = -torch.linalg.vector_norm(hc * (rc / rc.abs()) - tc, dim=-1)
    np.testing.assert_allclose(entry.score(h, r, t, m).double(), want, rtol=1e-5, atol=1e-5)
    ents = torch.randn(6, 8, generator=g)
    tails, heads = entry.tails(h, r, ents, m), entry.heads(r, t, ents, m)
    assert tails.shape == heads.shape == (5, 6)
    for e in range(6):
        one = ents[e : e + 1].expand(5, 8)
        np.testing.assert_allclose(tails[:, e], entry.score(h, r, one, m), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(heads[:, e], entry.score(one, r, t, m), rtol=1e-4, atol=1e-4)
    chunks = torch.randn(5, 6, 8, generator=g)  # (chunk, entities, dim): batched as kge_math's joint scores
    batched = entry.tails(h.unsqueeze(1), r.unsqueeze(1), chunks, m)
    for c in range(5):
        np.testing.assert_allclose(
            batched[c, 0], entry.tails(h[c : c + 1], r[c : c + 1], chunks[c], m)[0], atol=1e-5
        )


def test_rotate_reads_a_relation_as_unit_rotations_and_complex_is_not_symmetric() -> None:
    """RotatE's score does not change when a relation row is scaled (its elements are read over their
    modulus); ComplEx, unlike DistMult, scores (t, r, h) differently from (h, r, t)."""
    g = torch.Generator().manual_seed(5)
    h, r, t = (torch.randn(4, 10, generator=g) for _ in range(3))
    rotate, complex_ = kge_entry("rotate"), kge_entry("complex")
    m_rot, m_cx = _kge_variant("rotate"), _kge_variant("complex")
    np.testing.assert_allclose(rotate.score(h, 3.0 * r, t, m_rot), rotate.score(h, r, t, m_rot), atol=1e-5)
    assert not torch.allclose(complex_.score(h, r, t, m_cx), complex_.score(t, r, h, m_cx), atol=1e-3)
    assert not (rotate.unit_rows or complex_.unit_rows)  # free rows, as PyKEEN's
    assert rotate.unit_relations and not complex_.unit_relations  # RotatE's relations: unit rotations
    # a zero relation element (a zeros init, a dynamic vocabulary's new key) scores as no rotation and
    # gives finite gradients: NaN ones would be refused by the shard servers
    zero_r = torch.zeros(4, 10, requires_grad=True)
    rotate.score(h, zero_r, t, m_rot).sum().backward()
    assert torch.isfinite(zero_r.grad).all()
    np.testing.assert_allclose(
        rotate.score(h, zero_r.detach(), t, m_rot), -torch.linalg.vector_norm(h - t, dim=-1), rtol=1e-5
    )
    assert kge_entry("transe").unit_rows and kge_entry("distmult").unit_rows
