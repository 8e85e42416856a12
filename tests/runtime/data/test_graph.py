"""Graph and KnowledgeGraph consistency checks and construction."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graphtrain.runtime.data.graph import Graph, KnowledgeGraph, random_masks, random_triple_split
from graphtrain.runtime.errors import DataError


def test_from_edges_keeps_duplicates_and_row_order() -> None:
    g = Graph.from_edges("g", 4, [2, 0, 2, 0, 3], [1, 3, 0, 3, 3], etype=[5, 6, 7, 8, 9])
    assert g.indptr.tolist() == [0, 2, 2, 4, 5]
    assert g.indices.tolist() == [3, 3, 1, 0, 3]
    assert g.etype.tolist() == [6, 8, 5, 7, 9]
    src, dst = g.edges()
    assert src.tolist() == [0, 0, 2, 2, 3]
    assert g.degree().tolist() == [3, 1, 2, 4]  # out + in


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"num_nodes": 0, "src": [], "dst": []}, "empty graph"),
        ({"num_nodes": 3, "src": [0, -1], "dst": [1, 2]}, "source id -1"),
        ({"num_nodes": 3, "src": [0, 1], "dst": [1, 3]}, "destination id 3"),
        ({"num_nodes": 3, "src": [0, 1], "dst": [1]}, "equal length"),
        ({"num_nodes": 3, "src": [0], "dst": [1], "feat": np.zeros((2, 4))}, "feat has 2 rows"),
        ({"num_nodes": 3, "src": [0], "dst": [1], "label": np.zeros(4, np.int64)}, "label has shape"),
        ({"num_nodes": 3, "src": [0], "dst": [1], "masks": {"train": np.ones(3)}}, "train mask"),
        ({"num_nodes": 3, "src": [0], "dst": [1], "masks": {"dev": np.ones(3, bool)}}, "unknown mask"),
    ],
)
def test_inconsistent_graphs_are_refused(kwargs: dict, needle: str) -> None:
    with pytest.raises(DataError, match=needle):
        Graph.from_edges("g", kwargs.pop("num_nodes"), kwargs.pop("src"), kwargs.pop("dst"), **kwargs)


def test_sparse_features_are_accepted() -> None:
    g = Graph.from_edges("g", 3, [0], [1], feat=sp.random(3, 5, density=0.5, format="csr"))
    assert g.feat.shape == (3, 5)


def test_reverse_edges() -> None:
    g = Graph.from_edges("g", 3, [0, 1, 2], [1, 1, 0], etype=[4, 5, 6])
    r = g.with_reverse_edges()
    pairs = sorted(zip(*(a.tolist() for a in r.edges()), r.etype.tolist(), strict=True))
    assert pairs == [(0, 1, 4), (0, 2, 6), (1, 0, 4), (1, 1, 5), (2, 0, 6)]  # the self-loop is not doubled


def test_random_masks_are_seeded_and_disjoint() -> None:
    a = random_masks(1000, 0.6, 0.2, seed=3)
    b = random_masks(1000, 0.6, 0.2, seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    total = a["train"].astype(int) + a["val"] + a["test"]
    assert np.all(total == 1) and a["train"].sum() == 600 and a["val"].sum() == 200
    assert not np.array_equal(a["train"], random_masks(1000, 0.6, 0.2, seed=4)["train"])


def test_knowledge_graph_checks_ids_and_converts() -> None:
    t = np.array([[0, 0, 1], [1, 1, 2]], dtype=np.int64)
    kg = KnowledgeGraph("kg", 3, 2, t, t[:0], t[:1])
    g = kg.to_graph()
    assert g.num_edges == 2 and g.etype.tolist() == [0, 1]
    with pytest.raises(DataError, match="entity id"):
        KnowledgeGraph("kg", 2, 2, t, t[:0], t[:0])
    with pytest.raises(DataError, match="relation id"):
        KnowledgeGraph("kg", 3, 1, t, t[:0], t[:0])
    with pytest.raises(DataError, match=r"\(n, 3\)"):
        KnowledgeGraph("kg", 3, 2, t[:, :2].copy(), t[:0], t[:0])


def test_triple_split_partitions_all_triples() -> None:
    t = np.arange(300, dtype=np.int64).reshape(100, 3)
    tr, va, te = random_triple_split(t, 0.9, 0.05, seed=0)
    assert len(tr) == 90 and len(va) == 5 and len(te) == 5
    assert sorted(np.concatenate([tr, va, te])[:, 0].tolist()) == t[:, 0].tolist()
