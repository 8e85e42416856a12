"""The CRD on a real API server: it refuses what the spec's rules refuse, with the same messages.

Every spec Rule is written in Python and in CEL (contract/spec/rules.py). Here each example of
tests/contract/spec_cases.py, built to break one rule, is sent to the API server (a server-side dry run):
it must be refused, and every problem `graphtrain validate` finds in it must be in the refusal, at the
same path with the same text. The valid examples must be accepted, and the defaults the API server
fills in must be the ones the executors assume. The CRD itself being accepted (the API server refuses
rules whose estimated cost is too high) is the `kube` fixture's first step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from graphtrain.contract.spec import check, parse, yaml_document
from tests.contract.spec_cases import BREAKS, FIELD_BREAKS, GRAPHSAGE, TRANSE, edit

ROOT = Path(__file__).resolve().parents[2]


def dry_run(kube: Callable[..., str], doc: dict) -> str:
    """Create `doc` on the server without storing it: the object as stored (defaults filled in)."""
    return kube("create", "--dry-run=server", "-o", "yaml", "-f", "-", input=yaml.safe_dump(doc))


def refusal(kube: Callable[..., str], doc: dict) -> str:
    with pytest.raises(RuntimeError) as info:
        dry_run(kube, doc)
    return str(info.value)


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_accepted(kube: Callable[..., str], example: Path) -> None:
    dry_run(kube, yaml_document(example.read_text()))


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_a_broken_rule_is_refused_with_its_message(kube: Callable[..., str], name: str) -> None:
    doc = BREAKS[name]
    problems = check(doc)[1]
    assert problems, f"{name}: the Python side finds nothing"
    refused = refusal(kube, doc)
    for p in problems:
        assert f"{p.path}: Invalid value: {p.message}" in refused, f"{name}: {p} missing from:\n{refused}"


@pytest.mark.parametrize("base", [GRAPHSAGE, TRANSE], ids=["graphsage", "transe"])
def test_server_defaults_are_the_executors_defaults(kube: Callable[..., str], base: dict) -> None:
    stored = yaml_document(dry_run(kube, base))  # as kubectl reads numbers: eps: 1e-08 is a float
    spec = stored["spec"]
    assert (
        spec["training"]["fanouts"] == [10, 25] and spec["embeddings"][0]["optimizer"]["stepCount"] == "row"
    )
    # a model kind's fields carry no server default (another kind must not hold them): the executors'
    # variant applies its own, so the stored spec still reads as the one sent
    assert "numLayers" not in spec["model"] and "negatives" not in spec["model"] and "task" not in spec
    as_stored = parse({**base, "spec": spec}).spec
    assert as_stored == parse(base).spec


def test_explain_shows_descriptions(kube: Callable[..., str]) -> None:
    for field in ("spec.model", "spec.trainers.replicas", "spec.embeddings.optimizer.lr"):
        text = kube("explain", f"graphtrainings.{field}")
        assert "<no description>" not in text and "DESCRIPTION" in text, text
    assert "Number of trainers. Default: 1." in kube("explain", "graphtrainings.spec.trainers.replicas")


def test_placement_fields_are_stored_as_written(kube: Callable[..., str]) -> None:
    """Per-role scheduling and storage fields survive the API server: affinity and tolerations are kept
    whole (not pruned), and nothing is defaulted in (unset means the operator's default)."""
    placement = {
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "nodeSelector": {"pool": "memory"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gt", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                ]
            }
        },
        "priorityClassName": "graphtrain-shards",
    }
    doc = {
        **GRAPHSAGE,
        "spec": {
            **GRAPHSAGE["spec"],
            "partition": {**GRAPHSAGE["spec"]["partition"], "nodeSelector": {}, "tolerations": []},
            "shardServers": placement,
            "storage": {"accessModes": ["ReadWriteOnce"], "size": "20Gi", "storageClassName": "nfs"},
        },
    }
    stored = yaml_document(dry_run(kube, doc))["spec"]
    for key, value in placement.items():
        assert stored["shardServers"][key] == value, key
    assert stored["partition"]["nodeSelector"] == {} and stored["partition"]["tolerations"] == []
    assert "resources" not in stored["trainers"] and "affinity" not in stored["partition"]
    assert stored["storage"]["accessModes"] == ["ReadWriteOnce"] and stored["storage"]["size"] == "20Gi"
    assert parse({**doc, "spec": stored}).spec == parse(doc).spec
    bad = {**doc, "spec": {**doc["spec"], "storage": {"accessModes": ["ReadWriteSometimes"]}}}
    assert "spec.storage.accessModes[0]: Unsupported value" in refusal(kube, bad)


@pytest.mark.parametrize("name", sorted(FIELD_BREAKS))
def test_a_wrong_placement_or_storage_field_is_refused(kube: Callable[..., str], name: str) -> None:
    """Refused by the Python side always, and by the API server where a structural schema can say it."""
    doc, by_crd = FIELD_BREAKS[name]
    assert check(doc)[1], f"{name}: the Python side finds nothing"
    if by_crd:
        refusal(kube, doc)
    else:
        dry_run(kube, doc)  # the API server takes it: the operator's SpecValid False is what refuses it


# the model of a GraphSAGE training as the old CRD stored it: every old field's default, on every kind
OLD_STORED_MODEL = {
    "kind": "graphsage",
    "hiddenDim": 256,
    "numLayers": 2,
    "dropout": 0.5,
    "useFeatures": True,
    "nodeEmbedding": "node",
    "negatives": 64,
    "loss": "crossentropy",
    "margin": 1.0,
    "norm": 1,
}


def test_an_old_form_training_as_the_old_crd_stored_it_is_accepted_and_reads_in_the_new_form(
    kube: Callable[..., str],
) -> None:
    """Trainings stored before spec.task (their model holding every old field's default, the old CRD's
    defaulting) still pass the new CRD, as any spec without task does, and the executors read them as
    the new form; with spec.task the same fields are refused."""
    old = {**GRAPHSAGE, "spec": {**GRAPHSAGE["spec"], "model": OLD_STORED_MODEL}}
    dry_run(kube, old)
    gt = parse(old)
    assert gt.spec.task is not None and gt.spec.task.kind == "nodeClassification"
    assert gt.spec.model.negatives is None and gt.spec.model.norm is None
    assert gt.spec.model.variant == parse(GRAPHSAGE).spec.model.variant
    new = {**old, "spec": {**old["spec"], "task": {"kind": "nodeClassification"}}}
    refused = refusal(kube, new)
    assert "spec.model.norm: Invalid value: graphsage does not read it (transe does)" in refused
    assert "spec.model.negatives: Invalid value: is the kge task's: write it as task.negatives" in refused


def _capturable(s: dict) -> None:
    s.setdefault("training", {}).update(cudaGraph=True)
    for t in s["embeddings"]:
        t["sharding"] = "collective"


def _sage(**table: Any) -> dict:
    """GraphSAGE node classification with its node table held by the one trainer (and `table`'s fields)."""
    return edit(
        GRAPHSAGE,
        lambda s: (_capturable(s), s.update(trainers={"replicas": 1}), s["embeddings"][0].update(table)),
    )


CUDA_GRAPH_CASES = {
    "capturable": (edit(TRANSE, _capturable), True),
    "graphsage": (_sage(), True),
    "graphsage, mean duplicates": (_sage(duplicateGrads="mean"), False),
    "graphsage, two trainers": (edit(_sage(), lambda s: s.update(trainers={"replicas": 2})), False),
    "graphsage, bfloat16 products": (
        edit(_sage(), lambda s: s["training"].update(mixedPrecision="bfloat16")),
        True,
    ),
    "gat": (edit(_sage(), lambda s: s["model"].update(kind="gat")), False),
    "graphsage on a GPU": (
        edit(_sage(), lambda s: s.update(trainers={"replicas": 1, "device": "cuda"})),
        True,
    ),
    "graphsage on a GPU, adagrad": (
        edit(
            _sage(),
            lambda s: (
                s.update(trainers={"replicas": 1, "device": "cuda"}),
                s["training"].update(denseOptimizer="adagrad"),
            ),
        ),
        False,
    ),
    "graphsage on a CPU, adagrad": (
        edit(_sage(), lambda s: s["training"].update(denseOptimizer="adagrad")),
        True,
    ),
    "nonFiniteGrads skip": (
        edit(TRANSE, lambda s: (_capturable(s), s["embeddings"][1].update(nonFiniteGrads="skip"))),
        False,
    ),
    "bfloat16": (
        edit(TRANSE, lambda s: (_capturable(s), s["embeddings"][0].update(dtype="bfloat16"))),
        False,
    ),
    "two trainers": (edit(TRANSE, lambda s: (_capturable(s), s.update(trainers={"replicas": 2}))), False),
    "dynamic vocabulary": (
        edit(
            TRANSE,
            lambda s: (
                _capturable(s),
                s["embeddings"][0].update(vocabulary={"kind": "dynamic", "capacity": 64}),
            ),
        ),
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CUDA_GRAPH_CASES))
def test_the_crd_judges_training_cuda_graph_as_python_does(kube: Callable[..., str], name: str) -> None:
    """The cuda-graph rule's CEL and its Python check agree on each of its clauses."""
    doc, valid = CUDA_GRAPH_CASES[name]
    assert (check(doc)[1] == []) == valid
    if valid:
        dry_run(kube, doc)
    else:
        assert "spec.training.cudaGraph: Invalid value" in refusal(kube, doc)
