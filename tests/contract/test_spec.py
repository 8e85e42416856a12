"""The GraphTraining spec: defaults, per-field errors (all at once) and cross-field rules."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from graphtrain.contract.spec import (
    MAX_SPEC_BYTES,
    Condition,
    GraphTrainingStatus,
    Progress,
    SpecError,
    load_yaml,
    parse,
    quantity_to_bytes,
)
from tests.contract.spec_cases import GRAPHSAGE, edit

EXAMPLES = Path(__file__).parents[2] / "examples"

ROOT = Path(__file__).resolve().parents[2]

VALID = GRAPHSAGE


def with_spec(**changes: object) -> dict:
    doc = copy.deepcopy(VALID)
    doc["spec"].update(changes)
    return doc


def paths(exc: SpecError) -> list[str]:
    return [p.path for p in exc.problems]


def test_valid_spec_gets_defaults() -> None:
    gt = parse(VALID)
    assert gt.spec.num_shards == 2
    assert gt.spec.training.fanouts == [10, 25]
    assert gt.spec.partition.balance == ["nodes", "degree", "train", "val", "test"]
    assert gt.spec.embeddings[0].duplicate_grads == "sum"
    assert gt.spec.embeddings[0].optimizer.step_count == "row"


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(example: Path) -> None:
    load_yaml(example.read_text())


def test_every_field_error_is_reported_at_once() -> None:
    doc = with_spec(
        graph={"dataset": "wordnett"},
        partition={"parts": 0, "balanse": 1},
        embeddings=[{"name": "Node", "dim": -1, "optimizer": {"lr": "nan"}}],
        training={"epoch": 3},
        shardServers={"resources": {"limits": {"memory": "4GG"}}},
    )
    with pytest.raises(SpecError) as info:
        parse(doc)
    assert set(paths(info.value)) == {
        "spec.graph.dataset",
        "spec.partition.parts",
        "spec.partition.balanse",
        "spec.embeddings[0].name",
        "spec.embeddings[0].dim",
        "spec.embeddings[0].optimizer.lr",
        "spec.training.epoch",
        "spec.shardServers.resources.limits.memory",
    }
    assert "unknown field" in str(info.value)


def test_cross_field_problems_are_all_reported() -> None:
    doc = with_spec(
        model={"kind": "transe", "nodeEmbedding": "nope"},
        shardServers={"replicas": 3},
        trainers={"backend": "nccl"},
    )
    doc["metadata"]["name"] = "Not_A_DNS_Name"
    with pytest.raises(SpecError) as info:
        parse(doc)
    assert set(paths(info.value)) == {
        "metadata.name",
        "spec.embeddings",
        "spec.model.nodeEmbedding",
        "spec.model.entityEmbedding",
        "spec.model.relationEmbedding",
        "spec.graph.dataset",
        "spec.shardServers.replicas",
        "spec.trainers.backend",
    }


@pytest.mark.parametrize(
    ("changes", "path", "needle"),
    [
        ({"graph": {}}, "spec.graph", "exactly one"),
        ({"graph": {"dataset": "wordnet", "path": "x.tsv"}}, "spec.graph", "exactly one"),
        (
            {"graph": {"dataset": "wordnet", "split": {"train": 0.9, "val": 0.2, "test": 0.2}}},
            "spec.graph.split",
            "must be 1",
        ),
        (
            {"graph": {"dataset": "wordnet", "split": {"train": 0.9, "val": 0.1}}},
            "spec.graph.split",
            "give train, val and test together",
        ),
        ({"graph": {"dataset": "nations", "split": {}}}, "spec.graph.split", "standard split"),
        ({"training": {"fanouts": [10]}}, "spec.training.fanouts", "numLayers"),
        ({"training": {"fanouts": [10, 0]}}, "spec.training.fanouts", "positive or -1"),
        (
            {"embeddings": [{"name": "node", "dim": 8, "keys": "custom"}]},
            "spec.embeddings[0].numEmbeddings",
            "keys: custom needs numEmbeddings",
        ),
        (
            {"embeddings": [{"name": "node", "dim": 8, "vocabulary": {"kind": "dynamic"}}]},
            "spec.embeddings[0].vocabulary.capacity",
            "capacity",
        ),
        (
            {"embeddings": [{"name": "node", "dim": 8, "init": {"low": 1, "high": 0}}]},
            "spec.embeddings[0].init",
            "low",
        ),
        (
            {"embeddings": [{"name": "node", "dim": 8}, {"name": "node", "dim": 4}]},
            "spec.embeddings",
            "duplicate",
        ),
        ({"partition": {"parts": 2, "memoryLimit": "1.5m"}}, "spec.partition.memoryLimit", "memory quantity"),
        (  # a canonical edge type where a relation name goes: pydantic's words named only its regex
            {"task": {"kind": "linkPrediction", "targetRelations": ["noun:hypernym:noun"]}},
            "spec.task.targetRelations[0]",
            "'noun:hypernym:noun' is not a node type or relation name",
        ),
    ],
)
def test_single_problem_names_its_field(changes: dict, path: str, needle: str) -> None:
    with pytest.raises(SpecError) as info:
        parse(with_spec(**changes))
    matching = [p for p in info.value.problems if p.path == path]
    assert matching, info.value.problems
    assert needle in matching[0].message


def test_malformed_yaml_and_non_mapping() -> None:
    with pytest.raises(SpecError) as info:
        load_yaml("spec: [unclosed")
    # where PyYAML found it, in one line, without its `in "<unicode string>"` and quoted source lines
    assert str(info.value) == (
        "invalid GraphTraining: (yaml): did not find expected ',' or ']' at line 2, column 1 (while parsing "
        "a flow sequence from line 1, column 7)"
    )
    with pytest.raises(SpecError, match="expected a mapping"):
        load_yaml("- just a list")


@pytest.mark.parametrize(
    ("text", "nbytes"), [("4Gi", 4 << 30), ("512Mi", 512 << 20), ("1e9", 10**9), ("2k", 2000)]
)
def test_quantity_to_bytes(text: str, nbytes: int) -> None:
    assert quantity_to_bytes(text) == nbytes


@pytest.mark.parametrize("bad", ["4GG", "abc", "", "1.5m"])
def test_bad_memory_quantities(bad: str) -> None:
    with pytest.raises(ValueError):
        quantity_to_bytes(bad)


def test_status_round_trips_through_camel_case() -> None:
    status = GraphTrainingStatus(
        phase="Training",
        conditions=[Condition(type="SpecValid", status="True", reason="Valid")],
        progress=Progress(epoch=3, epochs=10, samples_per_second=1234.5, summary="3/10"),
    )
    wire = status.model_dump(by_alias=True, exclude_none=True)
    assert wire["progress"]["samplesPerSecond"] == 1234.5
    assert GraphTrainingStatus.model_validate(wire) == status


def test_a_yaml_alias_bomb_is_refused_before_it_expands() -> None:
    """Nine levels of ten aliases each are 10^9 values once expanded; the event walk counts them."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    with pytest.raises(SpecError, match=r"expands to more than 100,000 values \(YAML aliases\)"):
        load_yaml("\n".join(lines) + "\n")


def test_an_oversized_spec_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(SpecError, match=r"characters: a GraphTraining spec is at most 1,048,576"):
        load_yaml("# " + "x" * MAX_SPEC_BYTES + "\n")


def test_aliases_of_ordinary_size_still_load() -> None:
    text = (EXAMPLES / "wordnet-sage.yaml").read_text()
    assert load_yaml(text) == load_yaml(text.replace("kind: graphsage", "kind: &k graphsage"))


def test_a_key_written_twice_is_refused_at_its_line() -> None:
    """PyYAML keeps the last of two equal keys silently (10 epochs then 20 trained 20); kubectl refuses."""
    text = (
        (EXAMPLES / "wordnet-sage.yaml")
        .read_text()
        .replace("    epochs: 10\n", "    epochs: 10\n    epochs: 20\n")
    )
    with pytest.raises(
        SpecError, match=r"^invalid GraphTraining: \(yaml\): found duplicate key 'epochs' at line"
    ):
        load_yaml(text)
    merged = "base: &b {epochs: 1}\nspec:\n  <<: *b\n  epochs: 2\n"  # a merge key's value overridden
    with pytest.raises(SpecError, match=r"base: unknown field"):
        load_yaml(merged)


def test_an_integer_of_thousands_of_digits_is_a_yaml_problem_not_a_traceback() -> None:
    text = (EXAMPLES / "wordnet-sage.yaml").read_text().replace("batchSize: 1024", "batchSize: " + "9" * 5000)
    with pytest.raises(SpecError, match=r"\(yaml\): an integer of 5,000 characters at line \d+, column 16$"):
        load_yaml(text)


def test_a_mapping_where_a_list_of_blocks_belongs_is_one_type_error() -> None:
    """The rules read a partial tree; a mapping for spec.embeddings was once built as one table, whose
    fields the rules iterated as tables (AttributeError)."""
    for field, value in (("embeddings", {"name": "node", "dim": 4}), ("graph", {"nodes": {"type": "a"}})):
        with pytest.raises(SpecError) as exc:
            parse(with_spec(**{field: value}))
        assert any("Input should be a valid" in p.message for p in exc.value.problems), exc.value


def test_numbers_are_read_as_kubectl_reads_them() -> None:
    """PyYAML reads `1e-8` (no dot) as a string, kubectl as a number: with strict types the spec
    `kubectl apply` takes must load here too."""
    text = (EXAMPLES / "gene-kg-transe.yaml").read_text().replace("eps: 1.0e-8", "eps: 1e-8")
    assert "eps: 1e-8" in text
    assert load_yaml(text).spec.embeddings[0].optimizer.eps == 1e-8


@pytest.mark.parametrize(
    ("trainers", "backend"),
    [
        ({}, "gloo"),
        ({"device": "cuda"}, "nccl"),
        ({"device": "cuda", "backend": "gloo"}, "gloo"),
        ({"device": "cpu", "backend": "gloo"}, "gloo"),
    ],
)
def test_the_trainers_backend_follows_their_device(trainers: dict, backend: str) -> None:
    gt = parse(edit(GRAPHSAGE, lambda s: s.update(trainers=trainers)))
    assert gt.spec.trainers.backend == backend == gt.spec.trainers.dist_backend


def test_nccl_needs_gpu_trainers_not_gpu_shards() -> None:
    """The rule is about the trainers' device: GPU shard servers do not make nccl valid for CPU trainers."""
    doc = edit(GRAPHSAGE, lambda s: s.update(trainers={"backend": "nccl"}, shardServers={"device": "cuda"}))
    with pytest.raises(SpecError) as info:
        parse(doc)
    assert [p.path for p in info.value.problems] == ["spec.trainers.backend"]
    assert "set trainers.device: cuda" in info.value.problems[0].message
    assert parse(edit(GRAPHSAGE, lambda s: s.update(trainers={"device": "cuda", "backend": "nccl"})))
