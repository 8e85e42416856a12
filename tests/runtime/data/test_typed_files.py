"""A typed graph from the user's own node and edge files (graph.nodes, graph.edges): read as described,
ids scoped per node type, and every bad input answered in one line naming the file and the field, with
no partition half-written."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from graphtrain.contract.spec import GraphSource
from graphtrain.runtime.cli import app
from graphtrain.runtime.data import datasets

runner = CliRunner()

PAPERS = "pid,year,cites,topic\np1,2001,3,ml\np2,2005,1,db\np3,2010,0,ml\n1,2011,7,db\n"
AUTHORS = "aid\nann\nbob\n1\n"  # "1" is an author and (above) a paper: two nodes
WRITES = "author,paper,weight\nann,p1,0.5\nbob,p2,1.0\nann,p3,2.0\n1,1,1.5\n"
CITES = "src\tdst\np2\tp1\np3\tp1\np3\tp2\n"


def write_data(root: Path) -> None:
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "papers.csv").write_text(PAPERS)
    (root / "data" / "authors.csv").write_text(AUTHORS)
    (root / "data" / "writes.csv").write_text(WRITES)
    (root / "data" / "cites.tsv").write_text(CITES)


def graph_section() -> dict:
    return {
        "nodes": [
            {
                "type": "paper",
                "files": ["data/papers.csv"],
                "idColumn": "pid",
                "features": ["year", "cites"],
                "label": "topic",
            },
            {"type": "author", "files": ["data/authors.csv"], "idColumn": "aid"},
        ],
        "edges": [
            {
                "relation": ["author", "writes", "paper"],
                "files": ["data/writes.csv"],
                "sourceColumn": "author",
                "destinationColumn": "paper",
                "features": ["weight"],
            },
            {"relation": ["paper", "cites", "paper"], "files": ["data/cites.tsv"]},
        ],
        "split": {"train": 0.5, "val": 0.25, "test": 0.25, "seed": 0},
    }


def write_spec(root: Path, graph: dict, task: str = "nodeClassification") -> Path:
    doc = {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "typed"},
        "spec": {
            "graph": graph,
            "task": {"kind": task},
            "model": {"kind": "rgcn", "hiddenDim": 8},
            "training": {"fanouts": [2, 2]},
        },
    }
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_typed_files_are_read_with_ids_scoped_per_type(tmp_path: Path) -> None:
    write_data(tmp_path)
    g = datasets.load_source(GraphSource.model_validate(graph_section()), base_dir=tmp_path)
    assert g.typed and g.ntype_names.tolist() == ["paper", "author"]
    assert g.node_ids.tolist() == [
        "paper:p1",
        "paper:p2",
        "paper:p3",
        "paper:1",
        "author:ann",
        "author:bob",
        "author:1",
    ]
    assert g.canonical_etypes.tolist() == [["author", "writes", "paper"], ["paper", "cites", "paper"]]
    src, dst = g.edges()
    pairs = {
        (str(g.node_ids[s]), str(g.node_ids[d]), int(t)) for s, d, t in zip(src, dst, g.etype, strict=True)
    }
    assert ("author:1", "paper:1", 0) in pairs and ("paper:p3", "paper:p2", 1) in pairs
    assert g.feat.shape == (7, 2) and g.feat[4:].sum() == 0  # authors have no features: zero rows
    assert g.feature_blocks == {"paper": (0, 2)}
    assert g.class_names.tolist() == ["db", "ml"] and g.label[4:].tolist() == [-1, -1, -1]
    weights = {
        (str(g.node_ids[s]), str(g.node_ids[d])): w for s, d, w in zip(src, dst, g.efeat[:, 0], strict=True)
    }
    assert weights[("author:ann", "paper:p3")] == pytest.approx(2.0)
    assert weights[("paper:p2", "paper:p1")] == 0.0  # cites has no features: zero rows


def test_an_own_typed_graph_is_named_after_the_folder_of_its_files(tmp_path: Path) -> None:
    """Not after its first node file: messages about the whole graph read "papers's edges" before."""
    write_data(tmp_path)
    assert (
        datasets.load_source(GraphSource.model_validate(graph_section()), base_dir=tmp_path).name == "graph"
    )

    def named(folder: str) -> str:
        section = graph_section()
        for t in [*section["nodes"], *section["edges"]]:
            t["files"] = [f.replace("data/", folder) for f in t["files"]]
        return datasets._typed_name(GraphSource.model_validate(section))

    assert named("library/data/") == "library" and named("/srv/library/") == "library"
    assert named("") == "graph"


def test_types_of_different_feature_widths_get_a_block_each(tmp_path: Path) -> None:
    write_data(tmp_path)
    (tmp_path / "data" / "authors.csv").write_text("aid,h\nann,3\nbob,4\n1,5\n")
    graph = graph_section()
    graph["nodes"][1]["features"] = ["h"]
    g = datasets.load_source(GraphSource.model_validate(graph), base_dir=tmp_path)
    assert g.feature_blocks == {"paper": (0, 2), "author": (2, 1)}
    assert g.feat[4:, 2].tolist() == [3.0, 4.0, 5.0] and g.feat[4:, :2].sum() == 0


@dataclass(frozen=True)
class Bad:
    id: str
    change: Callable[[Path, dict], None]  # (root, graph section) -> edits files or the section
    needle: str


def _file(name: str, text: str) -> Callable[[Path, dict], None]:
    return lambda root, graph: (root / "data" / name).write_text(text)


def _set(path: tuple, value: object) -> Callable[[Path, dict], None]:
    def change(root: Path, graph: dict) -> None:
        node = graph
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


BAD = [
    Bad(
        "missing-node-file",
        _set(("nodes", 0, "files"), ["data/nope.csv"]),
        "spec.graph.nodes[0].files[0]: /",  # then the file's path, then "file not found"
    ),
    Bad(
        "missing-edge-file",
        _set(("edges", 1, "files"), ["data/gone.tsv"]),
        "spec.graph.edges[1].files[0]: /",
    ),
    Bad(
        "no-id-column",
        _set(("nodes", 1, "idColumn"), "author_id"),
        "spec.graph.nodes[1].idColumn: no column 'author_id'",
    ),
    Bad(
        "no-feature-column",
        _set(("nodes", 0, "features"), ["year", "pages"]),
        "spec.graph.nodes[0].features: no column 'pages'",
    ),
    Bad(
        "no-label-column",
        _set(("nodes", 0, "label"), "field"),
        "spec.graph.nodes[0].label: no column 'field'",
    ),
    Bad(
        "no-source-column",
        _set(("edges", 0, "sourceColumn"), "writer"),
        "spec.graph.edges[0].sourceColumn: no column 'writer'",
    ),
    Bad(
        "no-destination-column",
        _set(("edges", 1, "destinationColumn"), "to"),
        "spec.graph.edges[1].destinationColumn: no column 'to'",
    ),
    Bad(
        "id-absent-from-its-type",
        _file("writes.csv", "author,paper,weight\nann,p1,1\ncarl,p2,1\n"),
        "author 'carl' (line 3) is not a node of type author",
    ),
    Bad(
        "id-of-another-type",
        _file("cites.tsv", "src\tdst\nann\tp1\n"),
        "paper 'ann' (line 2) is not a node of type paper",
    ),
    Bad(
        "node-listed-twice",
        _file("authors.csv", "aid\nann\nbob\nann\n"),
        "node author 'ann' is listed twice (line 4)",
    ),
    Bad(
        "feature-not-a-number",
        _file("papers.csv", PAPERS.replace("2005", "soon")),
        "spec.graph.nodes[0].features 'year' holds string",
    ),
    Bad(
        "feature-empty",
        _file("papers.csv", PAPERS.replace("2005,1", "2005,")),
        "spec.graph.nodes[0].features 'cites' has no value on line 3 (an empty cell, or one that reads",
    ),
    Bad(  # pyarrow reads NA, NULL and nan as missing: the message must not say only "empty"
        "feature-na",
        _file("papers.csv", PAPERS.replace("2005,1", "2005,NA")),
        "spec.graph.nodes[0].features 'cites' has no value on line 3 (an empty cell, or one that reads",
    ),
    Bad(
        "feature-not-finite",
        _file("papers.csv", PAPERS.replace("2005", "inf")),
        "spec.graph.nodes[0].features 'year' is not finite on line 3",
    ),
    Bad(
        "edge-feature-not-a-number",
        _file("writes.csv", WRITES.replace("0.5", "heavy")),
        "spec.graph.edges[0].features 'weight' holds string",
    ),
    Bad(
        "empty-id",
        _file("authors.csv", "aid,x\nann,1\n,2\nbob,3\n1,4\n"),
        "spec.graph.nodes[1].idColumn 'aid' is empty on line 3",
    ),
    Bad("header-only", _file("authors.csv", "aid\n"), "spec.graph.nodes[1].files[0]: no rows"),
    Bad(
        "unknown-format",
        _set(("nodes", 1, "files"), ["data/authors.json"]),
        "/data/authors.json: file not found",
    ),
    Bad(
        "undeclared-node-type",
        _set(("edges", 0, "relation"), ["editor", "writes", "paper"]),
        "names node types no graph.nodes entry declares",
    ),
    Bad(
        "node-type-twice",
        lambda root, graph: graph["nodes"].append(dict(graph["nodes"][1])),
        "declare each node type once",
    ),
    Bad(
        "edge-type-twice",
        lambda root, graph: graph["edges"].append(dict(graph["edges"][1])),
        "declare each edge type once",
    ),
    Bad("nodes-without-edges", lambda root, graph: graph.pop("edges"), "set both or neither"),
    Bad(
        "feature-not-a-number-named",
        _file("papers.csv", PAPERS.replace("2005", "soon")),
        "holds string ('soon' on line 3)",
    ),
    Bad(
        "node-header-names-a-column-twice",
        _file("papers.csv", PAPERS.replace("pid,year,cites,topic", "pid,year,year,topic")),
        "spec.graph.nodes[0].files[0]: the header names column 'year' twice",
    ),
    Bad(
        "edge-header-names-a-column-twice",
        _file("writes.csv", WRITES.replace("author,paper,weight", "author,author,weight")),
        "spec.graph.edges[0].files[0]: the header names column 'author' twice",
    ),
    Bad(
        "edge-file-listed-twice",
        _set(("edges", 0, "files"), ["writes.csv", "./writes.csv"]),
        "spec.graph.edges[0].files[1] lists a file already listed",
    ),
    Bad(
        "feature-column-listed-twice",
        _set(("nodes", 0, "features"), ["year", "year"]),
        "names column 'year' twice: list each feature column once",
    ),
    Bad(
        "same-id-and-feature-column",
        _set(("nodes", 0, "features"), ["pid"]),
        "spec.graph.nodes[0].idColumn: is also a feature or the label column",
    ),
]


@pytest.mark.parametrize("case", BAD, ids=[b.id for b in BAD])
def test_a_bad_typed_input_is_one_line_and_nothing_is_written(case: Bad, tmp_path: Path) -> None:
    write_data(tmp_path)
    graph = graph_section()
    case.change(tmp_path, graph)
    spec = write_spec(tmp_path, graph)
    out = tmp_path / "partition"
    result = runner.invoke(app, ["partition", "--spec", str(spec), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    message = result.output.rstrip("\n")
    assert message and "\n" not in message, f"not one line:\n{result.output}"
    assert case.needle in message, message
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_a_good_typed_spec_partitions(tmp_path: Path) -> None:
    write_data(tmp_path)
    spec = write_spec(tmp_path, graph_section())
    out = tmp_path / "partition"
    result = runner.invoke(app, ["partition", "--spec", str(spec), "--out", str(out)])
    assert result.exit_code == 0, result.output
    config = next(out.glob("*.json"))
    assert "canonical_etypes" in config.read_text()
    assert np.load(out / "part-0" / "edata" / "efeat.npy").shape[1] == 1


@pytest.mark.parametrize(
    ("targets", "needle"),
    [
        (["author"], "task.targetNodeTypes: node type 'author' has no labelled nodes (labelled: paper)"),
        (
            None,
            "graph.nodes: task nodeClassification classifies nodes, but graph has no labels: give a node "
            "type a label column (graph.nodes[].label)",
        ),
        (["paper", "author"], ""),  # some target type is labelled: it trains on those
    ],
)
def test_validate_refuses_target_node_types_without_labels(
    tmp_path: Path, targets: list[str] | None, needle: str
) -> None:
    """A target type with no labelled node trained no step and scored val_accuracy 0.0, exit 0."""
    write_data(tmp_path)
    graph = graph_section()
    if targets is None:
        del graph["nodes"][0]["label"]
    spec = write_spec(tmp_path, graph)
    doc = yaml.safe_load(spec.read_text())
    doc["spec"]["task"]["targetNodeTypes"] = targets or ["paper"]
    doc["spec"]["trainers"] = {"replicas": 1}
    spec.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == (1 if needle else 0), result.output
    assert needle in result.output and "Traceback" not in result.output


def test_an_unknown_target_node_type_is_named_apart_from_the_graphs_name(tmp_path: Path) -> None:
    """The graph of data/shop/*.csv is named shop, as its node type is: "shop has no node type 'users'"."""
    write_data(tmp_path)
    spec = write_spec(tmp_path, graph_section())
    doc = yaml.safe_load(spec.read_text())
    doc["spec"]["task"]["targetNodeTypes"] = ["papers"]
    spec.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 1
    assert (
        "task.targetNodeTypes: the graph 'graph' has no node type 'papers' (node types: paper, author)"
        in (result.output)
    ), result.output


@pytest.mark.parametrize(
    ("make", "said"), [("dir", "is a directory, not a table file"), ("fifo", "not a regular file")]
)
def test_a_typed_file_that_is_not_a_regular_file_says_what_it_is(
    tmp_path: Path, make: str, said: str
) -> None:
    """Both read "file not found", beside the path the user can see exists."""
    write_data(tmp_path)
    target = tmp_path / "data" / "odd.csv"
    target.mkdir() if make == "dir" else os.mkfifo(target)
    graph = graph_section()
    graph["nodes"][1]["files"] = ["data/odd.csv"]
    result = runner.invoke(app, ["validate", str(write_spec(tmp_path, graph))])
    line = f"spec.graph.nodes[1].files[0]: {tmp_path / 'data' / 'odd.csv'}: {said}"
    assert result.exit_code == 1 and line in result.output.replace("\n", ""), result.output
