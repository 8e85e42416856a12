"""The spec's rules: every one broken by an example, unsupported values refused, every problem at once.

The CEL side of the same rules is checked against a real API server in
tests/operator/test_crd_validation.py, with the same examples (spec_cases.py).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from graphtrain.contract.spec import (
    GraphSource,
    GraphTraining,
    SpecError,
    check,
    parse,
    problems_from_validation,
)
from graphtrain.contract.spec.rules import RULES, Rule
from graphtrain.runtime.cli import app
from tests.contract.spec_cases import BREAKS, GRAPHSAGE, TRANSE, TYPED_EMB, WORDBAG, edit

ROOT = Path(__file__).resolve().parents[2]
ALL_RULES = {rule.name: (model, rule) for model, rules in RULES.items() for rule in rules}


def message_pattern(rule: Rule) -> str:
    """A regex matching the rule's message whatever its arguments."""
    return ".*".join(re.escape(part) for part in re.split(r"%[sd]", rule.message))


def test_every_rule_has_a_breaking_example() -> None:
    assert set(BREAKS) == set(ALL_RULES), "add an example to tests/contract/spec_cases.py for each new rule"


def test_rule_names_are_unique() -> None:
    assert len(ALL_RULES) == sum(len(rules) for rules in RULES.values())


@pytest.mark.parametrize(
    "base", [GRAPHSAGE, TRANSE, WORDBAG, TYPED_EMB], ids=["graphsage", "transe", "wordbag", "typed-emb"]
)
def test_the_bases_are_valid(base: dict) -> None:
    assert check(base)[1] == []


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_example_breaks_its_rule(name: str) -> None:
    _, rule = ALL_RULES[name]
    gt, problems = check(BREAKS[name])
    assert gt is None
    hits = [
        p
        for p in problems
        if (not rule.field or p.path == rule.field or p.path.endswith("." + rule.field))
        and re.fullmatch(message_pattern(rule), p.message)
    ]
    assert hits, f"{name} not reported; got {[str(p) for p in problems]}"


@pytest.mark.parametrize("kind", ["graphsage", "rgcn", "gat", "rgat"])
def test_mixed_precision_is_accepted_for_the_models_built_for_it(kind: str) -> None:
    doc = edit(
        GRAPHSAGE, lambda s: (s["model"].update(kind=kind), s.update(training={"mixedPrecision": "bfloat16"}))
    )
    assert parse(doc).spec.training.mixed_precision == "bfloat16"


@pytest.mark.parametrize(
    ("table", "path"),
    [({"keys": "custom", "numEmbeddings": 10}, "spec.embeddings[0].keys")],
)
def test_unsupported_values_are_refused_with_their_field(table: dict, path: str) -> None:
    doc = edit(GRAPHSAGE, lambda s: s["embeddings"][0].update(table))
    with pytest.raises(SpecError) as info:
        parse(doc)
    refused = [p for p in info.value.problems if p.path == path]
    assert len(refused) == 1 and "not supported yet" in refused[0].message


@pytest.mark.parametrize(
    "table",
    [
        {"dtype": "float16", "sharding": "collective"},
        {"dtype": "bfloat16", "vocabulary": {"kind": "dynamic", "capacity": 100}},
        {"dtype": "bfloat16", "sharding": "collective", "vocabulary": {"kind": "dynamic", "capacity": 100}},
    ],
)
def test_half_collective_and_dynamic_tables_are_accepted_on_cpus_and_gpus(table: dict) -> None:
    """Both cores step half rows (the CUDA core's bits are the CPU core's: tests/gpu/test_half_tables.py),
    so a half table may live on GPU trainers or GPU shard servers."""
    parse(edit(GRAPHSAGE, lambda s: s["embeddings"][0].update(table)))
    parse(
        edit(
            GRAPHSAGE,
            lambda s: (
                s["embeddings"][0].update(table),
                s.update(trainers={"replicas": 2, "device": "cuda"}, shardServers={"device": "cuda"}),
            ),
        )
    )


@pytest.mark.parametrize(
    ("init", "fits"),
    [
        ({"kind": "uniform", "low": -65504, "high": 65504}, True),
        ({"kind": "uniform", "low": -1, "high": 7e4}, False),
        ({"kind": "normal", "mean": 0, "std": 1e4}, True),
        ({"kind": "normal", "mean": 0, "std": 1e6}, False),
        ({"kind": "normal", "mean": -6e4, "std": 1e3}, False),
        ({"kind": "zeros"}, True),
    ],
)
def test_a_float16_tables_init_must_draw_what_float16_holds(init: dict, fits: bool) -> None:
    """float16 overflows past 65504 (the rows would start infinite); bfloat16 and float32 have room."""
    doc = edit(GRAPHSAGE, lambda s: s["embeddings"][0].update(dtype="float16", init=init))
    if fits:
        parse(doc)
    else:
        with pytest.raises(SpecError, match=r"spec.embeddings\[0\].init: draws values a float16 row cannot"):
            parse(doc)
    parse(edit(GRAPHSAGE, lambda s: s["embeddings"][0].update(dtype="bfloat16", init=init)))


def test_a_dynamic_half_tables_memory_need_counts_two_bytes_an_element() -> None:
    from graphtrain.contract.spec import parse as parse_spec
    from graphtrain.contract.spec.pods import KEY_BYTES, dynamic_need

    def need(dtype: str) -> int:
        vocab = {"kind": "dynamic", "capacity": 1000}
        gt = parse_spec(edit(GRAPHSAGE, lambda s: s["embeddings"][0].update(dtype=dtype, vocabulary=vocab)))
        return dynamic_need(gt.spec, gt.spec.embeddings[0])

    rows = -(-1000 // 2)  # two shard servers
    assert need("float32") == rows * (KEY_BYTES + 16 * 4)
    assert need("bfloat16") == need("float16") == rows * (KEY_BYTES + 16 * 2)


@pytest.mark.parametrize(
    ("value", "got"), [("dynamic", "'dynamic'"), (5, "5"), ([1, 2], "a list of 2 items"), (True, "true")]
)
@pytest.mark.parametrize("block", ["vocabulary", "init", "optimizer"])
def test_a_block_given_a_plain_value_is_one_problem_naming_it(block: str, value: object, got: str) -> None:
    doc = edit(GRAPHSAGE, lambda s: s["embeddings"][0].update({block: value}))
    with pytest.raises(SpecError) as info:
        parse(doc)
    assert [p.message for p in info.value.problems if p.path == f"spec.embeddings[0].{block}"] == [
        f"Input should be an object, got {got}"
    ]


def test_schema_errors_and_every_decidable_rule_at_once() -> None:
    doc = copy.deepcopy(GRAPHSAGE)
    doc["metadata"]["name"] = "b" * 41
    doc["spec"].update(
        graph={"dataset": "wordnett", "split": {"train": 0.9, "val": 0.2, "test": 0.2}},
        partition={"parts": 2, "balanse": 1},
        embeddings=[
            {"name": "node", "dim": 16, "sharding": "collective", "optimizer": {"lr": "fast"}},
            {"name": "spare", "dim": 8, "dtype": "float16", "sharding": "collective"},
        ],
        model={"kind": "graphsage", "nodeEmbedding": "node", "numLayers": 3},
        training={"epochs": 0, "fanouts": [10, 0]},
        shardServers={"replicas": 3},
        trainers={"backend": "nccl"},
    )
    gt, problems = check(doc)
    assert gt is None
    schema = {
        "spec.graph.dataset",
        "spec.partition.balanse",
        "spec.embeddings[0].optimizer.lr",
        "spec.training.epochs",
    }
    rules = {
        "metadata.name": "must be a lowercase DNS label",
        "spec.graph.split": "train + val + test must be 1",
        "spec.embeddings": "read by no model input",  # the valid tables are enough to decide it
        "spec.training.fanouts": "has 2 entries but model.numLayers is 3",
        "spec.shardServers.replicas": "is 3 but partition.parts is 2",
        "spec.trainers.backend": "nccl runs on GPUs",
    }
    assert {p.path for p in problems} == schema | set(rules), [str(p) for p in problems]
    for path, needle in rules.items():
        assert any(p.path == path and needle in p.message for p in problems), path
    # the positive-fanouts rule also holds a problem at spec.training.fanouts
    assert any(p.message.endswith("got [0]") for p in problems)


def test_a_rule_that_reads_an_invalid_field_is_skipped() -> None:
    # fanouts is no list: the layer-count rule cannot be decided, so it says nothing
    doc = edit(GRAPHSAGE, lambda s: s.update(training={"fanouts": "ten"}))
    problems = check(doc)[1]
    assert [p.path for p in problems] == ["spec.training.fanouts"]
    assert "valid array" in problems[0].message
    # the referenced table has an invalid name: whether it exists is not decided either
    doc = edit(GRAPHSAGE, lambda s: s["model"].update(nodeEmbedding="Node"))
    assert [p.path for p in check(doc)[1]] == ["spec.model.nodeEmbedding"]


@pytest.mark.parametrize("name", ["fanouts-per-layer", "graph-one-source", "init-uniform-ordered"])
def test_pydantic_validation_reports_the_same_rules(name: str) -> None:
    """Models validated directly (the operator, `graphtrain partition`) run the rules as validators."""
    doc = BREAKS[name]
    with pytest.raises(ValidationError) as info:
        GraphTraining.model_validate(doc)
    assert problems_from_validation(info.value) == check(doc)[1]


def test_a_sub_model_reports_its_rules() -> None:
    with pytest.raises(ValidationError) as info:
        GraphSource.model_validate({})
    assert [str(p) for p in problems_from_validation(info.value)] == [
        "(root): set exactly one of graph.dataset, graph.path, graph.triples and graph.nodes"
    ]


def test_messages_render_as_cel_format_does() -> None:
    rule = Rule(
        "r",
        "x",
        lambda _: False,
        cel="false",
        message="it's %s of %d: %s",
        args=(("self.a", lambda _: "a"), ("size(self.b)", lambda _: 2), ("self.b", lambda _: ["p", "q"])),
    )
    assert rule.render(None) == 'it\'s a of 2: ["p", "q"]'
    assert rule.validation() == {
        "rule": "false",
        "messageExpression": "'it\\'s %s of %d: %s'.format([self.a, size(self.b), self.b])",
        "fieldPath": ".x",
    }


def test_validate_prints_every_problem(tmp_path: Path) -> None:
    doc = edit(
        GRAPHSAGE,
        lambda s: s.update(
            graph={"dataset": "wordnet", "split": {"train": 2, "val": 0.2, "test": 0.2}},
            embeddings=[{"name": "node", "dim": 16, "sharding": "collective", "dtype": "bfloat16"}],
            training={"fanouts": [5], "epochs": -1},
            shardServers={"replicas": 4},
            trainers={"replicas": 2, "device": "cpu", "backend": "nccl"},
        ),
    )
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    expected = [
        "spec.graph.split.train: Input should be less than or equal to 1, got 2",
        "spec.training.epochs: Input should be greater than or equal to 1, got -1",
        "spec.training.fanouts: has 1 entries but model.numLayers is 2",
        "spec.shardServers.replicas: is 4 but partition.parts is 2",
        "spec.trainers.backend: nccl runs on GPUs: set trainers.device: cuda, or use gloo for CPU trainers",
    ]
    assert f"{len(expected)} problem(s)" in result.output
    for line in expected:
        assert line in result.output


@pytest.mark.parametrize(
    "name, line",
    [
        ("table-node-types-distinct", "spec.embeddings[0].nodeTypes: names node type 'author' twice"),
        (
            "table-node-types-known",
            "spec.embeddings: nodeTypes of node: the graph has no node type 'editor' (node types: "
            '["paper", "author"])',
        ),
        (
            "table-node-types-typed-graph",
            'spec.embeddings: nodeTypes of ["node"]: the graph has no node types (graph.typed, graph.nodes)',
        ),
        (
            "table-node-types-nodes-keys",
            "spec.embeddings[1].nodeTypes: is only for keys: nodes (keys is relations)",
        ),
    ],
)
def test_validate_refuses_bad_node_types_of_a_table_in_one_line(tmp_path: Path, name: str, line: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(BREAKS[name]))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # not a traceback
    assert result.output.splitlines() == [f"{path}: {line}"]


def test_node_types_of_a_typed_dataset_are_its_own() -> None:
    doc = edit(
        GRAPHSAGE,
        lambda s: (s["graph"].update(typed=True), s["embeddings"][0].update(nodeTypes=["adverb", "verb"])),
    )
    assert check(doc)[1] == []
    doc["spec"]["embeddings"][0]["nodeTypes"] = ["adverb", "synset"]
    assert [str(p) for p in check(doc)[1]] == [
        "spec.embeddings: nodeTypes of node: the graph has no node type 'synset' (node types: "
        '["noun", "verb", "adjective", "adverb"])'
    ]


def test_validate_accepts_the_examples() -> None:
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    result = CliRunner().invoke(app, ["validate", *examples])
    assert result.exit_code == 0, result.output
    assert result.output.count(": valid") == len(examples)


def test_types_are_checked_as_the_api_server_checks_them() -> None:
    """No lax coercion: the API server refuses these, so the local executor must not read "off" as
    false, true as 1 or "10" as 10; nor snake_case names, which are not on the wire."""

    def lax(s: dict) -> None:
        s["model"]["useFeatures"] = "off"
        s["trainers"] = {"replicas": True}
        s["training"] = {"epochs": "10"}
        s["partition"] = {"parts": 2.5}
        s["graph"]["reverse_edges"] = True

    problems = check(edit(GRAPHSAGE, lax))[1]
    assert {p.path: p.message for p in problems} == {
        "spec.model.useFeatures": "Input should be a valid boolean, got 'off'",
        "spec.trainers.replicas": "Input should be a valid integer, got true",
        "spec.training.epochs": "Input should be a valid integer, got '10'",
        "spec.partition.parts": "Input should be a valid integer, got 2.5",
        "spec.graph.reverse_edges": "unknown field",
    }


def test_no_nan_or_infinity_and_an_empty_document_says_so() -> None:
    def nan(s: dict) -> None:
        s["training"] = {"denseLr": float("nan")}
        s["embeddings"][0]["optimizer"] = {"kind": "adam", "lr": float("inf")}

    problems = check(edit(GRAPHSAGE, nan))[1]
    assert {p.path: p.message for p in problems} == {
        "spec.training.denseLr": "Input should be a finite number, got nan",
        "spec.embeddings[0].optimizer.lr": "Input should be a finite number, got inf",
    }
    assert [str(p) for p in check(None)[1]] == ["(root): the document is empty"]


@pytest.mark.parametrize("heads", [1_000_000, "four", -1, 2.5])
def test_a_rule_reading_a_value_that_failed_the_schema_is_skipped_not_crashed(heads: object) -> None:
    """model.heads outside its schema, read by attention-heads-divide-width (a `%`): one line naming
    model.heads, never a traceback."""
    from graphtrain.contract.spec.loading import check

    data = {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "x"},
        "spec": {
            "task": {"kind": "nodeClassification"},
            "model": {"kind": "rgat", "heads": heads},
            "graph": {"dataset": "wordnet"},
        },
    }
    _, problems = check(data)
    paths = [p.path for p in problems]
    assert paths and all("heads" in p for p in paths), problems
