"""The table of what a running training takes (contract/spec/updates.py) against the two that read it:
the CRD's transition rules generated from it, and the operator's refusal (refused())."""

from __future__ import annotations

import copy

import pytest

from graphtrain.contract import crd
from graphtrain.contract.conditions import Conditions, Reason, set_update_refused
from graphtrain.contract.spec import GraphTrainingSpec, parse
from graphtrain.contract.spec.enums import ConditionType
from graphtrain.contract.spec.updates import ANY_TIME, MESSAGE, OPEN, PRESENT, UPDATES, Update, refused
from tests.contract.spec_cases import GRAPHSAGE
from tests.contract.test_crd import walk


def spec_node() -> dict:
    return crd.openapi_schema()["properties"]["spec"]


def test_the_table_names_every_spec_field() -> None:
    fields = [f.alias or name for name, f in GraphTrainingSpec.model_fields.items()]
    assert sorted(UPDATES) == sorted(fields)
    assert sorted(ANY_TIME) == ["runPolicy", "suspend"]


def test_the_crd_has_one_transition_rule_per_fixed_field_and_no_other() -> None:
    """On the root, where the old status is seen (OPEN), one rule per fixed field at its path."""
    node, root = spec_node(), crd.openapi_schema()
    rules = [v for v in root["x-kubernetes-validations"] if "oldSelf" in v["rule"]]
    fixed = [k for k, v in UPDATES.items() if v is Update.fixed]
    assert [r["fieldPath"] for r in rules] == [f".spec.{k}" for k in fixed]
    for field, rule in zip(fixed, rules, strict=True):
        assert rule["message"] == MESSAGE % field and rule["message"].startswith(f"{field} is immutable ")
        assert rule["rule"].startswith(f"{OPEN} || ")  # free while suspended or refused by the operator
        if "default" in node["properties"][field] or field in node["required"]:
            assert rule["rule"] == f"{OPEN} || self.spec.{field} == oldSelf.spec.{field}", field
        else:  # may be added or removed: has() on both sides, no optionalOldSelf needed on the root
            assert f"has(self.spec.{field})" in rule["rule"], field
            assert f"has(oldSelf.spec.{field})" in rule["rule"], field
    elsewhere = [
        path
        for path, n in walk(root)
        for v in n.get("x-kubernetes-validations", [])
        if "oldSelf" in v["rule"] and path != "$"
    ]
    assert not elsewhere and not any(r.get("optionalOldSelf") for r in rules)


def test_open_reads_the_condition_the_operator_sets_when_it_refuses_an_update() -> None:
    """OPEN's words are the operator's (conditions.set_update_refused), and the list it reads is
    bounded (the API server estimates a rule's cost from maxItems)."""
    refusal = Conditions([], at="2026-12-02T16:00:00Z")
    set_update_refused(refusal, "spec.trainers cannot change")
    (cond,) = refusal.as_list()
    assert cond.reason == Reason.update_refused
    assert f"c.type == '{cond.type}' && c.reason == '{cond.reason}'" in OPEN
    status = crd.openapi_schema()["properties"]["status"]["properties"]
    assert status["conditions"]["maxItems"] == len(ConditionType)


def test_an_empty_pod_metadata_is_none_as_present_says() -> None:
    """PRESENT["podMetadata"] reads `podMetadata: {}` (stored as two empty maps) as unset: so does the
    Python side, which the operator compares."""
    assert "podMetadata" in PRESENT
    empty = copy.deepcopy(GRAPHSAGE)
    empty["spec"]["podMetadata"] = {"labels": {}, "annotations": {}}
    assert parse(empty).spec == parse(GRAPHSAGE).spec


def dumped(doc: dict) -> dict:
    return parse(doc).spec.model_dump(by_alias=True, mode="json")


@pytest.mark.parametrize(
    "change, expected",
    [
        ({}, []),
        ({"runPolicy": {"backoffLimit": 7}, "suspend": True}, []),
        ({"partition": {"parts": 3}}, ["partition"]),
        ({"trainers": {"replicas": 2}, "image": "r/gt:2", "suspend": True}, ["image", "trainers"]),
        ({"podMetadata": {}}, []),  # the same pods as none
        ({"training": {"epochs": 10}}, []),  # its default, written
    ],
)
def test_refused_names_the_fixed_fields_that_differ(change: dict, expected: list[str]) -> None:
    new = copy.deepcopy(GRAPHSAGE)
    new["spec"].update(change)
    assert refused(dumped(GRAPHSAGE), dumped(new)) == expected


def test_an_invalid_new_spec_refuses_every_fixed_field() -> None:
    assert refused(dumped(GRAPHSAGE), None) == sorted(k for k, v in UPDATES.items() if v is Update.fixed)
