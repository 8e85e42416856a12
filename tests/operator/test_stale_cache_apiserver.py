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
import time

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


def _apply(kube, ns: str, name: str, run_policy: str) -> None:
    """SPEC with its runPolicy replaced."""
    spec = SPEC.format(name=name, extra_model="").replace("{backoffLimit: 1}", "{" + run_policy + "}")
    kube("apply", "-n", ns, "-f", "-", input=spec)


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
    behind = lambda: handlers.metrics().registry.get_sample_value(  # noqa: E731
        "graphtrain_operator_cache_behind_total"
    )
    before = behind()
    handlers.reconcile(ns, name, watched=True)  # the tick's
    handlers.reconcile(ns, name)
    assert _kept(kube, ns, name) == {p: o["metadata"]["uid"] for p, o in now.items()}
    status = _status(kube, ns, name)
    assert (status["phase"], status["restarts"]) == ("Training", 1), status
    assert behind() >= before + 2  # each of the two said so (a WARNING line too)
    for pod in now:  # the watch catches up
        cache.event("Pod", "ADDED", json.loads(kube("get", "pod", pod, "-n", ns, "-o", "json")))
    handlers.reconcile(ns, name)
    assert _status(kube, ns, name)["phase"] == "Training"


def test_a_trainer_pod_deleted_mid_run_restarts_the_attempt_at_once(kube, operator, ns: str) -> None:
    """The confirm path's other side: a rank's pod really deleted while the trainers ran (kubectl delete
    pod), the cache in use, restarts every rank in the next attempt, in seconds, not later."""
    name = "gone"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    to_training(kube, ns, name)
    settled(kube, ns, name)
    assert k8s._cache is not None and k8s._cache.synced(timeout=0)  # reconciles read the cache
    before = _kept(kube, ns, name)
    kube("delete", "pod", f"{name}-trainer-1", "-n", ns, "--wait=false")

    def attempt_one() -> bool:
        now = pods(kube, ns, name)
        labels = {p: o["metadata"]["labels"]["graphtrain.io/attempt"] for p, o in now.items()}
        return labels == dict.fromkeys(before, "1") and _status(kube, ns, name).get("restarts") == 1

    wait_for(attempt_one, timeout=10, what="the attempt restarted")
    assert not set(_kept(kube, ns, name).values()) & set(before.values())  # every rank made again
    events = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
    said = [e["message"] for e in events if e["reason"] == "TrainerFailed"]
    assert said == ["the pod of rank 1 deleted while the trainers ran; restart 1/1 from the last checkpoint"]


def test_a_cache_behind_on_the_heartbeats_restarts_no_stalled_rank(kube, operator, ns: str) -> None:
    """runPolicy.stallPolicy Restart: both pods started long ago, both ranks reported just now; the
    cache still holds the progress ConfigMap from before their reports (its watch behind). The stall
    read on it is made again on the listed ConfigMap: no restart."""
    name = "beat"
    _apply(kube, ns, name, "backoffLimit: 1, stallTimeoutSeconds: 60, stallPolicy: Restart")
    to_training(kube, ns, name)
    cm = f"{name}-progress"
    quiet = json.loads(kube("get", "configmap", cm, "-n", ns, "-o", "json"))  # no report yet
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    beats = {f"rank-{r}": json.dumps({"step": 5, "updatedAt": now}) for r in range(2)}
    kube("patch", "configmap", cm, "-n", ns, "--type=merge", "-p", json.dumps({"data": beats}))
    cache = k8s._cache
    assert cache is not None
    maps = lambda: cache.children(ns, name)["ConfigMap"]  # noqa: E731
    wait_for(lambda: any((c.get("data") or {}).get("rank-1") for c in maps()), what="the reports cached")
    long_ago = {"phase": "Running", "startTime": "2020-01-01T00:00:00Z"}
    for rank in range(2):  # started long before the stall timeout: silent but for their reports
        status_patch(kube, "pod", f"{name}-trainer-{rank}", ns, long_ago)
    settled(kube, ns, name)
    kept = _kept(kube, ns, name)
    cache.event("ConfigMap", "MODIFIED", quiet)  # the watch behind: the reports not shown
    handlers.reconcile(ns, name, watched=True)  # the tick's
    handlers.reconcile(ns, name)
    assert _kept(kube, ns, name) == kept
    status = _status(kube, ns, name)
    assert (status["phase"], status.get("restarts", 0)) == ("Training", 0), status
    cache.event("ConfigMap", "MODIFIED", json.loads(kube("get", "configmap", cm, "-n", ns, "-o", "json")))


def test_an_end_keeps_a_finished_pod_the_cache_shows_running(kube, operator, ns: str) -> None:
    """backoffLimit 0: rank 0 fails, so the training ends, and cleanPodPolicy Running stops the trainer
    pods not finished. Rank 1 has finished, but the cache still shows it Running (its watch behind):
    the clean-up is made again on the listed pods, and rank 1's pod stays for `kubectl logs`."""
    name = "kept"
    _apply(kube, ns, name, "backoffLimit: 0")
    to_training(kube, ns, name)
    settled(kube, ns, name)
    rank1 = f"{name}-trainer-1"
    running = pods(kube, ns, name)[rank1]
    cache = k8s._cache
    assert cache is not None
    status_patch(kube, "pod", rank1, ns, {"phase": "Succeeded"})
    shown = lambda: [p for p in cache.children(ns, name)["Pod"] if p["metadata"]["name"] == rank1]  # noqa: E731
    wait_for(lambda: shown() and shown()[0]["status"].get("phase") == "Succeeded", what="rank 1 cached")
    cache.event("Pod", "MODIFIED", running)  # the watch behind: rank 1 as it was
    status_patch(kube, "pod", f"{name}-trainer-0", ns, {"phase": "Failed"})
    assert wait_for(lambda: _status(kube, ns, name).get("phase") == "Failed", what="Failed")
    handlers.reconcile(ns, name)  # and once more on the same cache: still kept
    kept = pods(kube, ns, name)
    assert rank1 in kept and not kept[rank1]["metadata"].get("deletionTimestamp")
    assert kept[rank1]["status"]["phase"] == "Succeeded"
