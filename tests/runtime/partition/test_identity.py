"""partition/identity.py: the graph identity a partition carries, the same from the in-memory and the
streaming partitioner, and different for each thing that makes another graph of the same shape."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphtrain.runtime import partition
from graphtrain.runtime.partition import identity, streaming
from tests.conftest import planted_graph
from tests.runtime.partition.test_fennel import node_only, save_edges

BASE = planted_graph(n=300, seed=5)
CHANGES: dict[str, dict[str, Any]] = {
    "node ids": {"node_ids": np.arange(300, dtype=np.int64) + 1},
    "string node ids": {"node_ids": np.array([f"n{i}" for i in range(300)])},
    "class names": {"class_names": np.array(["a", "b", "c", "d"])},
    "relation names": {"relation_names": np.array(["cites"])},
}


def test_the_same_graph_has_one_digest() -> None:
    again = planted_graph(n=300, seed=5)
    assert identity.graph_identity(BASE, BASE.num_edges) == identity.graph_identity(again, again.num_edges)


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_each_change_of_ids_or_names_is_another_graph(what: str) -> None:
    other = dataclasses.replace(BASE, **CHANGES[what])
    a, b = identity.graph_identity(BASE, BASE.num_edges), identity.graph_identity(other, other.num_edges)
    assert identity.mismatch(a, b) and a["num_nodes"] == b["num_nodes"]


def test_counts_are_part_of_it_and_an_absent_identity_is_no_mismatch() -> None:
    a = identity.graph_identity(BASE, BASE.num_edges)
    assert identity.mismatch(a, identity.graph_identity(BASE, BASE.num_edges + 1))
    assert not identity.mismatch(a, None) and not identity.mismatch(None, a)
    assert identity.described(a) == f"graph {a['digest'][:12]} (300 nodes, {BASE.num_edges:,} edges)"
    assert identity.described(None) == "a graph of unknown identity"


def test_streamed_and_in_memory_partitions_carry_the_same_identity(tmp_path: Path) -> None:
    g = dataclasses.replace(BASE, node_ids=np.arange(300, dtype=np.int64) * 7)
    streamed, _ = streaming.partition_stream(
        node_only(g),
        save_edges(g, tmp_path / "e"),
        2,
        tmp_path / "s",
        balance=["nodes"],
        max_imbalance=0.1,
        seed=1,
    )
    in_memory = partition.write(g, partition.partition_graph(g, 2), tmp_path / "m", made_for='{"k": 1}')
    a, b = json.loads(Path(streamed).read_text()), json.loads(in_memory.read_text())
    assert a[identity.KEY] == b[identity.KEY] == identity.graph_identity(g, g.num_edges)
    assert b[identity.MADE_FOR] == '{"k": 1}' and identity.MADE_FOR not in a  # made_for: only when given


GOOD = identity.graph_identity(BASE, BASE.num_edges)
MALFORMED: dict[str, tuple[dict[str, Any], str]] = {  # a hand edit of a config or checkpoint.json
    "identity not a map": ({identity.KEY: "abc"}, "graph_identity is not a map"),
    "digest a number": ({identity.KEY: {"digest": 5}}, "graph_identity.digest is not a sha256"),
    "digest gone": ({identity.KEY: {}}, "graph_identity.digest is not a sha256"),
    "digest with a line break": ({identity.KEY: {"digest": "ab\nTraceback"}}, "digest is not a sha256"),
    "digest of a lone surrogate": ({identity.KEY: {"digest": "\udcff" * 64}}, "digest is not a sha256"),
    "count a string": ({identity.KEY: {**GOOD, "num_nodes": "x"}}, "graph_identity.num_nodes is not a count"),
    "count negative": ({identity.KEY: {**GOOD, "num_edges": -1}}, "graph_identity.num_edges is not a count"),
    "count a bool": ({identity.KEY: {**GOOD, "num_edges": True}}, "graph_identity.num_edges is not a count"),
    "made_for a number": ({identity.MADE_FOR: 5}, "made_for is not a string"),
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_identity_or_made_for_is_named(what: str) -> None:
    """Taken without a word before (a digest that is no string was no mismatch, and no warning either),
    or a refusal of two lines (a digest with a line break)."""
    config, said = MALFORMED[what]
    assert said in (identity.config_problem(config) or "")


def test_a_well_formed_or_absent_identity_is_no_problem() -> None:
    assert identity.config_problem({identity.KEY: GOOD, identity.MADE_FOR: "{}"}) is None
    assert identity.config_problem({}) is None  # made before identities: warned about, not refused
