"""`graphtrain inspect` (item 10): directed vs undirected wording from the data, the partitioning
strategy and "halo" in words, and the graph a partition holds: features, classes and their names, mask
counts, isolated nodes, degree statistics, edge types and their names, KG splits, bytes on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import partition
from graphtrain.runtime.data.graph import Graph, KnowledgeGraph, random_masks
from graphtrain.runtime.data.summary import directed_share
from graphtrain.runtime.partition.summary import degree_stats, summarise
from graphtrain.runtime.report import partition_table, strategy_words
from tests.runtime.outputs.test_export import ok

SRC = np.array([0, 1, 2, 3, 3], dtype=np.int64)
DST = np.array([1, 2, 3, 0, 3], dtype=np.int64)  # a directed ring and a self-loop; node 4 alone


def ring(symmetric: bool) -> Graph:
    g = Graph.from_edges(
        "ring",
        5,
        SRC,
        DST,
        etype=np.array([0, 0, 1, 1, 1]),
        feat=np.ones((5, 3), dtype=np.float32),
        label=np.array([0, 1, 1, 0, 1]),
        masks=random_masks(5, 0.6, 0.2, 0),
        class_names=np.array(["cat", "dog"]),
        relation_names=np.array(["follows", "blocks"]),
    )
    return g.with_reverse_edges() if symmetric else g


def inspect(graph: Graph, tmp_path: Path, parts: int = 2) -> str:
    cfg = partition.write(
        graph, partition.partition_graph(graph, parts, algorithm="random"), tmp_path / "part"
    )
    return " ".join(ok("inspect", str(cfg)).split())


def test_a_directed_edge_list_is_not_called_undirected(tmp_path: Path) -> None:
    text = inspect(ring(symmetric=False), tmp_path)
    assert "undirected edges" not in text
    assert "node pairs joined by an edge (either direction)" in text
    assert "directed: 80.0 % of edges have no reverse edge" in text


def test_a_symmetric_edge_list_is_undirected(tmp_path: Path) -> None:
    text = inspect(ring(symmetric=True), tmp_path)
    assert "undirected edges" in text and "undirected: every edge is stored both ways" in text


def test_inspect_shows_what_the_graph_holds(tmp_path: Path) -> None:
    text = inspect(ring(symmetric=False), tmp_path)
    for fact in (
        "nodes 5, edges 5",
        "degree (in + out) min 0, mean 2.00, median 2, max 4; isolated nodes 1",
        "features: 3 dims",
        "classes: 2 (cat, dog), 5 labelled nodes",
        "masks: train 3, val 1, test 1",
        "edge types: blocks 3, follows 2",
        "on disk:",
        "halo: nodes of other partitions with an edge to this partition's nodes",
        "strategy random: nodes dealt to partitions by a seeded shuffle",
    ):
        assert fact in text, (fact, text)


def test_inspect_shows_a_knowledge_graphs_splits(tmp_path: Path) -> None:
    t = np.array([[0, 0, 1], [1, 1, 2], [2, 0, 0], [0, 1, 2]], dtype=np.int64)
    kg = KnowledgeGraph("kg", 3, 2, t[:2], t[2:3], t[3:], np.array(["a", "b", "c"]), np.array(["r", "s"]))
    text = inspect(kg.to_graph(), tmp_path, parts=1)
    assert "knowledge graph triples: train 2, valid 1, test 1" in text
    assert "edge types: r 1, s 1" in text


def test_inspect_names_a_knowledge_graphs_reverse_types(tmp_path: Path) -> None:
    """With graph.typed and reverseEdges, edge type r's reverse is rev_r (README), not its number."""
    from graphtrain.runtime.data import typed

    t = np.array([[0, 0, 1], [1, 1, 2], [2, 0, 0], [0, 1, 2]], dtype=np.int64)
    kg = KnowledgeGraph("kg", 3, 2, t[:2], t[2:3], t[3:], np.array(["a", "b", "c"]), np.array(["r", "s"]))
    text = inspect(typed.single_type_kg(kg.to_graph()).with_reverse_edges(), tmp_path, parts=1)
    assert "edge types: r 1, s 1, rev_r 1, rev_s 1" in text, text


@pytest.mark.parametrize(
    ("strategy", "words"),
    [
        (
            "metis(degree)+balance",
            "METIS' multi-constraint result was out of bounds, so METIS cut balancing degree alone",
        ),
        ("metis-multi", "under all balance constraints at once"),
        ("metis", "under the one balance constraint"),
        ("single", "nothing to cut"),
        ("fennel+types", "each node type's excess left its over-full partitions"),
    ],
)
def test_strategies_are_explained(strategy: str, words: str) -> None:
    assert words in strategy_words(strategy)


def test_counting_is_pure() -> None:
    assert directed_share(SRC, DST, 5) == pytest.approx(0.8)
    both = np.concatenate([SRC, DST]), np.concatenate([DST, SRC])
    assert directed_share(*both, 5) == 0.0
    assert degree_stats(np.array([0, 2, 4, 10])) == {"min": 0.0, "mean": 4.0, "median": 3.0, "max": 10.0}


def test_summary_counts_match_the_graph(tmp_path: Path) -> None:
    from tests.conftest import planted_graph

    g = planted_graph(n=500, k=3)
    cfg = partition.load_config(partition.write(g, partition.partition_graph(g, 3), tmp_path / "p"))
    s = summarise(cfg)
    deg = g.degree()
    assert s.isolated == int((deg == 0).sum()) and s.degree["max"] == deg.max()
    assert s.feat_sparse and s.feat_dims == 64
    assert s.masks == {k: int(v.sum()) for k, v in g.masks.items()}
    assert sum(s.edge_types.values()) == g.num_edges
    assert s.bytes_total > sum(s.bytes_per_part) > 0


def test_directed_share_is_the_definition_with_duplicates_and_self_loops() -> None:
    """The share counts each edge (duplicates too) whose reverse is absent, on random small graphs."""
    rng = np.random.default_rng(7)
    for _ in range(100):
        n, e = int(rng.integers(1, 12)), int(rng.integers(1, 40))
        src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
        pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
        want = sum((d, s) not in pairs for s, d in zip(src.tolist(), dst.tolist(), strict=True)) / e
        assert directed_share(src, dst, n) == pytest.approx(want)


@pytest.mark.parametrize("symmetric", [False, True])
def test_the_partition_report_words_the_cut_as_inspect_does(tmp_path: Path, symmetric: bool) -> None:
    """`graphtrain partition` prints its table from the config alone (no summary read back): the
    partitioner counts the edge list's directedness, so both commands name the cut's unit alike."""
    graph = ring(symmetric)
    path = partition.write(graph, partition.partition_graph(graph, 2, algorithm="random"), tmp_path / "part")
    data = partition.load_config(path).data
    assert data["stats"]["directed"] == (0.0 if symmetric else 0.8)
    words = "undirected edges" if symmetric else "node pairs joined by an edge (either direction)"
    assert words in str(partition_table(data).caption)
    assert words in inspect(graph, tmp_path / "again")


def test_directedness_is_counted_once_per_edge_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data check and the partition's statistics both ask; the edges are sorted for it once, and
    again only once the graph's edge arrays are replaced (reverse edges added)."""
    from graphtrain.runtime.data import summary

    calls: list[int] = []
    counted = summary.directed_share
    monkeypatch.setattr(summary, "directed_share", lambda *a: calls.append(1) or counted(*a))
    g = ring(symmetric=False)
    assert summary.summarise(g).directed == pytest.approx(0.8)  # the data check's count
    result = partition.partition_graph(g, 2, "metis", ["nodes"], 0.5, 0)
    assert result.stats.directed == pytest.approx(0.8) and len(calls) == 1
    g.indptr, g.indices = ring(symmetric=True).indptr.copy(), ring(symmetric=True).indices.copy()
    assert summary.directedness(g) == 0.0 and len(calls) == 2
