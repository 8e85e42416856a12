"""The periodic tick's reconcile from the watch's copy of a training (watched.py), when that copy is
older than the training: a standby's lagging watch when it becomes leader (the other replica wrote
since), or a watch event older than the operator's own write delivered after a failed reconcile
forgot the copy (kopf's events lag its GETs); a training deleted and made again in a gap of the
watch. The status write is conditional on the copy's version, but the plan's creates and deletes came
before it: such a plan is made again on a GET first. The real API server and the session's operator;
the stale copy is put back by hand, as that watch would have shown it."""

from __future__ import annotations

import copy
import json
import time
from collections import Counter

import pytest

from graphtrain.operator import handlers
from tests.operator.conftest import wait_for
from tests.operator.test_operator_apiserver import SPEC, names_of, phase, status_patch, to_training

pytestmark = pytest.mark.timeout(120)


def reasons(kube, ns: str) -> Counter[str]:
    events = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
    return Counter(f"{e['reason']}: {e['message']}" for e in events)


def settled(kube, ns: str, name: str) -> dict:
    """The training's copy once nothing changes it: its resourceVersion the same over 1.5 s, which the
    session operator's timer (1 s) ticks through (not the work queue idle: the session's other
    trainings keep it busy in a whole run)."""

    def version() -> str:
        return json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["metadata"]["resourceVersion"]

    for _ in range(40):
        before = version()
        time.sleep(1.5)
        if version() == before:
            break
    else:
        raise AssertionError(f"{ns}/{name} kept changing for 60 s")
    handlers.reconcile(ns, name)
    copied = wait_for(lambda: handlers._watched.current((ns, name)), what="the watch's copy")
    return copy.deepcopy(copied)


def test_a_stale_copy_takes_no_transition_again(kube, operator, ns: str) -> None:
    name = "stale"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    assert wait_for(lambda: phase(kube, name, ns) == "Partitioning", what="Partitioning")
    old = settled(kube, ns, name)
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status_patch(kube, "job", f"{name}-partition", ns, done)
    assert wait_for(lambda: phase(kube, name, ns) != "Partitioning", what="past Partitioning")
    settled(kube, ns, name)
    before, status = reasons(kube, ns), json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["status"]
    handlers._watched.seen((ns, name), old)  # the copy a lagging watch showed
    handlers.reconcile(ns, name, watched=True)
    after = reasons(kube, ns)
    assert after == before, after - before
    now = json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["status"]
    assert now == status


def test_a_copy_of_a_training_deleted_and_made_again_writes_nothing_onto_the_new_one(
    kube, operator, ns: str
) -> None:
    """The copy of the training deleted (its DELETED in a gap of the watch, a standby's stale copy)
    while a new one of its name is made: the old one's plan was written onto the new one by name."""
    name = "again"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    assert wait_for(lambda: phase(kube, name, ns) == "Partitioning", what="Partitioning")
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status_patch(kube, "job", f"{name}-partition", ns, done)
    assert wait_for(lambda: phase(kube, name, ns) != "Partitioning", what="past Partitioning")
    old = settled(kube, ns, name)
    kube("delete", "gtr", name, "-n", ns, "--wait=true")
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    assert wait_for(lambda: phase(kube, name, ns) == "Partitioning", what="the new one Partitioning")
    new = settled(kube, ns, name)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    before = reasons(kube, ns)
    handlers._watched.seen((ns, name), old)
    handlers.reconcile(ns, name, watched=True)
    now = json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))
    assert now["status"] == new["status"] and reasons(kube, ns) == before


def owned_by(kube, ns: str, uid: str) -> list[str]:
    """Every labelled child in `ns` whose ownerReferences name `uid`."""
    kinds = "configmap,secret,serviceaccount,role,rolebinding,job,service,statefulset,pod,pdb"
    items = json.loads(kube("get", kinds, "-n", ns, "-l", "graphtrain.io/training", "-o", "json"))["items"]
    return sorted(
        f"{o['kind']}/{o['metadata']['name']}"
        for o in items
        if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
    )


def test_a_copy_of_a_training_deleted_and_made_again_makes_no_child_for_the_old_one(
    kube, operator, ns: str
) -> None:
    """The copy of a training that had its shard servers (Starting), deleted in a gap of the watch and
    made again (the new one Partitioning): the old copy's plan made the StatefulSet again, owned by
    the deleted training's uid, before its status write said 409 (a real garbage collector deletes
    it, after its pods started; the new training then waited for the name)."""
    name = "made"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    assert wait_for(lambda: phase(kube, name, ns) == "Partitioning", what="Partitioning")
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status_patch(kube, "job", f"{name}-partition", ns, done)
    assert wait_for(lambda: phase(kube, name, ns) == "Starting", what="Starting")
    old = settled(kube, ns, name)
    kube("delete", "gtr", name, "-n", ns, "--wait=true")
    wait_for(lambda: owned_by(kube, ns, old["metadata"]["uid"]) == [], what="the old children gone")
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    assert wait_for(lambda: phase(kube, name, ns) == "Partitioning", what="the new one Partitioning")
    new = settled(kube, ns, name)
    handlers._watched.seen((ns, name), old)
    handlers.reconcile(ns, name, watched=True)
    assert owned_by(kube, ns, old["metadata"]["uid"]) == []
    assert f"StatefulSet/{name}-shards" not in owned_by(kube, ns, new["metadata"]["uid"])
    assert json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["status"] == new["status"]


def test_a_copy_from_before_a_restart_deletes_no_trainer_of_the_new_attempt(kube, operator, ns: str) -> None:
    """A copy from before a restart (restarts 0; another replica, or this one, restarted the trainers
    since: their pods are attempt 1): its plan took the new attempt's pods for an earlier attempt's
    and deleted them, before its status write said 409."""
    name = "again"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    to_training(kube, ns, name)
    old = settled(kube, ns, name)
    assert (old["status"].get("restarts") or 0) == 0
    status_patch(kube, "pod", f"{name}-trainer-0", ns, {"phase": "Failed"})
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]

    def attempt_one() -> bool:
        pods = [
            json.loads(kube("get", "pod", p, "-n", ns, "-o", "json")) for p in names_of(kube, "pod", ns, name)
        ]
        return [
            p["metadata"]["name"] for p in pods if p["metadata"]["labels"]["graphtrain.io/attempt"] == "1"
        ] == trainers

    wait_for(attempt_one, what="the trainers of attempt 1")
    for pod in trainers:
        status_patch(kube, "pod", pod, ns, {"phase": "Running"})
    settled(kube, ns, name)
    uids = {p: json.loads(kube("get", "pod", p, "-n", ns, "-o", "json"))["metadata"]["uid"] for p in trainers}
    handlers._watched.seen((ns, name), old)
    handlers.reconcile(ns, name, watched=True)
    now = {
        p: json.loads(kube("get", "pod", p, "-n", ns, "-o", "json"))["metadata"]
        for p in names_of(kube, "pod", ns, name)
    }
    assert {p: m["uid"] for p, m in now.items() if not m.get("deletionTimestamp")} == uids
