"""A child cache behind the cluster (cache.py): a replica that just became leader, its watches still
delivering what the last leader did, holds a pod its predecessor deleted and not yet the pod made
again under that name (a trainer pod keeps its name across attempts). A delete by name then removed
the pod now there: both trainers of the running attempt deleted and made again (Training ->
Restarting, their work since the last checkpoint lost) for pods that were gone already. A
child's delete carries the uid the plan observed (a precondition): the object under that name now is
not touched, and the stale entry leaves the cache. The real API server and the session's operator;
the cache is put back by hand, as that watch would have shown it.

Such a plan (it ends or restarts work on what the cache shows: Plan.confirm) is now made again on the
children listed from the API server before it is applied: nothing is deleted, the phase stays Training.
The same watch, behind with the pods missing instead, once failed a healthy training through the
operator's own tick ("the pod of rank 1 deleted while the trainers ran")."""

from __future__ import annotations

import json

import pytest

from graphtrain.operator import handlers, k8s
from tests.operator.conftest import wait_for
from tests.operator.test_operator_apiserver import SPEC, names_of, status_patch, to_training
from tests.operator.test_watched_apiserver import settled

pytestmark = pytest.mark.timeout(120)


def pods(kube, ns: str, name: str) -> dict[str, dict]:
    return {
        p: json.loads(kube("get", "pod", p, "-n", ns, "-o", "json")) for p in names_of(kube, "pod", ns, name)
    }


def _attempt_one(kube, ns: str, name: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """A training running its attempt 1 (rank 0 failed once): its pods of attempt 0 and of attempt 1."""
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    to_training(kube, ns, name)
    settled(kube, ns, name)
    before = pods(kube, ns, name)  # attempt 0
    status_patch(kube, "pod", f"{name}-trainer-0", ns, {"phase": "Failed"})

    def attempt_one() -> dict[str, dict]:
        now = pods(kube, ns, name)
        ones = [p for p, o in now.items() if o["metadata"]["labels"]["graphtrain.io/attempt"] == "1"]
        return now if sorted(ones) == sorted(before) else {}

    wait_for(attempt_one, what="the trainers of attempt 1")
    for pod in before:
        status_patch(kube, "pod", pod, ns, {"phase": "Running"})
    settled(kube, ns, name)
    return before, pods(kube, ns, name)


def _status(kube, ns: str, name: str) -> dict:
    return json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["status"]


def _kept(kube, ns: str, name: str) -> dict[str, str]:
    return {
        p: o["metadata"]["uid"]
        for p, o in pods(kube, ns, name).items()
        if not o["metadata"].get("deletionTimestamp")
    }


def test_a_stale_cache_deletes_no_pod_made_again_under_its_name(kube, operator, ns: str) -> None:
    name = "lag"
    before, now = _attempt_one(kube, ns, name)
    cache = k8s._cache
    assert cache is not None
    for pod in before:  # the cache as a lagging watch shows it: attempt 0's pods, not attempt 1's
        cache.event("Pod", "DELETED", now[pod])
        cache.event("Pod", "ADDED", before[pod])
    handlers.reconcile(ns, name)
    assert _kept(kube, ns, name) == {p: o["metadata"]["uid"] for p, o in now.items()}
    status = _status(kube, ns, name)
    assert (status["phase"], status["restarts"]) == ("Training", 1)  # not Restarting, even for a moment
    for pod in before:  # the watch catches up
        cache.event("Pod", "DELETED", before[pod])
        cache.event("Pod", "ADDED", json.loads(kube("get", "pod", pod, "-n", ns, "-o", "json")))
    assert wait_for(lambda: _status(kube, ns, name).get("phase") == "Training", what="Training again")
    assert _status(kube, ns, name).get("restarts") == 1


def test_a_cache_missing_the_running_pods_fails_nothing(kube, operator, ns: str) -> None:
    """The watch behind with attempt 1's pods not shown at all (deleted from the cache, as a relist
    that raced their creation would leave it): the operator's own tick (its reconcile on the watch's
    copy of the training) and a child event's reconcile read the rank's pod as deleted while the
    trainers ran, and failed the attempt. Both are run here while the cache lacks them."""
    name = "gap"
    _, now = _attempt_one(kube, ns, name)
    cache = k8s._cache
    assert cache is not None
    for pod in now:
        cache.event("Pod", "DELETED", now[pod])
    handlers.reconcile(ns, name, watched=True)  # the tick's
    handlers.reconcile(ns, name)
    assert _kept(kube, ns, name) == {p: o["metadata"]["uid"] for p, o in now.items()}
    status = _status(kube, ns, name)
    assert (status["phase"], status["restarts"]) == ("Training", 1), status
    for pod in now:  # the watch catches up
        cache.event("Pod", "ADDED", json.loads(kube("get", "pod", pod, "-n", ns, "-o", "json")))
    handlers.reconcile(ns, name)
    assert _status(kube, ns, name)["phase"] == "Training"
