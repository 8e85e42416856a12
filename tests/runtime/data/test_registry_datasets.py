"""Real downloads from the package registries (cached under the data directory; run in CI).

These are the datasets' own counts as documented in ../shared/research/datasets.md, so a parser that
drifts or a mirror that serves something else fails here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import partition
from graphtrain.runtime.data import datasets

pytestmark = pytest.mark.network


def test_wordnet() -> None:
    g = datasets.load("wordnet")
    assert (g.num_nodes, g.num_edges) == (117_659, 364_552)
    assert g.feat.shape == (117_659, 18_130) and g.feat.nnz == 1_267_140
    assert g.num_classes == 45 and set(np.unique(g.label)) == set(range(45))
    assert {k: int(m.sum()) for k, m in g.masks.items()} == {"train": 70_595, "val": 23_532, "test": 23_532}
    assert int(g.etype.max()) + 1 == 26


@pytest.mark.parametrize(
    ("name", "entities", "relations", "sizes"),
    [
        ("nations", 14, 55, (1592, 199, 201)),
        ("kinships", 104, 25, (8544, 1068, 1074)),
        ("umls", 135, 46, (5216, 652, 661)),
    ],
)
def test_pykeen_kgs(name: str, entities: int, relations: int, sizes: tuple[int, int, int]) -> None:
    kg = datasets.load(name)
    assert (kg.num_entities, kg.num_relations) == (entities, relations)
    assert (len(kg.train), len(kg.valid), len(kg.test)) == sizes


def test_metis_mesh() -> None:
    g = datasets.load("metis-4elt")
    assert (g.num_nodes, g.num_edges) == (7_434, 43_031)


def test_wordnet_partition_round_trip(tmp_path: Path) -> None:
    g = datasets.load("wordnet")
    result = partition.partition_graph(g, 2)
    assert max(result.stats.balance.values()) <= 1.05 + 1e-9
    assert result.stats.edge_cut_fraction < 0.05  # random: 0.50
    back = partition.reassemble(partition.load_config(partition.write(g, result, tmp_path / "wn")))
    assert np.array_equal(back.indptr, g.indptr) and np.array_equal(back.indices, g.indices)
    assert np.array_equal(back.etype, g.etype) and np.array_equal(back.node_ids, g.node_ids)
    assert (back.feat != g.feat).nnz == 0 and np.array_equal(back.label, g.label)
