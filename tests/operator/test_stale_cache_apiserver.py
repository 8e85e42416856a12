"""A child cache behind the cluster (cache.py): a replica that just became leader, its watches still
delivering what the last leader did, holds a pod its predecessor deleted and not yet the pod made
again under that name (a trainer pod keeps its name across attempts). A delete by name then removed
the pod now there: both trainers of the running attempt deleted and made again (Training ->
Restarting, their work since the last checkpoint lost) for pods that were gone already. A
child's delete carries the uid the plan observed (a precondition): the object under that name now is
not touched, and the stale entry leaves the cache. The real API server and the session's operator;
the cache is put back by hand, as that watch would have shown it."""

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


def test_a_stale_cache_deletes_no_pod_made_again_under_its_name(kube, operator, ns: str) -> None:
    name = "lag"
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
    now = pods(kube, ns, name)
    cache = k8s._cache
    assert cache is not None
    for pod in before:  # the cache as a lagging watch shows it: attempt 0's pods, not attempt 1's
        cache.event("Pod", "DELETED", now[pod])
        cache.event("Pod", "ADDED", before[pod])
    handlers.reconcile(ns, name)
    after = pods(kube, ns, name)
    kept = {p: o["metadata"]["uid"] for p, o in after.items() if not o["metadata"].get("deletionTimestamp")}
    assert kept == {p: o["metadata"]["uid"] for p, o in now.items()}
    assert cache.children(ns, name)["Pod"] == []  # the stale entries forgotten, not kept for the next plan
    for pod in before:  # the watch catches up
        cache.event("Pod", "ADDED", json.loads(kube("get", "pod", pod, "-n", ns, "-o", "json")))
    restarts = lambda: json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["status"]  # noqa: E731
    assert wait_for(lambda: restarts().get("phase") == "Training", what="Training again")
    assert restarts().get("restarts") == 1
