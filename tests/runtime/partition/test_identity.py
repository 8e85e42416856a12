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


NAMES = [f"n{i}" for i in range(299)] + ["nœud-é"]  # ids beyond ASCII too
SAME_IDS = {  # one graph's ids as two loaders (or a loader's two versions) may store them
    "int64 and int32": (np.arange(300, dtype=np.int64) * 7, np.arange(300, dtype=np.int32) * 7),
    "little- and big-endian": (np.arange(300, dtype="<i8"), np.arange(300, dtype=">i8")),
    "<U6 and <U12": (np.array(NAMES), np.array(NAMES, dtype="<U12")),
}


def with_ids(ids: np.ndarray | None) -> Any:
    return dataclasses.replace(BASE, node_ids=ids)


@pytest.mark.parametrize("what", sorted(SAME_IDS))
def test_the_same_ids_stored_with_another_dtype_are_the_same_graph(what: str) -> None:
    """The digest hashed the array's dtype and bytes: the same ids stored as <U6 and <U12, or int32 and
    int64, were another graph, and infer, predict and export refused its partition."""
    a, b = (with_ids(ids) for ids in SAME_IDS[what])
    assert identity.graph_identity(a, a.num_edges) == identity.graph_identity(b, b.num_edges)


def test_ids_of_other_values_or_kinds_are_still_another_graph() -> None:
    digests = {
        identity.graph_identity(g, g.num_edges)["digest"]
        for g in (
            with_ids(None),
            with_ids(np.arange(300)),
            with_ids(np.arange(300) + 1),
            with_ids(np.array([str(i) for i in range(300)])),  # "0".."299": strings, not the integers
            with_ids(np.array(NAMES)),
            with_ids(np.array(["n1n", "2"] + NAMES[2:])),  # the same characters split elsewhere
            with_ids(np.array(["n1", "n2"] + NAMES[2:])),
        )
    }
    assert len(digests) == 7


# digests the first code wrote (it hashed the id array's dtype and bytes): partitions and checkpoints
# carry them, so the legacy form must give them again, bit for bit
LEGACY = {
    "none": (None, "5e059a08a0481da9187520a5b62f1f7748e5c30c78448b5cef81b11c6fffe1a0"),
    "strings": (
        np.array([f"n{i}" for i in range(300)]),
        "4fb5314bcd18432848c7642ea3dca9fdb1725d8c500978177599aaae18b28380",
    ),
    "int32": (
        np.arange(300, dtype=np.int32) * 7,
        "84e591eda021390ad47d9141fc77532d9ded42911ccfd33c683bd1f4991704a7",
    ),
}


@pytest.mark.parametrize("what", sorted(LEGACY))
def test_the_legacy_form_is_the_first_codes_digest(what: str) -> None:
    ids, written = LEGACY[what]
    g = with_ids(ids)
    normalised, legacy = identity.forms(
        g.num_nodes, g.num_edges, {k: getattr(g, k) for k in identity.NAMES}, ids
    )
    assert legacy == written and identity.graph_identity(g, g.num_edges)["digest"] == normalised
    # ids as loaders store them (none, int64, strings at their narrowest): the two forms are one digest
    assert (normalised == legacy) is (what != "int32")


def test_a_digest_that_differs_is_matched_on_the_partitions_forms_legacy_last() -> None:
    new = identity.graph_identity(BASE, BASE.num_edges)
    old = {**new, "digest": "a" * 64}
    asked: list[str] = []

    def forms() -> Any:
        for form in (new["digest"], "a" * 64):
            asked.append(form)
            yield form

    assert not identity.mismatch(new, new, forms) and asked == []  # equal: nothing computed
    assert not identity.mismatch(new, old, forms) and asked == [new["digest"]]  # no legacy form made
    assert not identity.mismatch(old, new, forms) and asked[1:] == [new["digest"], "a" * 64]
    assert identity.mismatch({**new, "digest": "b" * 64}, new, forms)
    assert identity.mismatch({**new, "digest": "b" * 64}, new)  # no forms to ask: the digests decide


@pytest.mark.parametrize("what", sorted(SAME_IDS))
def test_a_partition_of_the_same_ids_in_another_dtype_reads_a_checkpoint_of_the_first(
    tmp_path: Path, what: str
) -> None:
    """Two partitions of one graph, its ids stored differently (two loaders): export, infer and predict
    (outputs.same_graph) took one for another graph's, refusing the checkpoint trained on the other."""
    from graphtrain.runtime.outputs import same_graph
    from graphtrain.runtime.partition import load_config

    ids_a, ids_b = SAME_IDS[what]
    written = [
        load_config(
            partition.write(with_ids(ids), partition.partition_graph(with_ids(ids), 2), tmp_path / str(i))
        )
        for i, ids in enumerate((ids_a, ids_b))
    ]
    record = {identity.KEY: written[0].data[identity.KEY]}  # what a checkpoint trained on the first records
    assert same_graph(tmp_path / "ckpt", record, written[1]) is written[1]


def test_the_forms_read_from_a_partition_are_its_graphs(tmp_path: Path) -> None:
    """outputs.partition_forms gives again, from the files, the digest the partitioner wrote, typed
    graphs and names included, and the legacy one of the ids as stored; another graph's is refused."""
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.outputs import partition_forms, same_graph
    from graphtrain.runtime.partition import load_config
    from tests.runtime.partition.test_typebalance import typed_planted

    typed = typed_planted(100)
    typed = dataclasses.replace(typed, node_ids=np.array([f"t{i}" for i in range(typed.num_nodes)]))
    for i, g in enumerate(
        (with_ids(np.array(NAMES)), dataclasses.replace(BASE, **CHANGES["class names"]), typed)
    ):
        cfg = load_config(partition.write(g, partition.partition_graph(g, 2), tmp_path / str(i)))
        normalised, legacy = partition_forms(cfg)
        names = {k: getattr(g, k) for k in identity.NAMES}
        assert [normalised, legacy] == list(identity.forms(g.num_nodes, g.num_edges, names, g.node_ids))
        assert normalised == cfg.data[identity.KEY]["digest"]
        old = {identity.KEY: {**cfg.data[identity.KEY], "digest": legacy}}  # a checkpoint written before
        assert same_graph(tmp_path / "ckpt", old, cfg) is cfg
        other = {identity.KEY: {**cfg.data[identity.KEY], "digest": "c" * 64}}
        with pytest.raises(GraphtrainError, match="but checkpoint ckpt was trained on graph cccccccccccc"):
            same_graph(tmp_path / "ckpt", other, cfg)
