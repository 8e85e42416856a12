"""Generate the GraphTraining CustomResourceDefinition from the pydantic models in contract/spec/.

Kubernetes wants a *structural* OpenAPI v3 schema: every node typed, no `$ref`, no JSON-Schema-2020
forms (`anyOf` with null, numeric `exclusiveMinimum`, `const`), no `additionalProperties: false`.
`structural()` rewrites pydantic's JSON schema into that form; it is a pure function of the schema, so
the chart's CRD file can be compared with a fresh generation in a test. Every status field is declared:
the API server prunes undeclared fields silently, which would lose status written by the operator.

The spec's schema carries every default, those of `default_factory` fields too, so the API server
stores the values the executors use and the CEL rules (`x-kubernetes-validations`, from the spec's
Rules) read `self.model.kind` without guarding each level with has(). Each description ends with its
default (an object's is left out: its fields say theirs), which `kubectl explain` shows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from graphtrain.contract.spec import (
    API_VERSION,
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    GraphTraining,
    GraphTrainingSpec,
    GraphTrainingStatus,
    rules_of,
)
from graphtrain.contract.spec.updates import transition_rules

_DROP = {"title", "discriminator", "propertyNames"}  # map keys: checked by the Python side only


class _FactoryDefaults(GenerateJsonSchema):
    """pydantic's JSON schema, with the defaults of `default_factory` fields too (a model's as {})."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is None or schema.get("default_factory_takes_data"):
            return super().get_default_value(schema)
        value = factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            # Whole, not {}: the API server checks a default against the rules as it stands, without
            # filling in the defaults of its own fields first.
            return value.model_dump(by_alias=True, exclude_none=True, mode="json")
        return NoDefault if value is None else value


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}
            return _resolve(merged, defs)
        return {k: _resolve(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a pydantic JSON schema (with `$defs`) into a Kubernetes structural schema."""
    return _convert(_resolve(schema, schema.get("$defs", {})))


def _convert(node: dict[str, Any]) -> dict[str, Any]:
    node = {k: v for k, v in node.items() if k not in _DROP}
    default = node.get("default")
    if (
        node.get("description")
        and not isinstance(default, dict | None)
        and "Default:" not in node["description"]
    ):
        node["description"] = f"{node['description']} Default: {_show(default)}."
    if node.get("x-kubernetes-int-or-string"):
        out = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
        for key in ("description", "default"):
            if key in node:
                out[key] = node[key]
        return out
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        node = {**inner, **node}
    if "anyOf" in node:
        options = node.pop("anyOf")
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot express a union as a structural schema: {options}")
        merged = {**non_null[0], **node}
        if len(non_null) != len(options):
            merged["nullable"] = True
            if merged.get("default", "absent") is None:
                del merged["default"]
        return _convert(merged)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "enum" in node and "type" not in node:
        kinds = {type(v) for v in node["enum"]}
        node["type"] = "integer" if kinds == {int} else "string"
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):
            node[plain] = node[bound]
            node[bound] = True
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    elif isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _convert(node["additionalProperties"])
    if "properties" in node:
        node["properties"] = {k: _convert(v) for k, v in node["properties"].items()}
        node.setdefault("type", "object")
    if "items" in node:
        node["items"] = _convert(node["items"])
    if "type" not in node:
        raise ValueError(f"schema node without a type: {node}")
    return node


def _show(value: Any) -> str:
    """A default as a user writes it in YAML: bare strings, JSON for the rest."""
    return value if isinstance(value, str) else json.dumps(value)


def openapi_schema() -> dict[str, Any]:
    """The CRD's openAPIV3Schema for GraphTraining."""
    spec = structural(
        GraphTrainingSpec.model_json_schema(
            by_alias=True, mode="validation", schema_generator=_FactoryDefaults
        )
    )
    status = structural(GraphTrainingStatus.model_json_schema(by_alias=True, mode="validation"))
    return {
        "type": "object",
        "description": "A graph training job with sharded, learnable embedding tables.",
        "required": ["spec"],
        # The root's rules read metadata.name, the one metadata field CEL may see there, and, for what a
        # running training cannot take (contract/spec/updates.py), the old spec and status.
        "x-kubernetes-validations": [
            *(r.validation() for r in rules_of(GraphTraining)),
            *transition_rules(spec),
        ],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": f"Versioned schema of this object: {API_VERSION}.",
            },
            "kind": {"type": "string", "description": f"The kind of this object: {KIND}."},
            "metadata": {
                # Standard object metadata: the API server refuses anything here (a description too)
                # but name and generateName. name is declared so that a rule's fieldPath can name it;
                # the length is the API server's own limit, the tighter rule is a CEL one.
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "maxLength": 253,
                        "description": "Name of the training; its pods, services and claims are named "
                        f"after it, so at most {MAX_NAME_LENGTH} characters, a lowercase DNS label.",
                    }
                },
            },
            "spec": spec,
            "status": status,
        },
    }


# The digest of the CRD's spec, on the CRD itself: the operator compares the served CRD's with its own
# (helm installs a chart's crds/ once and never upgrades them, so a chart upgrade can leave the API
# server pruning the fields a newer operator writes). The API server adds defaults to a stored CRD's
# spec, so the operator reads this annotation rather than hashing what it is served.
DIGEST_ANNOTATION = f"{GROUP}/schema-digest"


def spec_digest(spec: dict[str, Any]) -> str:
    """sha256 of a CRD spec's canonical JSON (sorted keys), the value of DIGEST_ANNOTATION."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    spec = _crd_spec()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "graphtrain"},
            "annotations": {DIGEST_ANNOTATION: spec_digest(spec)},
        },
        "spec": spec,
    }


def _crd_spec() -> dict[str, Any]:
    return {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "kind": KIND,
            "listKind": f"{KIND}List",
            "plural": PLURAL,
            "singular": SINGULAR,
            "shortNames": list(SHORT_NAMES),
            "categories": ["graphtrain"],
        },
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Progress", "type": "string", "jsonPath": ".status.progress.summary"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    # where each role computes (kubectl get -o wide)
                    {
                        "name": "Trainers",
                        "type": "string",
                        "jsonPath": ".spec.trainers.device",
                        "priority": 1,
                    },
                    {
                        "name": "Shards",
                        "type": "string",
                        "jsonPath": ".spec.shardServers.device",
                        "priority": 1,
                    },
                ],
                "schema": {"openAPIV3Schema": openapi_schema()},
            }
        ],
    }


HEADER = "# Generated by `graphtrain crd` from contract/spec/. Do not edit: run `make crd`.\n"


def crd_yaml() -> str:
    """The CRD as YAML text, exactly as the chart stores it."""
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=100, allow_unicode=True)
