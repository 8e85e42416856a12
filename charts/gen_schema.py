"""Writes the definitions of values.schema.json that the operator's config parser takes from the spec's
models (a toleration, the tolerations of a role, an affinity), so that `helm install` refuses what the
operator would refuse at start (and crash-loop on) instead of installing it.

The models' own JSON schema gives the fields, their types, enums and lengths; the rules the models check
across fields (contract/spec/'s add_rules) have no JSON schema of their own and are written below
as if/then, one per rule: a rule added to a model without one here stops this script.

`make chart-schema` runs it; `--check` exits 1 when the committed file differs from what it writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from graphtrain.contract.spec import MAX_TOLERATIONS, Affinity, Toleration
from graphtrain.contract.spec.rules import rules_of

SCHEMA = Path(__file__).resolve().parent / "graphtrain" / "values.schema.json"
# a taint's key: a label key ([prefix/]name), or "" (with operator Exists)
LABEL_KEY_OR_EMPTY = (
    r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
)

# The cross-field rules of Toleration as JSON Schema, by rule name.
TOLERATION_RULES: dict[str, dict[str, Any]] = {
    "toleration-exists-without-value": {
        "if": {"required": ["operator"], "properties": {"operator": {"const": "Exists"}}},
        "then": {"properties": {"value": {"enum": ["", None]}}},
    },
    "toleration-key-or-exists": {
        "if": {"not": {"required": ["operator"], "properties": {"operator": {"const": "Exists"}}}},
        "then": {"required": ["key"], "properties": {"key": {"type": "string", "minLength": 1}}},
    },
    "toleration-seconds-no-execute": {
        "if": {"required": ["tolerationSeconds"], "properties": {"tolerationSeconds": {"type": "integer"}}},
        "then": {"required": ["effect"], "properties": {"effect": {"const": "NoExecute"}}},
    },
}


def _clean(node: Any) -> Any:
    """The model's JSON schema without what JSON Schema validation does not use (titles, defaults, the
    CRD's x-kubernetes-* extensions; the rules come back as if/then)."""
    if isinstance(node, dict):
        return {
            k: _clean(v)
            for k, v in node.items()
            if k not in {"title", "default"} and not k.startswith("x-kubernetes-")
        }
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def _with_rules(model: type, schema: dict[str, Any], rules: dict[str, dict[str, Any]]) -> dict[str, Any]:
    names = [r.name for r in rules_of(model)]
    missing = sorted(set(names) - set(rules))
    if missing:
        raise SystemExit(f"gen_schema.py: no JSON Schema for the rules {missing} of {model.__name__}")
    if names:
        schema["allOf"] = [rules[name] for name in names]
    return schema


def definitions() -> dict[str, Any]:
    toleration = _clean(Toleration.model_json_schema(by_alias=True))
    toleration["properties"]["key"]["anyOf"][0]["pattern"] = LABEL_KEY_OR_EMPTY
    toleration["description"] += " (generated from contract/spec/ by charts/gen_schema.py)"
    affinity = _clean(Affinity.model_json_schema(by_alias=True))
    affinity["description"] += " (generated from contract/spec/ by charts/gen_schema.py)"
    return {
        "toleration": _with_rules(Toleration, toleration, TOLERATION_RULES),
        "tolerations": {
            "type": "array",
            "items": {"$ref": "#/definitions/toleration"},
            "maxItems": MAX_TOLERATIONS,
        },
        "affinity": _with_rules(Affinity, affinity, {}),
    }


def render(text: str) -> str:
    """values.schema.json's text with the generated definitions in place of its own."""
    schema = json.loads(text)
    schema["definitions"].update(definitions())
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str]) -> int:
    current = SCHEMA.read_text()
    wanted = render(current)
    if argv == ["--check"]:
        if wanted != current:
            print(f"{SCHEMA} is out of date: run `make chart-schema`", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: gen_schema.py [--check]", file=sys.stderr)
        return 2
    SCHEMA.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
