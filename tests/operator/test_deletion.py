"""Deleting GraphTrainings against the real API server (issue 17, 3a): a training deleted before it
finished leaves no child but its retained data claim (child-deletion events must not make them
again), and a training re-created
with an earlier one's name never counts that one's leftovers (same names, same labels) as its own."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import SPEC, names_of, phase, status_patch

pytestmark = pytest.mark.timeout(240)

KINDS = (
    "configmap",
    "secret",
    "serviceaccount",
    "role",
    "rolebinding",
    "pvc",
    "job",
    "service",
    "statefulset",
    "pod",
    "networkpolicy",
    "poddisruptionbudget",
)


COMPLETE = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}


@pytest.fixture
def ns(kube) -> str:
    name = f"d-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name


def children(kube, ns: str) -> list[str]:
    out = kube("get", ",".join(KINDS), "-n", ns, "-l", "graphtrain.io/training", "-o", "name")
    return sorted(out.split())


def test_deleting_every_training_while_partitioning_leaves_no_child(kube, operator, ns: str) -> None:
    trainings = [f"p{i}" for i in range(5)]
    for name in trainings:
        kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    for name in trainings:
        assert wait_for(
            lambda name=name: phase(kube, name, ns) == "Partitioning", what=f"{name} Partitioning"
        )
        assert wait_for(lambda name=name: names_of(kube, "job", ns, name) == [f"{name}-partition"])
    assert len(children(kube, ns)) >= 8 * len(trainings)
    kube("delete", "gtr", "--all", "-n", ns, "--wait=true", "--timeout=60s")  # no finalizer: at once
    kept = [f"persistentvolumeclaim/{name}-data" for name in trainings]  # storage.whenDeleted: Retain
    assert wait_for(lambda: children(kube, ns) == kept, what="only the retained claims left")
    time.sleep(3)  # three of the operator's timer periods (1 s here) and every child event's reconcile
    assert children(kube, ns) == kept
    for name in trainings:
        assert not get(kube, "pvc", f"{name}-data", ns)["metadata"].get("ownerReferences")


def test_a_recreated_training_never_counts_an_earlier_ones_leftovers(kube, operator, ns: str) -> None:
    """Leftovers as a slow garbage collector leaves them: the earlier training's finished partition
    Job and its pod with partition stats. The new training must not take them for its own (it would
    skip partitioning and report the old stats); once they go, it makes its own Job."""
    old_uid = str(uuid.uuid4())
    owner = {"apiVersion": "graphtrain.io/v1alpha1", "kind": "GraphTraining", "name": "re", "uid": old_uid}
    labels = {"graphtrain.io/training": "re", "graphtrain.io/role": "partition"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "re-partition", "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "template": {"spec": {"containers": [{"name": "p", "image": "x"}], "restartPolicy": "Never"}}
        },
    }
    kube("apply", "-n", ns, "-f", "-", input=json.dumps(job))
    status_patch(kube, "job", "re-partition", ns, COMPLETE)
    job_owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "re-partition", "controller": True}
    job_owner["uid"] = get(kube, "job", "re-partition", ns)["metadata"]["uid"]
    stats = {"algorithm": "metis", "parts": 2, "numNodes": 1, "numEdges": 1, "cutEdges": 0}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "re-partition-old", "labels": labels, "ownerReferences": [job_owner]},
        "spec": {"containers": [{"name": "p", "image": "x"}]},
    }
    kube("apply", "-n", ns, "-f", "-", input=json.dumps(pod))
    terminated = {"terminated": {"exitCode": 0, "message": json.dumps(stats)}}
    status = {"phase": "Succeeded", "containerStatuses": [{"name": "p", "state": terminated}]}
    status_patch(kube, "pod", "re-partition-old", ns, status)
    # and a shard server of its StatefulSet, ready
    sts_owner = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "re-shards",
        "uid": str(uuid.uuid4()),
    }
    shard = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "re-shards-0",
            "labels": {"graphtrain.io/training": "re", "graphtrain.io/role": "shards"},
            "ownerReferences": [sts_owner],
        },
        "spec": {"containers": [{"name": "s", "image": "x"}]},
    }
    kube("apply", "-n", ns, "-f", "-", input=json.dumps(shard))
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    status_patch(kube, "pod", "re-shards-0", ns, ready)

    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="re", extra_model=""))
    assert wait_for(lambda: phase(kube, "re", ns) == "Partitioning", what="Partitioning")
    time.sleep(3)  # timer reconciles: still partitioning, the old Job's success not taken
    training = get(kube, "gtr", "re", ns)
    assert training["status"]["phase"] == "Partitioning" and "partition" not in training["status"]
    kube("delete", "job", "re-partition", "-n", ns)  # the collector, late (the shard pod stays)

    def own_job() -> str:
        jobs = [get(kube, "job", n, ns) for n in names_of(kube, "job", ns, "re")]
        uid = training["metadata"]["uid"]
        mine = [j for j in jobs if any(r["uid"] == uid for r in j["metadata"]["ownerReferences"])]
        return mine[0]["metadata"]["uid"] if mine else ""

    job_uid = wait_for(own_job, what="the new training's own partition Job")
    job_owner["uid"] = job_uid
    pod["metadata"]["name"] = "re-partition-new"
    kube("apply", "-n", ns, "-f", "-", input=json.dumps(pod))
    status_patch(kube, "pod", "re-partition-new", ns, status)
    status_patch(kube, "job", "re-partition", ns, COMPLETE)
    assert wait_for(lambda: phase(kube, "re", ns) == "Starting", what="Starting")
    time.sleep(2)
    shards = get(kube, "gtr", "re", ns)["status"]["shards"]
    assert [s["state"] for s in shards] == ["Pending", "Pending"], "the old StatefulSet's ready pod counted"


def test_a_training_made_again_at_once_keeps_its_own_children_and_tick(kube, operator, ns: str) -> None:
    """Deleted and made again under its name at once: the new one's watch events are on another of
    kopf's workers (one per uid), so the old one's end may come after them. It deletes the old one's
    children only (by uid); the new one's requeue, metrics and tick are its own (they were by name)."""
    from graphtrain.operator import handlers

    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="again", extra_model=""))
    assert wait_for(lambda: names_of(kube, "job", ns, "again") == ["again-partition"], what="the old job")
    old = get(kube, "gtr", "again", ns)["metadata"]["uid"]
    kube("delete", "gtr", "again", "-n", ns, "--wait=false")
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="again", extra_model=""))
    new = get(kube, "gtr", "again", ns)["metadata"]["uid"]
    assert new != old

    def owners() -> set[str]:
        out = kube("get", ",".join(KINDS), "-n", ns, "-l", "graphtrain.io/training=again", "-o", "json")
        refs = [r for o in json.loads(out)["items"] for r in o["metadata"].get("ownerReferences") or []]
        return {r["uid"] for r in refs if r["kind"] == "GraphTraining"}

    assert wait_for(lambda: owners() == {new} and "again-partition" in names_of(kube, "job", ns, "again"))
    assert wait_for(lambda: handlers._known.get((ns, "again")) == {new: handlers.DUE}, what="ticked")
    time.sleep(2)  # timer periods: the new one's children stay, it stays on the tick and exported
    assert owners() == {new} and handlers._known.get((ns, "again")) == {new: handlers.DUE}
    assert (ns, "again") in handlers.metrics()._statuses


def test_a_finished_training_deleted_in_a_watch_gap_is_forgotten(operator, ns: str, monkeypatch) -> None:
    """kopf re-lists after a watch gap and makes up no DELETED: a finished training deleted in the gap
    was never ticked (finished) nor forgotten, its metrics exported for the operator's life. A sweep of
    the tick (every SWEEP_PERIODS) reconciles every one known: this one, gone, is forgotten."""
    from graphtrain.operator import handlers

    monkeypatch.setattr(handlers, "SWEEP_PERIODS", 2)
    key = (ns, "gone")
    handlers._known[key] = {str(uuid.uuid4()): handlers.IDLE}  # finished, its DELETED lost
    handlers.metrics().training(ns, "gone", {}, {"phase": "Failed"})
    assert key in handlers.metrics()._statuses
    assert wait_for(lambda: key not in handlers._known and key not in handlers.metrics()._statuses)
