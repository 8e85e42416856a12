"""The CRD is generated from the spec models; the chart's copy must equal a fresh generation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from graphtrain.contract import crd
from graphtrain.contract.spec import MAX_LAYERS, MAX_TABLES, RULES, GraphTrainingStatus, ModelSpec, Toleration

CHART_CRD = Path(__file__).resolve().parents[2] / "charts/graphtrain/crds/graphtrainings.graphtrain.io.yaml"


def test_chart_crd_equals_generated() -> None:
    assert CHART_CRD.read_text() == crd.crd_yaml(), "chart CRD is stale: run `make crd`"


def walk(node: Any, path: str = "$"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def test_schema_is_structural() -> None:
    schema = crd.openapi_schema()
    for path, node in walk(schema):
        if "properties" in node or "items" in node or "enum" in node:
            assert "type" in node, f"{path} has no type"
        assert "$ref" not in node and "$defs" not in node, path
        assert node.get("additionalProperties") is not False, path
        assert "const" not in node, path
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, f"{path}: only int-or-string may use anyOf"


def test_every_status_field_is_declared() -> None:
    status = crd.openapi_schema()["properties"]["status"]["properties"]
    declared = set(status)
    expected = {f.alias or name for name, f in GraphTrainingStatus.model_fields.items()}
    assert declared == expected
    progress = status["progress"]["properties"]
    assert {"epoch", "step", "loss", "samplesPerSecond", "evalMetric", "evalValue", "summary"} <= set(
        progress
    )
    assert set(status["partition"]["properties"]) >= {"edgeCutFraction", "balance", "haloPerPart"}


def test_crd_names_columns_and_subresource() -> None:
    doc = yaml.safe_load(crd.crd_yaml())
    assert doc["metadata"]["name"] == "graphtrainings.graphtrain.io"
    assert doc["spec"]["names"]["shortNames"] == ["gtr"]
    version = doc["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["Phase", "Progress", "Age", "Trainers", "Shards"]
    # where each role computes: with -o wide
    assert [c.get("priority", 0) for c in columns] == [0, 0, 0, 1, 1]


def test_quantities_are_int_or_string() -> None:
    limits = crd.openapi_schema()["properties"]["spec"]["properties"]["shardServers"]["properties"][
        "resources"
    ]
    mem = limits["properties"]["limits"]["additionalProperties"]
    assert mem["x-kubernetes-int-or-string"] is True


def properties(node: dict[str, Any], path: str = "") -> Any:
    """(path, schema) of every declared property, through list items and map values."""
    for key, value in node.get("properties", {}).items():
        yield f"{path}.{key}".lstrip("."), value
        yield from properties(value, f"{path}.{key}".lstrip("."))
    if "items" in node:
        yield from properties(node["items"], path + "[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from properties(node["additionalProperties"], path + "{}")


def test_every_property_has_a_description() -> None:
    """`kubectl explain` shows each field's description; none may be empty."""
    found = list(properties(crd.openapi_schema()))
    assert len(found) > 130
    # metadata: the API server refuses a description there (it is the standard object metadata)
    missing = [path for path, node in found if not node.get("description") and path != "metadata"]
    assert not missing, f"no description: {missing}"


def test_descriptions_state_defaults() -> None:
    spec = crd.openapi_schema()["properties"]["spec"]
    training = spec["properties"]["training"]["properties"]
    assert training["fanouts"]["default"] == [10, 25]
    assert training["fanouts"]["description"].endswith("Default: [10, 25].")
    assert spec["properties"]["partition"]["properties"]["algorithm"]["description"].endswith(
        "Default: metis."
    )
    # an object's default is whole (the API server checks it against the rules as it stands)
    assert spec["properties"]["model"]["default"] == ModelSpec().model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )


def test_every_rule_is_in_the_crd() -> None:
    """Each Rule of the spec models becomes one x-kubernetes-validations entry on its model's node."""
    schema = crd.openapi_schema()
    in_crd = [v for _, node in walk(schema) for v in node.get("x-kubernetes-validations", [])]
    in_crd = [v for v in in_crd if "oldSelf" not in v["rule"]]  # the transition rules: test_updates.py
    # EmbeddingTable's (and its sub-models') node appears once, as the items of spec.embeddings;
    # Toleration's once per role whose pods it places (partition, shardServers, trainers)
    roles = {Toleration: 3}
    expected = [r.cel for model, rules in RULES.items() for r in rules for _ in range(roles.get(model, 1))]
    assert sorted(v["rule"] for v in in_crd) == sorted(expected)
    root = [v for v in schema["x-kubernetes-validations"] if "oldSelf" not in v["rule"]]
    assert [v["fieldPath"] for v in root] == [".metadata.name"]


def test_cel_reads_only_bounded_lists() -> None:
    """The API server estimates a rule's cost from maxItems; an unbounded list read by a rule makes it
    refuse the CRD (the real check is the API server's, in tests/operator/test_crd_validation.py)."""
    spec = crd.openapi_schema()["properties"]["spec"]["properties"]
    assert spec["embeddings"]["maxItems"] == MAX_TABLES
    assert spec["training"]["properties"]["fanouts"]["maxItems"] == MAX_LAYERS
