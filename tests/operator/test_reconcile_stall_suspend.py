"""runPolicy.stallPolicy Restart (issue 17 f), spec.suspend (issue 17 g) and an inference training's
paths, through plan()."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from graphtrain.contract import conditions as vocab
from graphtrain.contract.children import LABEL_ATTEMPT, trainer_name
from graphtrain.contract.spec import Phase, parse
from graphtrain.operator import lifecycle, manifests, spec_stage, stages
from graphtrain.operator.config import built_in
from graphtrain.operator.observation import Observed, key
from tests.operator.reconcile_cluster import (
    DELETE_ALL,
    EARLY,
    FRESH,
    NAME,
    NOW,
    PODS,
    RUNNING,
    SILENT,
    STOP_SHARDS,
    TABLE,
    WAS_PARTITIONING,
    Cluster,
    base,
    cond,
    context,
    job,
    kinds,
    observed,
    progress,
    row,
    run,
    sts,
    to_training,
    trainer,
    training,
)

# --------------------------------------------------------------------------------- stall policy
# Issue 17 f: runPolicy.stallPolicy Restart restarts the trainers from the last checkpoint.

STALLED = (
    trainer(0, "Running", start=EARLY),
    trainer(1, "Running", start=EARLY),
    progress(rank_0=FRESH, rank_1=SILENT),
)
RESTART = {"runPolicy.stallPolicy": "Restart"}


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "report-only-by-default",
            observed(sts(2), *STALLED),
            "Training",
            [],
            "TrainersReady=True Running, Stalled=True NoProgress",
            "Normal Running, Warning NoProgress",
            trainersRanAttempt=0,
        ),
        row(
            "restart-from-the-checkpoint",
            observed(sts(2), *STALLED, **RESTART),
            "Restarting",
            DELETE_ALL,
            "TrainersReady=False TrainerFailed, Stalled=True NoProgress",
            "Warning TrainerFailed, Warning NoProgress",
            restarts=1,
            trainersRanAttempt=0,
        ),
        row(
            "restart-with-no-retry-left",
            observed(sts(2), *STALLED, **RESTART, **{"runPolicy.backoffLimit": 0}),
            "Failed",
            [*STOP_SHARDS, *DELETE_ALL],
            "TrainersReady=False TrainerFailed, Stalled=True NoProgress, Failed=True TrainerFailed",
            "Warning TrainerFailed, Warning NoProgress, Warning TrainerFailed",
            trainersRanAttempt=0,
        ),
        row(
            "a-report-older-than-its-pod-is-not-a-stall",  # the rank's report is of an earlier attempt
            observed(sts(2), *RUNNING, progress(rank_0=SILENT, rank_1=SILENT), **RESTART),
            "Training",
            [],
            "TrainersReady=True Running, Stalled=False Progressing",
            "Normal Running, Normal Progressing",
            trainersRanAttempt=0,
        ),
    ],
)
def test_stall_policy(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(stages.trainers_stage, o) == (phase, actions, conds, events, status)


def test_a_stall_restart_says_why_and_the_next_attempt_is_not_stalled_at_once() -> None:
    c = Cluster(training(**RESTART))
    to_training(c)
    c.trainers("Running")
    for r in range(2):
        c.children[key("Pod", trainer_name(NAME, r))]["status"]["startTime"] = EARLY
    c.children[key("ConfigMap", f"{NAME}-progress")]["data"] = {
        "rank-0": json.dumps(FRESH),
        "rank-1": json.dumps(SILENT),
    }
    p = c.step()
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert "rank 1 has not reported" in cond(p, "TrainersReady")["message"]
    assert "runPolicy.stallPolicy is Restart; restart 1/1" in cond(p, "TrainersReady")["message"]
    c.step()  # attempt 1's pods
    c.trainers("Running", attempt=1)
    for r in range(2):  # they start now; rank 1's report in the map is still the silent one
        c.children[key("Pod", trainer_name(NAME, r))]["status"]["startTime"] = "2026-11-22T12:00:00Z"
    p = c.step()
    assert p.status["phase"] == "Training" and cond(p, "Stalled")["status"] == "False"


# -------------------------------------------------------------------------------------- suspend
# Issue 17 g: spec.suspend stops every pod and keeps the rest; false resumes from the last checkpoint.

SUSPEND = {"suspend": True}
WAS_SUSPENDED = [{"type": "Suspended", "status": "True", "reason": "Suspended", "lastTransitionTime": "T0"}]
PARTITIONED_KEPT = [
    {"type": "PartitionReady", "status": "True", "reason": "Partitioned", "lastTransitionTime": "T0"},
    {"type": "ShardsReady", "status": "True", "reason": "AllReady", "lastTransitionTime": "T0"},
]

TRAINING_CONDS = [  # a training suspended while it trains: its role conditions stay, saying Stopped
    *PARTITIONED_KEPT,
    {"type": "TrainersReady", "status": "True", "reason": "Running", "lastTransitionTime": "T0"},
    {"type": "Stalled", "status": "False", "reason": "Progressing", "lastTransitionTime": "T0"},
]


@pytest.mark.parametrize(
    TABLE,
    [
        row("not-suspended", observed(sts(2), *RUNNING), None, [], "", ""),
        row(
            "suspended-while-training",
            observed(job("succeeded"), sts(2), *RUNNING, status={"conditions": TRAINING_CONDS}, **SUSPEND),
            "Suspended",
            [*STOP_SHARDS, *DELETE_ALL],
            "PartitionReady=True Partitioned, ShardsReady=False Stopped, TrainersReady=False Stopped, "
            "Stalled=False Stopped, Suspended=True Suspended",
            "Normal Stopped, Normal Stopped, Normal Stopped, Normal Suspended",
            startTime=None,
            shards=None,
            trainersRanAttempt=None,
        ),
        row(
            "suspended-while-partitioning",
            observed(*base(), job("running"), status={"conditions": WAS_PARTITIONING}, **SUSPEND),
            "Suspended",
            [f"delete Job/{NAME}-partition"],
            "Suspended=True Suspended",
            "Normal Suspended",
            startTime=None,
            shards=None,
            trainersRanAttempt=None,
        ),
        row(
            "created-suspended-makes-nothing",
            observed(**SUSPEND),
            "Suspended",
            [],
            "Suspended=True Suspended",
            "Normal Suspended",
            startTime=None,
            shards=None,
            trainersRanAttempt=None,
        ),
        row(
            "finished-trainers-go-too",  # the world restarts together on resumption
            observed(trainer(0, "Succeeded"), trainer(1, "Running"), **SUSPEND),
            "Suspended",
            DELETE_ALL,
            "Suspended=True Suspended",
            "Normal Suspended",
            startTime=None,
            shards=None,
            trainersRanAttempt=None,
        ),
        row(
            "resumed",
            observed(status={"conditions": WAS_SUSPENDED}),
            None,
            [],
            "Suspended=False Resumed",
            "Normal Resumed",
        ),
    ],
)
def test_suspend_stage(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(lifecycle.suspend_stage, o) == (phase, actions, conds, events, status)


def test_suspend_then_resume_from_the_checkpoint() -> None:
    """Suspended mid-training: pods stop, the claim and the rest stay, no restart is counted, the deadline
    does not run; resumed: shard servers and trainers are made again (they restore LATEST), startTime is
    the resumption's, so the deadline counts from there."""
    c = Cluster(training(**{"runPolicy.activeDeadlineSeconds": 600}))
    to_training(c)
    c.trainers("Running")
    c.step()
    c.body["spec"]["suspend"] = True
    c.body["metadata"]["generation"] = 2
    c.now = NOW + dt.timedelta(seconds=100)
    p = c.step()
    assert p.status["phase"] == "Suspended" and p.status["startTime"] is None
    assert cond(p, "Suspended")["status"] == "True" and cond(p, "SpecValid")["status"] == "True"
    assert kinds(p, "delete") == sorted([*PODS, f"StatefulSet/{NAME}-shards"])
    assert p.requeue_after is None  # no deadline runs while suspended
    assert {"Suspended"} <= {e.reason for e in p.events}
    kept = {k.split("/")[0] for k in c.children}  # the claim, the partition, the token, the services
    assert {"PersistentVolumeClaim", "Secret", "ConfigMap", "Service", "Job"} <= kept
    assert not [k for k in c.children if k.startswith(f"Pod/{NAME}-trainer")]
    c.now = NOW + dt.timedelta(hours=2)  # far past the deadline: it is not counted while suspended
    p = c.step()
    assert p.status["phase"] == "Suspended" and p.actions == [] and p.events == []
    c.body["spec"]["suspend"] = False
    c.body["metadata"]["generation"] = 3
    p = c.step()
    assert p.status["phase"] == "Starting" and p.status["startTime"] == "2026-11-22T14:00:00Z"
    assert kinds(p, "create") == [f"StatefulSet/{NAME}-shards"] and p.requeue_after == 600
    assert cond(p, "Suspended")["status"] == "False" and cond(p, "Suspended")["reason"] == "Resumed"
    c.ready_shards()
    p = c.step()
    assert p.status["phase"] == "Training" and kinds(p, "create") == [*PODS]
    assert all(a.obj["metadata"]["labels"][LABEL_ATTEMPT] == "0" for a in p.actions)  # not a restart
    assert p.status["restarts"] == 0
    c.trainers("Running")
    p = c.step()
    assert cond(p, "Suspended")["reason"] == "Resumed"  # kept, as a Job's Suspended False


def test_trainers_still_stopping_after_a_resumption_are_waited_for_not_judged() -> None:
    """A trainer SIGTERMed by the suspension may show Failed while it terminates: not a failure."""
    going = trainer(1, "Failed")
    going["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:50Z"
    step = stages.trainers_stage(
        context(observed(sts(2), trainer(0, "Running"), going)), vocab.Conditions([], "T")
    )
    assert step.phase == Phase.starting and step.actions == [] and "restarts" not in step.status


def test_a_training_created_suspended_makes_no_child_and_its_spec_may_change() -> None:
    """Until it first runs its status has no appliedSpecHash: what the CRD's rules read as "has not run"
    (contract/spec/updates.py OPEN), admitting any change while it is suspended."""
    c = Cluster(training(**SUSPEND))
    p = c.step()
    assert p.status["phase"] == "Suspended" and p.actions == [] and p.status["startTime"] is None
    assert p.status["appliedSpecHash"] is None
    c.body["spec"]["trainers"]["nodeSelector"] = {"pool": "a100"}  # edited before it runs
    c.body["spec"]["suspend"] = False
    p = c.step()
    assert p.status["phase"] == "Partitioning" and cond(p, "SpecValid")["status"] == "True"
    applied = next(a.obj for a in p.actions if a.key == f"ConfigMap/{NAME}-config")
    assert "a100" in applied["data"]["spec.yaml"]
    assert p.status["appliedSpecHash"] == spec_stage.spec_hash(parse(c.body))  # made now: it runs


def test_a_suspended_training_that_ran_keeps_its_applied_hash_one_that_never_ran_loses_it() -> None:
    """A training that ran and was suspended keeps its config ConfigMap and the hash (its spec is fixed
    at admission); one created suspended under an operator that set the hash at once has it removed."""
    c = Cluster(training())
    to_training(c)
    had = c.step().status["appliedSpecHash"]
    c.body["spec"]["suspend"] = True
    p = c.step()
    assert p.status["phase"] == "Suspended" and p.status["appliedSpecHash"] == had
    fresh = Cluster(training(**SUSPEND))
    fresh.body["status"] = {"appliedSpecHash": had}  # an earlier operator's
    assert fresh.step().status["appliedSpecHash"] is None


def test_suspend_is_taken_by_a_running_training_and_other_changes_still_refused() -> None:
    c = Cluster(training())
    to_training(c)
    c.body["spec"]["suspend"] = True
    c.body["spec"]["training"]["epochs"] = 9
    p = c.step()
    assert p.status["phase"] == "Suspended"
    assert (
        cond(p, "SpecValid")["reason"] == "UpdateRefused"
        and "spec.training " in cond(p, "SpecValid")["message"]
    )
    assert "suspend" not in cond(p, "SpecValid")["message"]


def test_a_finished_training_ignores_suspend() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Succeeded")
    c.step()
    c.body["spec"]["suspend"] = True
    p = c.step()
    assert p.status["phase"] == "Succeeded" and "Suspended" not in [x["type"] for x in p.status["conditions"]]


def test_an_inference_training_reads_its_checkpoint_and_writes_beside_its_work() -> None:
    """mode inference: the shard servers' checkpoint root is the checkpoint's (the volume's path, relative
    ones under mountPath), nothing restored at start (the trainers name the checkpoint), and the trainers
    infer from it into <work>/inference, or inference.output on the volume."""
    ckpt = "runs/wn/uid-0/checkpoints/BEST"
    body = training(mode="inference", **{"inference.checkpoint": ckpt})
    gt = parse(body)
    shard = manifests.shard_statefulset(body, gt, built_in())["spec"]["template"]["spec"]["containers"][0]
    assert "--restore" not in shard["args"]
    assert (
        shard["args"][shard["args"].index("--checkpoint-root") + 1]
        == "/var/lib/graphtrain/runs/wn/uid-0/checkpoints"
    )
    pod = manifests.trainer_pod(body, gt, built_in(), 0, 0)["spec"]["containers"][0]["args"]
    assert pod[pod.index("--infer-from") + 1] == f"/var/lib/graphtrain/{ckpt}"
    assert pod[pod.index("--output") + 1] == "/var/lib/graphtrain/runs/wn/uid-1/inference"
    body = training(mode="inference", **{"inference.checkpoint": "/data/ck", "inference.output": "out/emb"})
    pod = manifests.trainer_pod(body, parse(body), built_in(), 1, 0)["spec"]["containers"][0]["args"]
    assert pod[pod.index("--infer-from") + 1] == "/data/ck"
    assert pod[pod.index("--output") + 1] == "/var/lib/graphtrain/out/emb"
    train = manifests.trainer_pod(training(), parse(training()), built_in(), 0, 0)["spec"]["containers"][0]
    assert "--infer-from" not in train["args"]
