"""Edges of issue 17's lifecycle found by attacking the pure decisions (reconcile.plan) in review, each a
case that failed before its fix."""

from __future__ import annotations

import datetime as dt

from graphtrain.contract import conditions
from graphtrain.operator import stages
from graphtrain.operator.observation import Observed
from graphtrain.operator.reconcile import plan
from tests.operator.reconcile_cluster import NAME, NOW, context, observed, sts, trainer, training


def test_a_rank_is_silent_from_its_container_start_not_from_its_image_pull() -> None:
    """A pod's status.startTime is when the kubelet took it, before the image pull (a cold CUDA image
    pulls for minutes); the rank can report only once its container runs. Counted from startTime,
    a pull longer than stallTimeoutSeconds made a rank that had just started 'silent', and with
    stallPolicy Restart the restart of a fresh world used up backoffLimit."""
    pulled = (NOW - dt.timedelta(minutes=11)).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"running": {"startedAt": (NOW - dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")}}
    ranks = [trainer(r, "Running", start=pulled, containerStatuses=[{"state": running}]) for r in (0, 1)]
    o = observed(sts(2), *ranks, **{"runPolicy.stallPolicy": "Restart"})  # stallTimeoutSeconds 60
    conds = conditions.Conditions([], "T")
    step = stages.trainers_stage(context(o), conds)
    assert step.phase is not None and step.phase.value == "Training" and step.actions == []
    stalled = conds.get(conditions.ConditionType.stalled)
    assert stalled is not None and stalled.status == "False", stalled


def test_a_training_failed_for_its_spec_is_deleted_at_its_ttl_too() -> None:
    """ttlSecondsAfterFinished deletes a Failed training; one that failed for a rule only the Python
    side checks (a nodeSelector key, which the CRD cannot constrain) never got a requeue nor its delete,
    and the periodic timer skips Failed trainings: it stayed forever."""
    body = training(**{"runPolicy.ttlSecondsAfterFinished": 30, "trainers.nodeSelector": {"bad key!": "x"}})
    first = plan(Observed(body, now=NOW))
    assert first.status["phase"] == "Failed" and first.actions == []
    assert first.requeue_after == 30
    body["status"] = first.status
    later = plan(Observed(body, now=NOW + dt.timedelta(seconds=30)))
    assert [f"{a.verb} {a.key}" for a in later.actions] == [f"delete GraphTraining/{NAME}"]
    assert later.actions[0].obj["metadata"]["uid"] == "uid-1"


def test_a_suspended_training_reports_no_shard_server() -> None:
    """The status is merge-patched (k8s.apply): a field the plan leaves out keeps its last value. While
    suspended there is no shard server, yet status.shards went on saying each was Ready."""
    from tests.operator.reconcile_cluster import Cluster
    from tests.operator.reconcile_cluster import to_training as run_to_training

    c = Cluster(training())
    run_to_training(c)
    c.trainers("Running")
    assert [s["state"] for s in c.step().status["shards"]] == ["Ready", "Ready"]
    c.body["spec"]["suspend"] = True
    p = c.step()
    assert p.status["phase"] == "Suspended"
    assert "shards" in p.status and p.status["shards"] is None  # None: the merge patch removes it


def test_a_suspension_seen_after_every_trainer_succeeded_does_not_undo_the_success() -> None:
    """The suspend stage ran before the trainers stage: a suspension arriving after the last rank
    finished but before the operator saw it deleted the Succeeded pods and, on resumption, trained
    again from the last checkpoint."""
    from tests.operator.reconcile_cluster import Cluster
    from tests.operator.reconcile_cluster import to_training as run_to_training

    c = Cluster(training())
    run_to_training(c)
    c.trainers("Succeeded")
    c.body["spec"]["suspend"] = True
    p = c.step()
    assert p.status["phase"] == "Succeeded"
    assert not any(a.verb == "delete" and a.obj["kind"] == "Pod" for a in p.actions)


def test_a_finished_training_takes_rank_0s_last_report() -> None:
    """The trainers' end decides Succeeded; rank 0's final report (the test metric) can reach the
    progress ConfigMap after that reconcile: a finished training must still take it, or its status
    keeps the last validation figure forever (seen in the shard-fault test: epoch 90, val_mrr)."""
    from tests.operator.reconcile_cluster import progress

    final = {"epoch": 100, "epochs": 100, "step": 900, "evalMetric": "test_mrr", "evalValue": 0.44}
    done = {
        "phase": "Succeeded",
        "completionTime": "2026-01-01T00:00:00Z",
        "progress": {"epoch": 90},
        "conditions": [
            {"type": "Succeeded", "status": "True", "reason": "Completed", "lastTransitionTime": "T0"}
        ],
    }
    o = observed(progress(progress=final), status=done)
    p = plan(o)
    assert p.status["phase"] == "Succeeded"
    assert p.status["progress"]["evalMetric"] == "test_mrr" and p.status["progress"]["epoch"] == 100


def test_a_spec_fixed_after_it_failed_says_that_the_training_stays_failed() -> None:
    """Failed for its spec, then fixed: SpecValid True alone (and its Normal event "Valid") read as if
    the training would start, while a failed training never does. Its message says so, and what to do."""
    from tests.operator.reconcile_cluster import Cluster, cond

    c = Cluster(training(**{"partition.parts": 0}))
    assert c.step().status["phase"] == "Failed"
    c.body["spec"]["partition"]["parts"] = 2
    p = c.step()
    assert p.status["phase"] == "Failed" and p.actions == []
    said = cond(p, "SpecValid")
    assert said["status"] == "True" and "a failed training never starts again" in said["message"]
    assert "kubectl replace --force" in said["message"]
    assert cond(p, "Failed")["reason"] == "InvalidSpec"
