"""Issue 20: `summarise`/`directedness` (item 10's facts, item 4's directed input), the requirements check
(item 3: "validate must check what the chosen model needs"), `graphtrain validate` on the data and
`graphtrain data info FILE` (item 9)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from graphtrain.cli.app import app
from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.data.graph import Graph, KnowledgeGraph
from graphtrain.runtime.data.requirements import notes, problems
from graphtrain.runtime.data.summary import directedness, summarise

runner = CliRunner()


def graph(src: list[int], dst: list[int], n: int, **kw: object) -> Graph:
    return Graph.from_edges("g", n, np.array(src), np.array(dst), **kw)


def test_directedness() -> None:
    assert directedness(graph([0, 1, 2], [1, 2, 0], 3)) == 1.0
    assert directedness(graph([0, 1, 2, 2], [1, 0, 2, 0], 3)) == 0.25  # 2->0 has no 0->2; a loop is its own
    assert directedness(graph([0, 1], [1, 2], 4).with_reverse_edges()) == 0.0


def test_summarise_a_labelled_graph() -> None:
    label = np.array([0, 1, -1, 1, 0])
    g = graph(
        [0, 1, 2],
        [1, 2, 0],
        5,
        feat=sp.random(5, 4, density=0.5, format="csr", random_state=0),
        label=label,
        class_names=np.array(["a", "b"]),
        masks={"train": label >= 0, "val": np.zeros(5, bool)},
        node_ids=np.array(["n0", "n1", "n2", "n3", "n4"]),
    )
    s = summarise(g)
    assert (s.num_nodes, s.num_edges, s.isolated, s.directed) == (5, 3, 2, 1.0)
    assert (s.degree_min, s.degree_max, s.degree_median) == (0, 2, 2.0)
    assert (s.feature_dims, s.sparse_features, s.num_classes, s.labelled) == (4, True, 2, 4)
    assert s.class_names == ["a", "b"] and s.masks == {"train": 4, "val": 0} and s.node_ids == "string"
    text = "\n".join(s.lines())
    for needle in (
        "5 nodes, 3 edges",
        "isolated nodes: 2",
        "4 dims (sparse)",
        "classes: 2 (a, b)",
        "train 4",
    ):
        assert needle in text


def test_summarise_a_knowledge_graph() -> None:
    t = np.array([[0, 0, 1], [1, 1, 2]])
    kg = KnowledgeGraph("k", 3, 2, t, t[:1], t[1:], ["a", "b", "c"], ["likes", "knows"])
    s = summarise(kg)
    assert s.triples == {"train": 2, "valid": 1, "test": 1}
    assert s.num_edge_types == 2 and s.relation_names == ["likes", "knows"]


SPEC = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {{name: t}}
spec:
  graph: {graph}
  partition: {{parts: {parts}}}
  model: {model}
  training: {{fanouts: [5, 5]}}
  trainers: {{replicas: {replicas}}}
  embeddings: [{tables}]
"""


def spec(
    graph: str = "{path: e.tsv}",
    model: str = "{kind: graphsage}",
    parts: int = 1,
    replicas: int = 1,
    tables: str = "",
):  # noqa: ANN201
    text = SPEC.format(graph=graph, model=model, parts=parts, replicas=replicas, tables=tables)
    return load_yaml(text).spec


def labelled(n: int = 10, feat: object = "dense") -> Graph:
    label = np.arange(n) % 2
    f = np.ones((n, 3), np.float32) if isinstance(feat, str) else feat
    masks = {k: np.arange(n) % 3 == i for i, k in enumerate(("train", "val", "test"))}
    return graph(list(range(n)), [(i + 1) % n for i in range(n)], n, feat=f, label=label, masks=masks)


BAG = "{kind: graphsage, featureBag: {embedding: w}}"
WORDS = "{name: w, dim: 4, keys: features}"


@pytest.mark.parametrize(
    ("the_spec", "g", "fields"),
    [
        (spec(), labelled(), []),
        (spec(), graph([0], [1], 2, feat=np.ones((2, 2))), ["graph.labels"]),
        (spec("{dataset: wordnet}"), graph([0], [1], 2, feat=np.ones((2, 2))), ["graph.dataset"]),
        (spec(), labelled(feat=None), ["model.useFeatures"]),
        (spec(), labelled(feat=sp.csr_matrix(np.ones((10, 3)))), ["model.featureProjection"]),
        (
            spec(
                model="{kind: graphsage, featureProjection: 8, useFeatures: false, nodeEmbedding: x}",
                tables="{name: x, dim: 4}",
            ),
            labelled(feat=None),
            ["model.featureProjection"],
        ),
        (spec(model=BAG, tables=WORDS), labelled(feat=sp.csr_matrix(np.ones((10, 3)))), []),
        (spec(model=BAG, tables=WORDS), labelled(), ["model.featureBag"]),  # dense features
        (spec(model=BAG, tables=WORDS), labelled(feat=None), ["model.featureBag"]),
        (spec(parts=11), labelled(), ["partition.parts"]),
        (spec(replicas=4), labelled(), ["graph.split", "graph.split"]),  # 3 val / 3 test nodes for 4 trainers
    ],
)
def test_problems_name_the_field(the_spec, g: Graph, fields: list[str]) -> None:  # noqa: ANN001
    found = problems(the_spec, summarise(g))
    assert [p.path for p in found] == [f"spec.{f}" for f in fields], found  # as schema problems


def test_kge_needs_triples() -> None:
    kge = spec(
        "{triples: {path: t.tsv}}",
        "{kind: transe, entityEmbedding: e, relationEmbedding: r}",
        tables="{name: e, dim: 4}, {name: r, dim: 4, keys: relations}",
    )
    found = problems(kge, summarise(graph([0], [1], 2)))
    assert [p.path for p in found] == ["spec.graph.triples"]


def test_kge_needs_valid_and_test_triples() -> None:
    """A split that leaves valid or test without triples is refused: ranked over nothing, its MRR
    read 0.0 for any model and the best checkpoint was picked on it."""
    kge = spec(
        "{triples: {path: t.tsv}, split: {train: 1.0, val: 0.0, test: 0.0}}",
        "{kind: transe, entityEmbedding: e, relationEmbedding: r}",
        tables="{name: e, dim: 4}, {name: r, dim: 4, keys: relations}",
    )
    t = np.array([[0, 0, 1], [1, 1, 2]])
    empty = np.empty((0, 3), dtype=np.int64)
    kg = KnowledgeGraph("k", 3, 2, t, empty, empty, ["a", "b", "c"], ["likes", "knows"])
    found = problems(kge, summarise(kg))
    assert [p.path for p in found] == ["spec.graph.split", "spec.graph.split"], found
    assert "the valid split of k holds no triples" in found[0].message
    whole = KnowledgeGraph("k", 3, 2, t, t[:1], t[1:], ["a", "b", "c"], ["likes", "knows"])
    assert problems(kge, summarise(whole)) == []


def link_spec(relations: str, model: str = "{kind: rgcn, nodeEmbedding: e, useFeatures: false}") -> object:
    """A linkPrediction spec on a triples file with task.targetRelations `relations`."""
    text = SPEC.format(
        graph="{triples: {path: t.tsv}}", model=model, parts=1, replicas=1, tables="{name: e, dim: 4}"
    ).replace("  model:", f"  task: {{kind: linkPrediction, targetRelations: {relations}}}\n  model:")
    return load_yaml(text).spec


def test_link_prediction_needs_an_encoder_input_and_known_target_relations() -> None:
    """A GNN encodes the entities of task linkPrediction: it needs an input (a knowledge graph has no
    features), and task.targetRelations must name the graph's relations."""
    t = np.array([[0, 0, 1], [1, 1, 2]])
    kg = KnowledgeGraph("k", 3, 2, t, t[:1], t[1:], ["a", "b", "c"], ["likes", "knows"])
    found = problems(link_spec("[likes, hates]", "{kind: rgcn, nodeEmbedding: e}"), summarise(kg))
    assert [p.path for p in found] == ["spec.model.useFeatures", "spec.task.targetRelations"], found
    assert "no relation 'hates' (relations: likes, knows)" in found[1].message


def test_target_relations_need_triples_in_every_split() -> None:
    """A target relation with no held-out triples was evaluated over none (MRR 0 for any model); one
    with no training triples trained on nothing. Refused naming the field; one of several with no
    held-out triples is a note (it is trained, but the MRR does not measure it)."""
    t = np.array([[0, 0, 1], [1, 1, 2], [2, 0, 0]])
    kg = KnowledgeGraph("k", 3, 2, t, t[:1], t[2:], ["a", "b", "c"], ["likes", "knows"])
    s = summarise(kg)
    assert s.relation_triples == {"train": [2, 1], "valid": [1, 0], "test": [1, 0]}

    found = problems(link_spec("[knows]"), s)
    assert [p.path for p in found] == ["spec.task.targetRelations"] * 2, found
    assert "the valid split of k holds no triples of 'knows'" in found[0].message
    assert "the test split" in found[1].message
    assert problems(link_spec("[likes]"), s) == [] and notes(link_spec("[likes]"), s) == []
    assert problems(link_spec("[likes, knows]"), s) == []
    said = notes(link_spec("[likes, knows]"), s)
    assert len(said) == 1 and "no valid or test triples of 'knows'" in said[0], said
    untrained = KnowledgeGraph("k", 3, 2, t[:1], t[1:2], t[1:2], ["a", "b", "c"], ["likes", "knows"])
    found = problems(link_spec("[knows]"), summarise(untrained))
    assert (
        len(found) == 1
        and "the train split of k holds no triples of 'knows': nothing to learn" in found[0].message
    )


def test_a_directed_edge_list_is_noted_for_graphsage() -> None:
    assert "graph.reverseEdges: true" in notes(spec(), summarise(labelled()))[0]
    assert notes(spec("{path: e.tsv, reverseEdges: true}"), summarise(labelled())) == []


# ---------------------------------------------------------------------------------------- the CLI

SAGE = """apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {name: mine}
spec:
  graph: {path: data/e.tsv, features: data/f.npy%s}
  model: {kind: graphsage}
  training: {fanouts: [5, 5]}
"""


def write_inputs(root: Path, labels: bool) -> Path:
    (root / "data").mkdir(parents=True)
    n = 30
    (root / "data" / "e.tsv").write_text(
        "".join(f"n{i}\tn{(i + 1) % n}\n" for i in range(n)).replace("n", "")
    )
    np.save(root / "data" / "f.npy", np.ones((n, 4), np.float32))
    (root / "data" / "l.csv").write_text("id,label\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(n)))
    path = root / "mine.yaml"
    path.write_text(SAGE % (", labels: data/l.csv, reverseEdges: true" if labels else ""))
    return path


def test_validate_checks_the_data_from_the_spec_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = write_inputs(tmp_path / "good", labels=True)
    bad = write_inputs(tmp_path / "bad", labels=False)
    monkeypatch.chdir(tmp_path)  # relative paths resolve from each spec's directory, not from here
    ok = runner.invoke(app, ["validate", str(good)])
    assert ok.exit_code == 0 and "mine.yaml: valid" in ok.output, ok.output
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert (
        ": spec.graph.labels: task nodeClassification classifies nodes, but e has no labels" in result.output
    )
    assert "warning:" in result.output and "graph.reverseEdges: true" in result.output  # one-way edges
    assert "Traceback" not in result.output
    assert runner.invoke(app, ["validate", "--no-data", str(bad)]).exit_code == 0


@pytest.mark.parametrize(
    ("name", "field"), [("e.tsv", "graph.path"), ("f.npy", "graph.features"), ("l.csv", "graph.labels")]
)
def test_validate_names_a_missing_data_file_and_its_field(tmp_path: Path, name: str, field: str) -> None:
    path = write_inputs(tmp_path, labels=True)
    (tmp_path / "data" / name).unlink()
    result = runner.invoke(app, ["validate", str(path)])
    assert (
        result.exit_code == 1 and f": spec.{field}: {tmp_path}/data/{name}: file not found" in result.output
    )
    assert len(result.output.strip().splitlines()) == 1, result.output


KG = """apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {name: kg}
spec:
  graph: {triples: {path: train.tsv, valid: val.tsv, test: test.tsv}}
  embeddings: [{name: entity, keys: nodes, dim: 8}, {name: relation, keys: relations, dim: 8}]
  task: {kind: kge}
  model: {kind: transe, entityEmbedding: entity, relationEmbedding: relation}
"""


def test_validate_names_a_missing_triples_file_and_its_field(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\nb\tr\tc\n")
    (tmp_path / "test.tsv").write_text("a\tr\tc\n")
    (tmp_path / "kg.yaml").write_text(KG)
    result = runner.invoke(app, ["validate", str(tmp_path / "kg.yaml")])
    assert result.exit_code == 1
    assert f": spec.graph.triples.valid: {tmp_path}/val.tsv: file not found" in result.output, result.output


def test_data_info_on_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_inputs(tmp_path, labels=True)
    monkeypatch.chdir(tmp_path / "data")
    result = runner.invoke(app, ["data", "info", "e.tsv", "--features", "f.npy", "--labels", "l.csv"])
    assert result.exit_code == 0, result.output
    for needle in (
        "30 nodes, 30 edges",
        "100% of edges have no reverse",
        "features: 4 dims",
        "classes: 2 (a, b)",
    ):
        assert needle in result.output
    (tmp_path / "data" / "t.tsv").write_text("a\tr\tb\nb\tr\tc\n")
    kg = runner.invoke(app, ["data", "info", "t.tsv", "--triples"])
    assert kg.exit_code == 0 and "edge types: 1 (r)" in kg.output and "triples: train" in kg.output
    (tmp_path / "data" / "g.tsv").write_text("0\t1\n1\t5\n")
    gap = runner.invoke(app, ["data", "info", "g.tsv"])
    assert gap.exit_code == 0 and "warning: g.tsv: 3 ids between 0 and 5 have no edge" in gap.output
    missing = runner.invoke(app, ["data", "info", "my.npz"])
    assert missing.exit_code == 1
    assert "my.npz: no such file, and not a bundled dataset" in missing.output
