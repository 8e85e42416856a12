"""Review of issue 17's lifecycle against the real API server: defects found by attacking it, each a
test that failed before its fix."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest

from tests.operator.conftest import get
from tests.operator.test_operator_apiserver import SPEC

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def ns(kube) -> str:
    name = f"r17-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name


def test_the_ttl_never_deletes_a_recreated_training_of_the_same_name(
    kube, kubeconfig: str, ns: str, monkeypatch
) -> None:
    """The TTL's delete is decided on an observation of the finished training; by the time it is sent,
    that training may be gone and a new one created with its name (a pipeline re-applying it). The
    delete named the training only, so it deleted the new one; as Kubernetes' own TTL controller does,
    it must hold only for the uid it judged (a precondition). No finalizer holds a training until the
    operator's reconcile is done (the cluster's garbage collector deletes its children), so a user's
    delete and create can fall between the reconcile's observation and its delete. (A stale status
    would still be written on the new training: a status patch cannot carry a uid precondition, the
    API server drops metadata there.)"""
    from graphtrain.operator import k8s
    from graphtrain.operator.reconcile import plan

    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    k8s.load_config()
    spec = SPEC.format(name="again", extra_model="").replace(
        "{backoffLimit: 1}", "{ttlSecondsAfterFinished: 0}"
    )
    kube("apply", "-n", ns, "-f", "-", input=spec)
    stale = k8s.observe(ns, "again")
    assert stale is not None
    done = (stale.now - dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    succeeded = {"type": "Succeeded", "status": "True", "reason": "Completed", "lastTransitionTime": done}
    stale.training["status"] = {
        "phase": "Succeeded",
        "completionTime": done,
        "restarts": 0,
        "conditions": [succeeded],
    }
    decided = plan(stale)
    assert [f"{a.verb} {a.key}" for a in decided.actions] == ["delete GraphTraining/again"]

    kube("delete", "gtr", "again", "-n", ns, "--wait=true", "--timeout=60s")  # by its user, meanwhile
    kube("apply", "-n", ns, "-f", "-", input=spec)  # and made again
    new = get(kube, "gtr", "again", ns)["metadata"]
    # the TTL's delete arrives late. Its stale status write is left out: on the new training it would
    # read Succeeded 5 s ago, and the session operator (watching every namespace) would then delete it by
    # its own, right, TTL decision, racing the check below (seen once in CI)
    k8s.apply(dataclasses.replace(decided, status=stale.training["status"]), stale)
    still = get(kube, "gtr", "again", ns)["metadata"]
    assert still["uid"] == new["uid"], "the new training was deleted"
    assert not still.get("deletionTimestamp"), "the new training is being deleted"
    kube("delete", "gtr", "again", "-n", ns, "--wait=false")


def test_a_failed_requeued_reconcile_is_tried_again(monkeypatch) -> None:
    """A finished training is reconciled only by its requeue (the periodic timer skips Succeeded and
    Failed): when the reconcile that was to delete it at its TTL failed (an API server restarting, a
    timeout), nothing ever tried again and the training stayed forever."""
    import queue

    from graphtrain.operator import handlers

    calls: queue.Queue = queue.Queue()
    real = handlers.reconcile

    def flaky(namespace: str, name: str) -> None:
        if (namespace, name) != ("ns", "ttl"):  # a requeue of the session's operator: as it was
            return real(namespace, name)
        calls.put(name)
        if calls.qsize() == 1:
            raise RuntimeError("the API server is away")

    monkeypatch.setattr(handlers, "reconcile", flaky)
    monkeypatch.setattr(handlers, "REQUEUE_SLACK", 0.0)
    monkeypatch.setattr(handlers, "TIMER_SECONDS", 0.1)
    handlers.requeue("ns", "ttl", 0.01)
    assert calls.get(timeout=30) == "ttl"
    assert calls.get(timeout=30) == "ttl", "never tried again"
    handlers.requeue("ns", "ttl", None)
