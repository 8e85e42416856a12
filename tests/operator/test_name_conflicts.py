"""A child's name that holds an object the training does not own (an attack review's finding).

Children are observed by label and owner, so a Secret, ConfigMap or claim of a child's name made by
someone else was invisible: its create answered 409, read as an earlier reconcile's, and the operator
mounted the foreign Secret into shard-server pods running the training author's spec.image (and a
foreign claim into the partition Job). Now a create's 409 reads the object (k8s.NameTaken): a name
holding another's object holds the training with SpecValid False / NameConflict, making nothing more,
until the name is free."""

from __future__ import annotations

import json

from graphtrain.operator.k8s import whose
from graphtrain.operator.reconcile import plan
from tests.operator.conftest import get, wait_for
from tests.operator.reconcile_cluster import NAME, Cluster, cond, training
from tests.operator.test_operator_apiserver import SPEC, names_of

UID = "u-1"


def test_a_taken_name_holds_the_training_making_nothing() -> None:
    c = Cluster(training())
    obs = c.observe()
    obs.taken = {f"Secret/{NAME}-token": "exists and is not this training's"}
    p = plan(obs, token="t0k3n")
    assert p.actions == [] and p.status["phase"] == "Pending"
    said = cond(p, "SpecValid")
    assert (said["status"], said["reason"]) == ("False", "NameConflict")
    assert said["message"].startswith(f"Secret {NAME}-token exists and is not this training's: ")
    assert "delete that object, or create the GraphTraining under another name" in said["message"]
    assert [(e.type.value, e.reason) for e in p.events if e.reason == "NameConflict"] == [
        ("Warning", "NameConflict")
    ]
    assert "appliedSpecHash" not in p.status  # nothing was applied
    # once the name is free, the same training starts as any other
    p = c.step()
    assert cond(p, "SpecValid")["status"] == "True" and p.actions


def obj(kind: str, **meta: object) -> dict:
    return {"kind": kind, "metadata": {"name": f"{NAME}-x", **meta}}


def test_whose_tells_the_trainings_own_from_anothers() -> None:
    mine = [{"kind": "GraphTraining", "name": NAME, "uid": UID}]
    assert whose(obj("Secret", ownerReferences=mine), NAME, UID) is None
    retained = {"kind": "PersistentVolumeClaim", "metadata": {"name": f"{NAME}-data"}}
    retained["metadata"]["labels"] = {"graphtrain.io/training": NAME}
    assert whose(retained, NAME, UID) is None  # storage.whenDeleted Retain: the name's training uses it
    earlier = [{"kind": "GraphTraining", "name": NAME, "uid": "u-0"}]  # the collector removes it
    assert whose(obj("Secret", ownerReferences=earlier), NAME, UID) is None
    other = [{"kind": "GraphTraining", "name": "other", "uid": "u-2"}]
    assert whose(obj("Secret", ownerReferences=other), NAME, UID) == "exists and is not this training's"
    assert whose(obj("Secret"), NAME, UID) == "exists and is not this training's"
    labelled = obj("ConfigMap", labels={"graphtrain.io/training": NAME})  # a label is not ownership
    assert whose(labelled, NAME, UID) == "exists and is not this training's"


def test_a_foreign_secret_of_the_token_name_is_never_mounted(kube, operator, ns: str) -> None:
    """Against the API server and the operator: someone's Secret named <name>-token stops the training
    before anything that would mount it (the children made before its create, the config map, are the
    training's own); deleted, the training starts with a token Secret of its own."""
    name = "taken"
    kube("create", "secret", "generic", f"{name}-token", "-n", ns, "--from-literal=token=someone-elses")
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))

    def conflict() -> dict | None:
        conds = (get(kube, "graphtraining", name, ns).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["reason"] == "NameConflict"), None)

    said = wait_for(conflict, what="SpecValid False / NameConflict")
    assert said["type"] == "SpecValid" and said["status"] == "False"
    assert said["message"].startswith(f"Secret {name}-token exists and is not this training's")
    for kind in ("job", "statefulset", "pod", "persistentvolumeclaim"):  # nothing that would mount it
        assert names_of(kube, kind, ns, name) == [], kind
    secret = json.loads(kube("get", "secret", f"{name}-token", "-n", ns, "-o", "json"))
    assert not secret["metadata"].get("ownerReferences")  # left as it was, never taken over
    kube("delete", "secret", f"{name}-token", "-n", ns)
    wait_for(lambda: names_of(kube, "job", ns, name) == [f"{name}-partition"], what="the partition job")
    mine = json.loads(kube("get", "secret", f"{name}-token", "-n", ns, "-o", "json"))
    assert mine["metadata"]["ownerReferences"][0]["kind"] == "GraphTraining"
    kube("delete", "graphtraining", name, "-n", ns, "--wait=false")
