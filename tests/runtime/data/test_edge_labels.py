"""Labelled edges (graph.edges[].label, task edgeClassification): read from the user's edge files as
class names or integers, split by graph.split, kept by the partition in original ids, and every bad
input or missing requirement answered in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graphtrain.contract.spec import GraphSource
from graphtrain.runtime.cli import app
from graphtrain.runtime.data import datasets
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.partition.edge_targets import load_edge_targets
from graphtrain.runtime.partition.format import load_config
from tests.runtime.data.test_typed_files import graph_section, write_data, write_spec

runner = CliRunner()
# writes.csv with a role per authorship; bob's is empty (unlabelled)
WRITES = "author,paper,weight,role\nann,p1,0.5,first\nbob,p2,1.0,\nann,p3,2.0,last\n1,1,1.5,first\n"


def labelled(root: Path, writes: str = WRITES) -> dict:
    write_data(root)
    (root / "data" / "writes.csv").write_text(writes)
    graph = graph_section()
    graph["edges"][0]["label"] = "role"
    graph["split"] = {"train": 0.34, "val": 0.33, "test": 0.33, "seed": 0}
    return graph


def spec(root: Path, graph: dict) -> Path:
    return write_spec(root, graph, "edgeClassification")


def one_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    message = result.output.rstrip("\n")
    assert message and "\n" not in message and "Traceback" not in message, result.output
    return message


def test_labelled_edges_are_read_split_and_kept_through_reverse_edges(tmp_path: Path) -> None:
    graph = labelled(tmp_path)
    graph["reverseEdges"] = True
    g = datasets.load_source(GraphSource.model_validate(graph), base_dir=tmp_path)
    assert g.edge_class_names.tolist() == ["first", "last"] and g.edge_classes == 2
    rows = np.concatenate([g.edge_targets[s] for s in ("train", "valid", "test")])
    assert sorted(len(g.edge_targets[s]) for s in ("train", "valid", "test")) == [1, 1, 1]  # bob's: none
    named = {(str(g.node_ids[s]), int(t), str(g.node_ids[d]), int(c)) for s, t, d, c in rows.tolist()}
    assert named == {
        ("author:ann", 0, "paper:p1", 0),
        ("author:ann", 0, "paper:p3", 1),
        ("author:1", 0, "paper:1", 0),
    }
    src, dst = g.edges()
    edges = set(zip(src.tolist(), g.etype.tolist(), dst.tolist(), strict=True))
    assert all((s, t, d) in edges for s, t, d, _ in rows.tolist())  # every labelled edge is an edge


def test_integer_edge_labels_are_class_ids(tmp_path: Path) -> None:
    graph = labelled(
        tmp_path, "author,paper,weight,role\nann,p1,0.5,0\nbob,p2,1.0,2\nann,p3,2.0,2\n1,1,1.5,0\n"
    )
    g = datasets.load_source(GraphSource.model_validate(graph), base_dir=tmp_path)
    assert g.edge_class_names is None and g.edge_classes == 3
    assert sorted(np.concatenate([t[:, 3] for t in g.edge_targets.values()]).tolist()) == [0, 0, 2, 2]


def test_numeric_edge_labels_are_kept_as_numbers_beside_their_rows(tmp_path: Path) -> None:
    """Numbers (task edgeRegression) travel beside the rows, in the rows' order, through the partition."""
    graph = labelled(tmp_path, "author,paper,weight,role\nann,p1,0.5,0.25\nbob,p2,1.0,-2\nann,p3,2.0,7.5\n")
    g = datasets.load_source(GraphSource.model_validate(graph), base_dir=tmp_path)
    by_end = {}
    for split, rows in g.edge_targets.items():
        assert g.edge_values[split].dtype == np.float32
        for (s, _, d, _), v in zip(rows.tolist(), g.edge_values[split].tolist(), strict=True):
            by_end[(str(g.node_ids[s]), str(g.node_ids[d]))] = v
    assert by_end == {
        ("author:ann", "paper:p1"): 0.25,
        ("author:bob", "paper:p2"): -2.0,
        ("author:ann", "paper:p3"): 7.5,
    }
    out = tmp_path / "partition"
    result = runner.invoke(app, ["partition", "--spec", str(spec(tmp_path, graph)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    found = load_edge_targets(load_config(next(out.glob("*.json"))))
    for split, values in g.edge_values.items():
        np.testing.assert_array_equal(found.values[split], values)


def test_the_partition_keeps_the_labelled_edges_in_original_ids(tmp_path: Path) -> None:
    graph = labelled(tmp_path)
    g = datasets.load_source(GraphSource.model_validate(graph), base_dir=tmp_path)
    out = tmp_path / "partition"
    result = runner.invoke(app, ["partition", "--spec", str(spec(tmp_path, graph)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    found = load_edge_targets(load_config(next(out.glob("*.json"))))
    assert found.num_classes == 2 and found.class_names.tolist() == ["first", "last"]
    assert found.values == {}  # class names are not numbers
    for split, rows in g.edge_targets.items():
        np.testing.assert_array_equal(found.rows[split], rows)


def test_bad_edge_labels_are_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    graph = labelled(tmp_path)
    graph["edges"][0]["label"] = "part"
    out = tmp_path / "partition"
    message = one_line(["partition", "--spec", str(spec(tmp_path, graph)), "--out", str(out)])
    assert "graph.edges[0].label: no column 'part'" in message, message
    graph = labelled(tmp_path, "author,paper,weight,role\nann,p1,0.5,0\nbob,p2,1.0,-3\n")
    message = one_line(["partition", "--spec", str(spec(tmp_path, graph)), "--out", str(out)])
    assert "negative" in message, message
    assert not out.exists()


def test_edge_tasks_need_labelled_edges_of_two_classes_or_numbers(tmp_path: Path) -> None:
    write_data(tmp_path)
    message = one_line(["validate", str(spec(tmp_path, graph_section()))])
    assert "graph.edges" in message and "has none" in message, message
    graph = labelled(tmp_path, "author,paper,weight,role\nann,p1,0.5,x\nbob,p2,1.0,x\nann,p3,2.0,x\n")
    message = one_line(["validate", str(spec(tmp_path, graph))])
    assert "1 class" in message, message
    message = one_line(["validate", str(write_spec(tmp_path, graph, "edgeRegression"))])
    assert "edgeRegression predicts numbers" in message and "graph.edges" in message, message


def test_odd_labels_are_names_and_minus_one_is_unlabelled(tmp_path: Path) -> None:
    """Not ASCII digits, two minus signs, past int64: class names, never a traceback (one of a
    helper's findings); -1 among integers: no label, as an empty cell."""
    odd = "author,paper,weight,role\nann,p1,0.5,²\nbob,p2,1.0,--1\nann,p3,2.0,99999999999999999999\n"
    g = datasets.load_source(GraphSource.model_validate(labelled(tmp_path, odd)), base_dir=tmp_path)
    assert g.edge_class_names.tolist() == ["--1", "99999999999999999999", "²"]
    ints = "author,paper,weight,role\nann,p1,0.5,0\nbob,p2,1.0,-1\nann,p3,2.0,1\n1,1,1.5,1\n"
    g = datasets.load_source(GraphSource.model_validate(labelled(tmp_path, ints)), base_dir=tmp_path)
    assert sum(len(t) for t in g.edge_targets.values()) == 3 and g.edge_classes == 2


def test_sparse_integer_edge_classes_are_refused_before_a_model_is_built(tmp_path: Path) -> None:
    """A label of 10**12 among 0 and 1 would make a classifier of 10**12 outputs (128 TB)."""
    graph = labelled(
        tmp_path, "author,paper,weight,role\nann,p1,0.5,0\nbob,p2,1.0,1\nann,p3,2.0,1000000000000\n"
    )
    message = one_line(["validate", str(spec(tmp_path, graph))])
    assert "largest edge class id is 1,000,000,000,000" in message and "graph.edges" in message, message


def test_a_changed_labelled_edge_file_is_refused_when_read(tmp_path: Path) -> None:
    graph = labelled(tmp_path)
    out = tmp_path / "partition"
    result = runner.invoke(app, ["partition", "--spec", str(spec(tmp_path, graph)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    path = out / "edges" / "train.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="edges/train.npy"):
        load_edge_targets(load_config(next(out.glob("*.json"))), verify=True)
