"""The CRD's transition rules on a real API server: a change a running training cannot take is refused
at admission, with the message naming the field, from the table the operator's UpdateRefused reads
(contract/spec/updates.py); what it can take, and a spec re-applied unchanged, are accepted.

The CRD being accepted at all (the API server refuses rules whose estimated cost is too high) is the
`kube` fixture's first step; test_the_served_crd_carries_the_rules says those rules are in it.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable

import pytest
import yaml

from graphtrain.contract.spec import check
from graphtrain.contract.spec.updates import MESSAGE, UPDATES, Update
from tests.contract.spec_cases import GRAPHSAGE, TYPED_EMB, edit
from tests.operator.conftest import get

Kube = Callable[..., str]


@pytest.fixture
def ns(kube: Kube) -> str:
    """A namespace of the test's own, which the session operator (conftest.py) leaves alone: these tests
    write the status the rules read, as an operator would (it wrote appliedSpecHash and conditions of
    a training it reconciled, and the rules then held what a test meant to admit)."""
    name = f"rules-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name


# A valid change of each fixed field, as a merge patch of the spec (mode and inference go together)
INFERENCE = {"mode": "inference", "inference": {"checkpoint": "ckpt"}}
CHANGES: dict[str, dict] = {
    "graph": {"graph": {"dataset": "wordnet", "reverseEdges": True}},
    "partition": {"partition": {"parts": 3}},
    "embeddings": {"embeddings": [{"name": "node", "dim": 32, "optimizer": {"kind": "adam", "lr": 0.003}}]},
    "task": {"task": {"kind": "nodeClassification"}},
    "model": {"model": {"hiddenDim": 64}},
    "training": {"training": {"epochs": 2}},
    "shardServers": {"shardServers": {"nodeSelector": {"pool": "b"}}},
    "trainers": {"trainers": {"replicas": 2}},
    "storage": {"storage": {"size": "5Gi"}},
    "placement": {"placement": {"locality": "none"}},
    "podMetadata": {"podMetadata": {"labels": {"team": "a"}}},
    "scheduling": {"scheduling": {"queue": "q"}},
    "mode": INFERENCE,
    "inference": INFERENCE,
    "image": {"image": "registry.example/graphtrain:2"},
}
FIXED = [k for k, v in UPDATES.items() if v is Update.fixed]


def merged(spec: dict, patch: dict) -> dict:
    """`spec` with a JSON merge patch applied (RFC 7386), as the API server applies it."""
    out = copy.deepcopy(spec)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merged(out[k], v)
        else:
            out[k] = v
    return out


def create(kube: Kube, ns: str, name: str, **spec: object) -> dict:
    """GRAPHSAGE as `name` (its spec updated with `spec`), applied as a user does."""
    doc = copy.deepcopy(GRAPHSAGE)
    doc["metadata"]["name"] = name
    doc["spec"].update(spec)
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))
    return doc


def patch(kube: Kube, ns: str, name: str, spec: dict) -> str:
    """A merge patch of the training's spec: kubectl's output, or its refusal (check=False)."""
    body = json.dumps({"spec": spec})
    return kube("patch", "gtr", name, "-n", ns, "--type=merge", "-p", body, check=False)


def refused(field: str) -> str:
    """The API server's words for a refused change of `field`."""
    return f"spec.{field}: Invalid value: {MESSAGE % field}"


def test_every_fixed_field_has_a_change_here() -> None:
    assert sorted(CHANGES) == sorted(FIXED)
    for field, change in CHANGES.items():  # valid: refused for the change alone, by no other rule
        assert not check(merged(GRAPHSAGE, {"spec": change}))[1], field


@pytest.mark.parametrize("field", FIXED)
def test_a_change_of_a_fixed_field_is_refused_with_its_message(kube: Kube, ns: str, field: str) -> None:
    create(kube, ns, "gt")
    before = get(kube, "gtr", "gt", ns)
    said = patch(kube, ns, "gt", CHANGES[field])
    assert refused(field) in said, said
    assert get(kube, "gtr", "gt", ns)["spec"] == before["spec"]


@pytest.mark.parametrize(
    "change",
    [
        {"runPolicy": {"backoffLimit": 5, "activeDeadlineSeconds": 3600}},
        {"suspend": True},
        {"podMetadata": {}},  # empty: no label and no annotation, as before
        {"podMetadata": {"annotations": {}}},
        {"task": None, "image": None, "scheduling": None},  # unset stays unset
        {"partition": {"algorithm": None}},  # removed: its default, metis, as before
        {"training": None},  # all defaults, as stored
    ],
    ids=["runPolicy", "suspend", "empty-podMetadata", "empty-annotations", "nulls", "default", "defaults"],
)
def test_a_change_a_running_training_takes_is_accepted(kube: Kube, ns: str, change: dict) -> None:
    create(kube, ns, "gt")
    said = patch(kube, ns, "gt", change)
    assert "patched" in said, said


def test_an_unchanged_reapply_of_a_full_spec_is_accepted(kube: Kube, ns: str) -> None:
    """The stored object (every default filled in) applied, replaced and created again by its own
    document: no false refusal from the defaults the API server added."""
    doc = create(kube, ns, "gt", podMetadata={"labels": {"team": "a"}}, image="registry.example/gt:1")
    stored = get(kube, "gtr", "gt", ns)
    full = {"apiVersion": stored["apiVersion"], "kind": stored["kind"], "metadata": {"name": "gt"}}
    full["spec"] = stored["spec"]
    assert stored["spec"]["training"]["fanouts"] == [10, 25]  # the defaults are there
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(full))
    version = get(kube, "gtr", "gt", ns)["metadata"]["resourceVersion"]  # the apply's
    meta = {"name": "gt", "resourceVersion": version}
    nulls = {"task": None, "scheduling": None}  # stored as written (nullable): unset to the rules too
    replaced = {**full, "metadata": meta, "spec": {**full["spec"], **nulls}}
    kube("replace", "-n", ns, "-f", "-", input=yaml.safe_dump(replaced))
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))
    assert get(kube, "gtr", "gt", ns)["spec"] == {**stored["spec"], **nulls}


def test_adding_or_removing_an_unset_field_is_a_change(kube: Kube, ns: str) -> None:
    create(kube, ns, "gt", image="registry.example/gt:1")
    assert refused("image") in patch(kube, ns, "gt", {"image": None})
    assert refused("partition") in patch(kube, ns, "gt", {"partition": None})  # parts 2 -> the default
    assert refused("podMetadata") in patch(kube, ns, "gt", {"podMetadata": {"annotations": {"a": "b"}}})


def test_a_suspended_training_takes_any_change(kube: Kube, ns: str) -> None:
    """Created suspended, it has not run (no status.appliedSpecHash): it may change before it first
    runs, and the resumption may come in the same update."""
    create(kube, ns, "gt", suspend=True)
    for field in ("graph", "embeddings", "trainers", "shardServers"):
        said = patch(kube, ns, "gt", CHANGES[field])
        assert "patched" in said, said
    said = patch(kube, ns, "gt", {**CHANGES["partition"], "suspend": False})
    assert "patched" in said, said
    assert refused("trainers") in patch(kube, ns, "gt", {"trainers": {"replicas": 1}})
    said = patch(kube, ns, "gt", {"suspend": True, "trainers": {"replicas": 1}})  # not in one update
    assert refused("trainers") in said, said


def set_status(kube: Kube, ns: str, name: str, status: dict) -> None:
    """A merge patch of the training's status, as the operator writes it (users may not: the chart's
    roles grant graphtrainings/status get only)."""
    body = json.dumps({"status": status})
    kube("patch", "gtr", name, "-n", ns, "--subresource=status", "--type=merge", "-p", body)


def test_a_suspended_training_that_ran_takes_no_fixed_change(kube: Kube, ns: str) -> None:
    """Its status carries appliedSpecHash once it ran: suspended then, its spec is held as while it
    runs (it used to be admitted, and refused only by the operator, in status); runPolicy and suspend
    still change, and the revert while the operator refuses an update is still admitted."""
    create(kube, ns, "gt")
    set_status(kube, ns, "gt", {"appliedSpecHash": "0123abcd"})
    assert "patched" in patch(kube, ns, "gt", {"suspend": True})
    for field in ("graph", "embeddings", "trainers"):
        assert refused(field) in patch(kube, ns, "gt", CHANGES[field])
    assert "patched" in patch(kube, ns, "gt", {"runPolicy": {"backoffLimit": 4}, "suspend": False})
    set_status(kube, ns, "gt", {"appliedSpecHash": None})  # removed: as if it never ran
    assert "patched" in patch(kube, ns, "gt", {"suspend": True})
    assert "patched" in patch(kube, ns, "gt", CHANGES["trainers"])


def test_a_training_whose_update_is_refused_may_go_back_to_the_spec_it_runs(kube: Kube, ns: str) -> None:
    """A change admitted while suspended (or before the CRD had these rules) that the operator refused
    (SpecValid False / UpdateRefused) leaves the stored spec unlike the one that runs: `kubectl apply`
    of the user's own file, the revert, is admitted while the operator says so, and only then."""
    doc = create(kube, ns, "gt")
    for change in ({"suspend": True}, CHANGES["embeddings"], {"suspend": False}):  # resumed: it ran before
        said = patch(kube, ns, "gt", change)
        assert "patched" in said, said
    refusal = {
        "type": "SpecValid",
        "status": "False",
        "reason": "UpdateRefused",
        "message": "spec.embeddings",
    }
    status = {"status": {"conditions": [{**refusal, "lastTransitionTime": "2026-12-02T16:00:00Z"}]}}
    body = json.dumps(status)
    kube("patch", "gtr", "gt", "-n", ns, "--subresource=status", "--type=merge", "-p", body)
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))  # the revert
    assert [t["dim"] for t in get(kube, "gtr", "gt", ns)["spec"]["embeddings"]] == [16]
    valid = {**status["status"]["conditions"][0], "status": "True", "reason": "Valid", "message": ""}
    body = json.dumps({"status": {"conditions": [valid]}})
    kube("patch", "gtr", "gt", "-n", ns, "--subresource=status", "--type=merge", "-p", body)
    assert refused("embeddings") in patch(kube, ns, "gt", CHANGES["embeddings"])  # valid again: held


def _largest(s: dict) -> None:
    """Every list and map a rule reads at its bound (64 node and edge types of 64 features, a table
    over them all, 32 tolerations and selectors per role, 64 labels and annotations), with paths long
    enough for the object to near etcd's 1.5 MiB request limit."""
    types = [f"t{i:02d}" for i in range(64)]
    feats = [f"feature_{k:03d}" for k in range(64)]

    def files(i: int, n: int) -> list[str]:
        return [f"data/{i:02d}/{j:02d}-{'x' * 1400}.csv" for j in range(n)]

    s["graph"] = {
        "nodes": [{"type": t, "files": files(i, 9), "features": feats} for i, t in enumerate(types)],
        "edges": [
            {"relation": [t, f"r{i}", types[i - 1]], "files": files(i, 4), "features": feats}
            for i, t in enumerate(types)
        ],
    }
    s["embeddings"][0]["nodeTypes"] = types
    keys = [f"example.com/k{i:02d}" for i in range(64)]
    tolerations = [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in keys[:32]]
    for role in ("partition", "shardServers", "trainers"):
        s[role] = {"tolerations": tolerations, "nodeSelector": dict.fromkeys(keys[:32], "pool")}
    s["podMetadata"] = {"labels": dict.fromkeys(keys, "a"), "annotations": dict.fromkeys(keys, "y" * 1900)}


def test_the_largest_spec_is_updated_within_the_runtime_cost_budget(kube: Kube, ns: str) -> None:
    """Every rule runs on every update, within one runtime budget per request (not the install-time
    estimate): a spec near etcd's limit re-sent whole, relabelled and given a new runPolicy is
    admitted, and a fixed field's change is refused by its own rule, not for the budget."""
    largest = edit(TYPED_EMB, _largest)
    assert not check(largest)[1] and len(json.dumps(largest)) > 1_400_000
    kube("create", "-n", ns, "-f", "-", input=json.dumps(largest))  # apply's annotation would pass 256 KiB
    name = largest["metadata"]["name"]
    stored = kube("get", "gtr", name, "-n", ns, "-o", "json")  # JSON: PyYAML reads eps 1e-08 as a string
    kube("replace", "-n", ns, "-f", "-", input=stored)
    kube("label", "gtr", name, "-n", ns, "team=a")
    assert "patched" in patch(kube, ns, name, {"runPolicy": {"backoffLimit": 5}})
    said = patch(kube, ns, name, {"image": "registry.example/gt:2"})
    assert refused("image") in said and "budget" not in said, said


def test_the_served_crd_carries_the_rules(kube: Kube) -> None:
    served = json.loads(kube("get", "crd", "graphtrainings.graphtrain.io", "-o", "json"))
    schema = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    paths = [v["fieldPath"] for v in schema["x-kubernetes-validations"] if "oldSelf" in v["rule"]]
    assert paths == [f".spec.{k}" for k in FIXED]
