"""The CRD is generated from the spec models; the chart's copy must equal a fresh generation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from graphtrain.runtime import crd
from graphtrain.runtime import spec as S

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
    expected = {f.alias or name for name, f in S.GraphTrainingStatus.model_fields.items()}
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
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Phase", "Progress", "Age"]


def test_quantities_are_int_or_string() -> None:
    limits = crd.openapi_schema()["properties"]["spec"]["properties"]["shardServers"]["properties"][
        "resources"
    ]
    mem = limits["properties"]["limits"]["additionalProperties"]
    assert mem["x-kubernetes-int-or-string"] is True
