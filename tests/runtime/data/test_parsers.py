"""Dataset parsers on small files in the upstream formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime.data import gene, metis_graph, pykeen_kg, wordnet
from graphtrain.runtime.errors import DataError
from tests.runtime.data.fixtures_formats import (
    write_go_sqlite,
    write_org_sqlite,
    write_pykeen_wheel,
    write_wordnet,
)


def test_wordnet(tmp_path: Path) -> None:
    write_wordnet(tmp_path)
    out = wordnet.parse(tmp_path, min_df=2)
    assert len(out["label"]) == 6
    assert out["label"].tolist() == [3, 3, 5, 5, 31, 0]
    # 8 pointers, all distinct; the satellite target "s" resolves to the adjective synset.
    assert len(out["src"]) == 8
    assert sorted(out["relations"]) == ["&", "+", "@", "~"]
    assert out["node_ids"].tolist()[:2] == [100000001, 100000002]
    assert out["node_ids"][5] == 300000020
    # Words in >= 2 glosses: a, thing, you, see, think.
    assert out["vocab"] == ["a", "see", "thing", "think", "you"]
    assert out["feat"].shape == (6, 5) and out["feat"].dtype == np.float32


def test_wordnet_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="missing WordNet data file"):
        wordnet.parse(tmp_path)
    write_wordnet(tmp_path)
    (tmp_path / "data.adv").write_text("00000030 02 r zz\n")
    with pytest.raises(DataError, match="data.adv:1: not a wndb synset line"):
        wordnet.parse(tmp_path)


def test_gene_pubmed(tmp_path: Path) -> None:
    write_org_sqlite(tmp_path / "org.sqlite")
    out = gene.parse_gene_pubmed(tmp_path / "org.sqlite")
    assert out["node_ids"].tolist() == [1, 672, 7157, 100, 200, 300]  # genes then papers, sorted
    edges = sorted(
        zip(out["node_ids"][out["src"]].tolist(), out["node_ids"][out["dst"]].tolist(), strict=True)
    )
    assert edges == [(1, 300), (672, 200), (7157, 100), (7157, 200)]
    assert out["node_type"].tolist() == [0, 0, 0, 1, 1, 1]


def test_gene_kg_leaves_out_kegg_and_nulls(tmp_path: Path) -> None:
    write_org_sqlite(tmp_path / "org.sqlite")
    write_go_sqlite(tmp_path / "go.sqlite")
    out = gene.parse_gene_kg(tmp_path / "org.sqlite", tmp_path / "go.sqlite")
    assert "kegg" not in out["relations"]
    assert not any("04115" in e for e in out["entities"])
    assert "None" not in out["entities"]
    names = out["relations"]
    counts = dict(zip(names, np.bincount(out["triples"][:, 1], minlength=len(names)).tolist(), strict=True))
    assert counts["cited_in"] == 4 and counts["go_bp"] == 2 and counts["pfam"] == 1 and counts["omim"] == 1
    assert counts["go_isa"] == 1 and counts["go_part_of"] == 1


def test_gene_bad_database(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        gene.parse_gene_pubmed(tmp_path / "missing.sqlite")
    (tmp_path / "bad.sqlite").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(DataError, match="not an org.Hs.eg.db"):
        gene.parse_gene_pubmed(tmp_path / "bad.sqlite")


def test_pykeen_wheel(tmp_path: Path) -> None:
    write_pykeen_wheel(tmp_path / "p.whl")
    out = pykeen_kg.parse(tmp_path / "p.whl", "nations")
    assert out["entities"] == ["china", "uk", "usa"] and out["relations"] == ["ally", "trade"]
    assert out["train"].tolist() == [[2, 0, 1], [1, 0, 2], [0, 1, 2]]
    with pytest.raises(DataError, match="no umls dataset"):
        pykeen_kg.parse(tmp_path / "p.whl", "umls")


def test_metis_graph(tmp_path: Path) -> None:
    path = tmp_path / "g.graph"
    path.write_text("% comment\n4 4\n2 3\n1 3 4\n1 2\n2\n")
    out = metis_graph.parse(path)
    assert out["num_nodes"] == 4
    assert sorted(zip(out["src"].tolist(), out["dst"].tolist(), strict=True)) == [
        (0, 1),
        (0, 2),
        (1, 2),
        (1, 3),
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("3 2 1\n2\n1\n\n", "weighted"),
        ("3 5\n2\n1 3\n2\n", "header says 5 edges"),
        ("4 2\n2\n1\n", "4 vertices"),
        ("2 1\n3\n1\n", "outside"),
    ],
)
def test_bad_metis_graph(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "g.graph"
    path.write_text(text)
    with pytest.raises(DataError, match=needle):
        metis_graph.parse(path)
