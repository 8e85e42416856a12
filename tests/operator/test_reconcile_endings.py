"""The deadline, a training being deleted, and the truth at the end (issue 32): after Succeeded, Failed
and while being deleted, no condition and no shard state says a stopped role is ready or running."""

from __future__ import annotations

import copy
import datetime as dt
import json

import pytest

from graphtrain.contract.children import LABEL_RANK, trainer_name
from graphtrain.operator import stages
from graphtrain.operator.observation import key
from tests.operator.reconcile_cluster import (
    DEADLINE,
    NAME,
    NOW,
    PODS,
    Cluster,
    cond,
    deleted,
    job,
    kinds,
    progress,
    running_cluster,
    trainer,
    training,
)

# ------------------------------------------------------------------------------------ the deadline


def test_a_deadline_fails_a_running_training_without_any_other_event() -> None:
    c = Cluster(training(**DEADLINE))
    first = c.step()
    assert first.requeue_after == 60  # the plan asks to be run again when the deadline falls
    to_training_from(c)
    c.trainers("Running")
    c.now = NOW + 30 * dt.timedelta(seconds=1)
    p = c.step()
    assert p.status["phase"] == "Training" and p.requeue_after == 30
    c.now = NOW + 60 * dt.timedelta(seconds=1)  # the requeue fires: nothing else changed
    p = c.step()
    assert p.status["phase"] == "Failed" and p.requeue_after is None
    assert cond(p, "Failed")["reason"] == "DeadlineExceeded" and "60 s" in cond(p, "Failed")["message"]
    assert kinds(p, "delete") == [*PODS, f"StatefulSet/{NAME}-shards"]
    said = [(e.type, e.reason, e.message) for e in p.events]
    assert [s[:2] for s in said] == [
        ("Warning", "Failed"),
        ("Normal", "Stopped"),  # ShardsReady, TrainersReady, Stalled
        ("Normal", "Stopped"),
        ("Normal", "Stopped"),
        ("Warning", "DeadlineExceeded"),
    ]
    stopped = "stopped: the training failed (runPolicy.cleanPodPolicy Running)"
    assert [m for _, r, m in said if r == "Stopped"][:2] == [
        f"shard servers {stopped}",
        f"trainers {stopped}",
    ]
    for kind in ("ShardsReady", "TrainersReady", "Stalled"):  # nothing reads as running any more
        assert (cond(p, kind)["status"], cond(p, kind)["reason"]) == ("False", "Stopped"), kind
    assert {s["state"] for s in p.status["shards"]} == {"Stopped"}
    assert "completionTime" in p.status
    assert c.step().actions == []  # terminal


def test_no_deadline_asks_for_no_requeue() -> None:
    assert Cluster(training()).step().requeue_after is None


def to_training_from(c: Cluster) -> None:
    c.finish_partition()
    c.step()
    c.ready_shards()
    c.step()


def test_a_training_being_deleted_is_left_alone_but_for_its_stopped_roles() -> None:
    """Nothing is made for it and nothing said; its status says what stopped, and nothing else changes
    (the phase stays: its deletionTimestamp says it is going)."""
    c = Cluster(training())
    c.step()
    before = copy.deepcopy(c.body["status"])
    c.body["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:30Z"
    c.children.clear()  # its children are being deleted
    c.now = NOW + dt.timedelta(seconds=30)
    p = c.step()
    assert p.actions == [] and p.events == []
    assert {k: v for k, v in p.status.items() if k != "conditions"} == {
        k: v for k, v in before.items() if k != "conditions"
    }
    partition = cond(p, "PartitionReady")
    assert (partition["status"], partition["reason"]) == ("False", "Stopped")
    assert partition["message"] == f"job {NAME}-partition stopped: the GraphTraining is being deleted"
    assert partition["lastTransitionTime"] == "2026-11-22T12:00:00Z"  # False since then: no transition
    assert cond(p, "SpecValid") == next(c for c in before["conditions"] if c["type"] == "SpecValid")
    assert c.step().status == p.status  # once said, it holds


# ------------------------------------------------------------------------------ the truth at the end
# Issue 32: after Succeeded, Failed (any cause) and while being deleted, no condition and no shard
# state says a stopped role is ready or running; what runPolicy.cleanPodPolicy None keeps is reported
# as it runs. Each row runs plan() from a running training (Cluster) to its end, then once more.


def fail_twice(c: Cluster) -> None:
    """A trainer fails, the restart's trainers run, and one fails again: past backoffLimit 1."""
    c.trainers("Running", r1="Failed")
    c.step()  # Restarting: the attempt's pods go
    c.step()  # the next attempt's pods are made
    c.trainers("Running", r1="Failed")


def stuck_trainers(c: Cluster) -> None:
    """Both trainers' images cannot be pulled, for longer than the start timeout (600 s)."""
    since = (NOW - dt.timedelta(seconds=700)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for r in range(2):
        c.children[key("Pod", trainer_name(NAME, r))]["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": since}],
            "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff", "message": "nope"}}}],
        }


def later(seconds: int):
    def wait(c: Cluster) -> None:
        c.now = NOW + dt.timedelta(seconds=seconds)

    return wait


STOPPED = ("False", "Stopped")
ROLES = ("ShardsReady", "TrainersReady")  # PartitionReady True says the partition is written: it stays
SHARDS_STOPPED = "ShardsReady=False Stopped"
DONE = "TrainersReady=False Completed, Succeeded=True Completed"
FAILED_RANK = "TrainersReady=False TrainerFailed"
ALL_STOPPED = f"{SHARDS_STOPPED}, TrainersReady=False Stopped, Stalled=False Stopped"
ENDINGS = [
    # name, spec, what happens, phase, conditions but SpecValid and PartitionReady (both True), shards
    ("succeeded", {}, lambda c: c.trainers("Succeeded"), "Succeeded", f"{SHARDS_STOPPED}, {DONE}", "Stopped"),
    (
        "trainer-failed",
        {"runPolicy.backoffLimit": 0},
        lambda c: c.trainers("Running", r1="Failed"),
        "Failed",
        f"{SHARDS_STOPPED}, {FAILED_RANK}, Failed=True TrainerFailed",
        "Stopped",
    ),
    (
        "backoff-limit-exceeded",
        {},
        fail_twice,
        "Failed",
        f"{SHARDS_STOPPED}, {FAILED_RANK}, Failed=True BackoffLimitExceeded",
        "Stopped",
    ),
    ("deadline", DEADLINE, later(60), "Failed", f"{ALL_STOPPED}, Failed=True DeadlineExceeded", "Stopped"),
    (
        "stall-policy-restart-with-no-retry-left",
        {"runPolicy.backoffLimit": 0, "runPolicy.stallPolicy": "Restart"},
        later(120),
        "Failed",
        f"{SHARDS_STOPPED}, {FAILED_RANK}, Stalled=False Stopped, Failed=True TrainerFailed",
        "Stopped",
    ),
    (
        "start-timeout",
        {},
        stuck_trainers,
        "Failed",
        f"{SHARDS_STOPPED}, TrainersReady=False Stopped, Failed=True StartTimeout",
        "Stopped",
    ),
    (
        "clean-pod-policy-all",
        {"runPolicy.backoffLimit": 0, "runPolicy.cleanPodPolicy": "All"},
        lambda c: c.trainers("Running", r1="Failed"),
        "Failed",
        f"{SHARDS_STOPPED}, {FAILED_RANK}, Failed=True TrainerFailed",
        "Stopped",
    ),
    (  # the shard servers it keeps serve: said so, as they do
        "clean-pod-policy-none-keeps-the-shards-serving",
        {"runPolicy.cleanPodPolicy": "None"},
        lambda c: c.trainers("Succeeded"),
        "Succeeded",
        f"ShardsReady=True AllReady, {DONE}",
        "Ready",
    ),
    ("deleted-while-training", {}, deleted, "Training", ALL_STOPPED, "Stopped"),
    (
        "deleted-after-it-succeeded",
        {},
        lambda c: (c.trainers("Succeeded"), c.step(), deleted(c)),
        "Succeeded",
        f"{SHARDS_STOPPED}, {DONE}",
        "Stopped",
    ),
]


@pytest.mark.parametrize(
    ("spec", "happens", "phase", "expected", "shard_state"),
    [pytest.param(*row[1:], id=row[0]) for row in ENDINGS],
)
def test_a_finished_status_shows_no_running_role(spec, happens, phase, expected, shard_state) -> None:
    c = running_cluster(**spec)
    happens(c)
    p = c.step()
    assert p.status["phase"] == phase
    said = sorted(f"{x['type']}={x['status']} {x['reason']}" for x in p.status["conditions"])
    assert said == sorted(["SpecValid=True Valid", "PartitionReady=True Partitioned", *expected.split(", ")])
    assert [s["state"] for s in p.status["shards"]] == [shard_state] * 2
    roles = [x for x in p.status["conditions"] if x["type"] in (*ROLES, "Stalled")]
    if shard_state == "Stopped":  # no role says ready or running: neither a status nor a message
        assert all(x["status"] == "False" for x in roles)
        assert not any("running" in x["message"] or "ready" in x["message"] for x in roles)
    policy = c.body["spec"]["runPolicy"].get("cleanPodPolicy", "Running")
    # stopped by the deletion, or by the end (a deletion after the end keeps what the end said)
    why = "the GraphTraining is being deleted" if phase == "Training" else f"the training {phase.lower()}"
    for x in roles:
        if x["reason"] == "Stopped" and x["type"] != "Stalled":
            assert x["message"].endswith(
                why if phase == "Training" else f"{why} (runPolicy.cleanPodPolicy {policy})"
            )
    again = c.step()  # final: the next reconcile says the same, and says nothing
    assert again.status["conditions"] == p.status["conditions"] and again.events == []
    assert again.status.get("shards") == p.status["shards"]


def test_stalled_keeps_what_it_said_once_the_trainers_stopped() -> None:
    """A rank silent at the deadline: Stalled was True; stopped, it is False and keeps the rank's name."""
    c = running_cluster(**{**DEADLINE, "runPolicy.stallTimeoutSeconds": 10})
    c.now = NOW + dt.timedelta(seconds=30)
    assert cond(c.step(), "Stalled")["status"] == "True"
    c.now = NOW + dt.timedelta(seconds=60)
    stalled = cond(c.step(), "Stalled")
    assert (stalled["status"], stalled["reason"]) == STOPPED
    assert stalled["message"].startswith("the trainers are stopped; when they stopped: rank ")
    assert "has not reported for" in stalled["message"]


def test_a_deadline_while_partitioning_stops_the_job_and_says_so() -> None:
    c = Cluster(training(**DEADLINE))
    c.step()
    c.now = NOW + dt.timedelta(seconds=60)
    p = c.step()
    assert p.status["phase"] == "Failed" and kinds(p, "delete") == [f"Job/{NAME}-partition"]
    partition = cond(p, "PartitionReady")
    assert (partition["status"], partition["reason"]) == STOPPED
    assert partition["message"] == (
        f"job {NAME}-partition stopped: the training failed (runPolicy.cleanPodPolicy Running)"
    )
    assert {x["type"] for x in p.status["conditions"]} == {"SpecValid", "PartitionReady", "Failed"}
    assert "shards" not in p.status  # no shard server ever ran


def test_a_failed_partition_says_so_and_nothing_stopped() -> None:
    c = Cluster(training())
    c.step()
    c.set_status("Job", f"{NAME}-partition", job("failed")["status"])
    p = c.step()
    said = {x["type"]: (x["status"], x["reason"]) for x in p.status["conditions"]}
    assert said == {
        "SpecValid": ("True", "Valid"),
        "PartitionReady": ("False", "PartitionFailed"),
        "Failed": ("True", "PartitionFailed"),
    }


@pytest.mark.parametrize("backoff", [0, 1], ids=["fails", "restarts"])
def test_a_trainer_pod_deleted_while_the_trainers_ran_fails_the_attempt(backoff: int) -> None:
    """A trainer pod deleted by hand mid-run is not made again alone (it would wait for peers that went
    on): every rank restarts from the last checkpoint, or past backoffLimit the training fails."""
    c = running_cluster(**{"runPolicy.backoffLimit": backoff})
    c.children.pop(key("Pod", trainer_name(NAME, 1)))
    p = c.step()
    assert p.status["phase"] == ("Failed" if backoff == 0 else "Restarting")
    assert kinds(p, "create") == []
    assert cond(p, "TrainersReady")["message"].startswith("the pod of rank 1 deleted while the trainers ran")


@pytest.mark.parametrize("how", ["deleted", "leaving"])
def test_a_rank_lost_after_its_node_read_unknown_fails_the_attempt(how: str) -> None:
    """A lost node's pod reads Unknown before it is deleted, and TrainersReady went False meanwhile: the
    rank gone after that was judged "before every rank ran", made again alone to wait for peers that went
    on (or, refused, its running peers deleted as a partial gang, no restart counted). The attempt's
    status.trainersRanAttempt stays: every rank restarts, counted."""
    c = running_cluster(**{"runPolicy.backoffLimit": 1})
    assert c.step().status["trainersRanAttempt"] == 0
    c.trainers("Running", r1="Unknown")
    p = c.step()
    assert cond(p, "TrainersReady")["status"] == "False" and p.status["trainersRanAttempt"] == 0
    pod = key("Pod", trainer_name(NAME, 1))
    if how == "deleted":
        c.children.pop(pod)
    else:
        c.children[pod]["metadata"]["deletionTimestamp"] = "2026-11-22T12:05:00Z"
    p = c.step()
    assert p.status["phase"] == "Restarting" and kinds(p, "create") == []
    assert "deleted while the trainers ran" in cond(p, "TrainersReady")["message"]


def test_a_rank_lost_after_a_status_restored_without_the_marker_fails_the_attempt() -> None:
    """A status restored (or written by an older writer) without status.trainersRanAttempt, while
    TrainersReady is False (a node read Unknown): the ranks' heartbeats after their pods started say
    every rank met, so a rank lost then fails the attempt (every rank restarts) instead of being made
    again alone, and the marker is written back."""
    c = running_cluster(**{"runPolicy.backoffLimit": 1})
    c.step()
    c.trainers("Running", r1="Unknown")
    c.step()
    c.body["status"].pop("trainersRanAttempt")  # the restore's status
    c.children[key("ConfigMap", f"{NAME}-progress")]["data"] = {
        "rank-0": json.dumps({"updated_at": "2026-11-22T11:59:50Z"}),
        "rank-1": json.dumps({"updated_at": "2026-11-22T11:59:40Z"}),
    }
    assert c.step().status["trainersRanAttempt"] == 0  # written back
    c.body["status"].pop("trainersRanAttempt")
    c.children.pop(key("Pod", trainer_name(NAME, 1)))
    p = c.step()
    assert p.status["phase"] == "Restarting" and kinds(p, "create") == [], p.actions
    assert "deleted while the trainers ran" in cond(p, "TrainersReady")["message"]


ON = "2026-11-22T11:59:50Z"  # a heartbeat after trainer()'s start (11:59:00)
BEFORE = "2026-11-22T11:58:00Z"  # one before it: an earlier pod's


@pytest.mark.parametrize(
    ("old", "ready", "pods", "beats", "ran"),
    [
        ({"trainersRanAttempt": 1}, False, [], {}, True),  # the marker
        ({"trainersRanAttempt": 0}, False, [], {}, False),  # an earlier attempt's
        ({}, True, [], {}, True),  # TrainersReady True: a status from before the marker
        ({}, False, [trainer(0, "Running", 1)], {}, False),  # no heartbeat
        ({}, False, [trainer(0, "Running", 1)], {"rank_0": BEFORE}, False),  # an earlier attempt's beat
        ({}, False, [trainer(0, "Running", 1)], {"rank_0": ON}, True),  # restored without the marker
        ({}, False, [trainer(0, "Running", 1)], {"rank_1": ON}, False),  # another rank's, no pod of it
        ({}, False, [trainer(0, "Unknown", 1), trainer(1, "Running", 1)], {"rank_1": ON}, True),
        (  # a pod stopping after a suspension (which removes the marker) ran before it
            {},
            False,
            [{**trainer(0, "Running", 1), "metadata": {"deletionTimestamp": "2026-11-22T11:59:55Z"}}],
            {"rank_0": ON},
            False,
        ),
        (  # its container started again after the beat: the beat was of the container before
            {},
            False,
            [
                trainer(
                    0,
                    "Running",
                    1,
                    containerStatuses=[{"state": {"running": {"startedAt": "2026-11-22T11:59:55Z"}}}],
                )
            ],
            {"rank_0": ON},
            False,
        ),
    ],
)
def test_attempt_ran_is_told_by_the_marker_or_what_the_cluster_holds(
    old: dict, ready: bool, pods: list[dict], beats: dict, ran: bool
) -> None:
    trainers = {int(p["metadata"].get("labels", {}).get(LABEL_RANK, i)): p for i, p in enumerate(pods)}
    cm = progress(**{k: {"updated_at": v} for k, v in beats.items()})
    assert stages.attempt_ran(old, 1, ready, trainers, cm) is ran


def test_after_a_resumption_a_rank_missing_before_every_rank_ran_is_made_again() -> None:
    """A suspension removes status.trainersRanAttempt: the resumed attempt (the same number) has not run."""
    c = running_cluster()
    c.step()
    c.body["spec"]["suspend"] = True
    assert c.step().status["trainersRanAttempt"] is None
    c.body["spec"]["suspend"] = False
    c.step()  # the shard servers made again
    c.ready_shards()
    assert kinds(c.step(), "create") == [*PODS]
    c.trainers("Running", r1="Pending")
    c.children.pop(key("Pod", trainer_name(NAME, 1)))  # before it ran
    p = c.step()
    assert kinds(p, "create") == [f"Pod/{trainer_name(NAME, 1)}"] and p.status["restarts"] == 0


@pytest.mark.parametrize("backoff", [0, 1], ids=["fails", "restarts"])
def test_a_failed_rank_makes_no_missing_rank(backoff: int) -> None:
    """Rank 1 failed while rank 0's pod is gone: the training ends (or restarts every rank) without
    making rank 0 first, a pod that would run after the end (or be deleted at once)."""
    c = running_cluster(**{"runPolicy.backoffLimit": backoff})
    c.trainers("Running", r1="Failed")
    c.children.pop(key("Pod", trainer_name(NAME, 0)))  # deleted by hand, say
    p = c.step()
    assert p.status["phase"] == ("Failed" if backoff == 0 else "Restarting")
    assert kinds(p, "create") == []


def test_clean_pod_policy_none_reports_kept_trainers_as_running() -> None:
    """A deadline with cleanPodPolicy None stops nothing: the trainers still run, and the status says
    so (the training failed; its pods are kept as the policy asks)."""
    c = running_cluster(**DEADLINE, **{"runPolicy.cleanPodPolicy": "None"})
    c.now = NOW + dt.timedelta(seconds=60)
    p = c.step()
    assert p.status["phase"] == "Failed" and p.actions == []
    assert (cond(p, "TrainersReady")["status"], cond(p, "ShardsReady")["status"]) == ("True", "True")
    c.trainers("Running", r1="Succeeded")
    c.children.pop(key("StatefulSet", f"{NAME}-shards"))  # deleted by hand later
    p = c.step()
    assert (cond(p, "ShardsReady")["status"], cond(p, "ShardsReady")["reason"]) == STOPPED
    assert cond(p, "ShardsReady")["message"] == "shard servers stopped: the training failed"
    assert cond(p, "TrainersReady")["status"] == "True"  # rank 0 still runs
