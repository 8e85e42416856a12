"""Clean-up, TTL and the data claim (issue 17 c), and pods that cannot start (issue 17 e): the waiting
reason in the stage's condition, and the training failed after runPolicy.startTimeoutSeconds."""

from __future__ import annotations

import datetime as dt

import pytest

from graphtrain.contract import conditions as vocab
from graphtrain.contract.children import labels, trainer_name
from graphtrain.contract.spec import API_VERSION, ConditionType, parse
from graphtrain.operator import lifecycle, manifests, observation, stages
from graphtrain.operator.config import built_in
from graphtrain.operator.observation import Observed, key
from graphtrain.operator.reconcile import plan
from tests.operator.reconcile_cluster import (
    DELETE_ALL,
    KEPT,
    KEPT_CONDS,
    NAME,
    NOW,
    NS,
    PODS,
    STOP_SHARDS,
    SVC,
    TABLE,
    Cluster,
    base,
    cond,
    context,
    ended_as,
    job,
    kinds,
    obj,
    observed,
    row,
    run,
    sts,
    to_training,
    trainer,
    training,
)

# --------------------------------------------------------------------- clean-up, TTL and the claim
# Issue 17 c: a finished training stops its pods as runPolicy.cleanPodPolicy says, is deleted
# ttlSecondsAfterFinished after it finished, and keeps its data claim unless storage.whenDeleted Delete.

ENDED_CONDS = f"{KEPT_CONDS}, Failed=True TrainerFailed"
ENDED = {
    "phase": "Failed",
    "completionTime": "2026-11-22T11:59:00Z",
    "conditions": [*KEPT, ended_as("Failed")],
}
FINISHED_PODS = (job("succeeded"), sts(2), trainer(0, "Succeeded"), trainer(1, "Running"))
DELETE_TRAINING = f"delete GraphTraining/{NAME}"


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "running-stops-what-runs",
            observed(*FINISHED_PODS, status=ENDED),
            "Failed",
            [*STOP_SHARDS, f"delete {PODS[1]}"],
            ENDED_CONDS,
            "",
        ),
        row(
            "running-stops-a-running-partition-job",
            observed(job("running"), status=ENDED),
            "Failed",
            [f"delete Job/{NAME}-partition"],
            ENDED_CONDS,
            "",
        ),
        row(
            "all-deletes-finished-pods-too",
            observed(*FINISHED_PODS, status=ENDED, **{"runPolicy.cleanPodPolicy": "All"}),
            "Failed",
            [*STOP_SHARDS, f"delete Job/{NAME}-partition", *DELETE_ALL],
            ENDED_CONDS,
            "",
        ),
        row(  # and reports the shard servers it keeps as they serve
            "none-keeps-everything",
            observed(*FINISHED_PODS, status=ENDED, **{"runPolicy.cleanPodPolicy": "None"}),
            "Failed",
            [],
            f"{ENDED_CONDS}, ShardsReady=True AllReady",
            "Normal AllReady",
            shards=[
                {
                    "index": i,
                    "state": "Pending",
                    "address": f"tcp://{NAME}-shards-{i}.{NAME}-shards.{NS}.svc:7000",
                    "restarts": 0,
                }
                for i in range(2)
            ],
        ),
        row(
            "pods-being-deleted-are-not-deleted-again",
            observed(
                obj("StatefulSet", f"{NAME}-shards", api="apps/v1", deletionTimestamp="2026-11-22T11:59:30Z"),
                status=ENDED,
            ),
            "Failed",
            [],
            ENDED_CONDS,
            "",
        ),
        row(
            "ttl-not-yet",
            observed(status=ENDED, **{"runPolicy.ttlSecondsAfterFinished": 61}),
            "Failed",
            [],
            ENDED_CONDS,
            "",
        ),
        row(
            "ttl-ran-out",
            observed(status=ENDED, **{"runPolicy.ttlSecondsAfterFinished": 60}),
            "Failed",
            [DELETE_TRAINING],
            ENDED_CONDS,
            "",
        ),
        row(
            "ttl-zero-with-clean-up",
            observed(sts(2), status=ENDED, **{"runPolicy.ttlSecondsAfterFinished": 0}),
            "Failed",
            [*STOP_SHARDS, DELETE_TRAINING],
            ENDED_CONDS,
            "",
        ),
    ],
)
def test_terminal_clean_up_and_ttl(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(lifecycle.terminal_stage, o) == (phase, actions, conds, events, status)


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("Running", [*STOP_SHARDS]),
        ("All", [*STOP_SHARDS, f"Job/{NAME}-partition", *PODS]),
        ("None", []),
    ],
)
def test_a_success_cleans_up_as_the_policy_says(policy: str, deleted: list[str]) -> None:
    c = Cluster(training(**{"runPolicy.cleanPodPolicy": policy}))
    to_training(c)
    c.trainers("Succeeded")
    p = c.step()
    assert p.status["phase"] == "Succeeded"
    assert kinds(p, "delete") == sorted(d.removeprefix("delete ") for d in deleted)
    assert ("kept" in cond(p, "Succeeded")["message"]) == (policy == "None")


def test_the_ttl_deletes_a_finished_training_when_it_falls() -> None:
    """The plan that ends the training asks to run again when its TTL falls (no event may come), and
    that run deletes the GraphTraining (its children go with it: the delete handler, the collector)."""
    c = Cluster(training(**{"runPolicy.ttlSecondsAfterFinished": 90}))
    to_training(c)
    c.trainers("Succeeded")
    p = c.step()
    assert p.status["phase"] == "Succeeded" and p.requeue_after == 90
    c.now = NOW + dt.timedelta(seconds=30)
    p = c.step()
    assert kinds(p, "delete") == [] and p.requeue_after == 60
    c.now = NOW + dt.timedelta(seconds=90)
    p = c.step()
    (gone,) = [a.obj for a in p.actions]
    assert gone["kind"] == "GraphTraining" and gone["apiVersion"] == API_VERSION
    assert gone["metadata"] == {"name": NAME, "namespace": NS, "uid": "uid-1"}  # this one, not a new one
    assert p.events == []  # nothing to say: it is going


def test_no_ttl_asks_for_no_requeue_once_finished() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Succeeded")
    assert c.step().requeue_after is None and c.step().requeue_after is None


@pytest.mark.parametrize(("when", "owned"), [("Retain", False), ("Delete", True), (None, False)])
def test_the_data_claim_is_owned_only_when_deleted_with_the_training(when: str | None, owned: bool) -> None:
    body = training(**({"storage.whenDeleted": when} if when else {}))
    claim = manifests.data_claim(body, parse(body), built_in())
    assert claim is not None
    assert ("ownerReferences" in claim["metadata"]) == owned
    assert manifests.retained_claim(claim, NAME) == (not owned)
    assert not manifests.retained_claim(claim, "other")  # another training's claim is never taken
    named = training(**{"storage.volumeClaimName": "mine", "storage.whenDeleted": "Delete"})
    assert (
        manifests.data_claim(named, parse(named), built_in()) is None
    )  # a claim it did not make: never deleted


def test_a_retained_claim_observed_is_not_made_again() -> None:
    """observe() lists the retained claim of the name (k8s.py); ensure() then makes no second one."""
    retained = manifests.data_claim(training(), parse(training()), built_in())
    assert retained is not None
    o = observed(retained)
    assert f"PersistentVolumeClaim/{NAME}-data" not in [
        a.key for a in stages.partition_stage(context(o), vocab.Conditions([], "T")).actions
    ]


def test_each_training_works_in_its_own_directory() -> None:
    """A training re-created with the same name on a kept claim must not resume the checkpoints of the
    one before: the work directory is per uid, recorded in the applied spec (config ConfigMap) so that
    it stays fixed; a spec applied before (no uid) keeps the old directory."""
    body = training()
    lay = manifests.Layout(parse(body))
    assert lay.work == f"/var/lib/graphtrain/runs/{NAME}/uid-1"
    assert lay.checkpoints.startswith(lay.work) and lay.partition.startswith(lay.work)
    again = {**body, "metadata": {**body["metadata"], "uid": "uid-2"}}
    assert manifests.Layout(parse(again)).checkpoints != lay.checkpoints
    applied = observation.applied_spec(
        {key("ConfigMap", f"{NAME}-config"): manifests.config_map(body, parse(body))}, NAME
    )
    assert applied is not None and manifests.Layout(applied).work == lay.work
    old = {**body, "metadata": {k: v for k, v in body["metadata"].items() if k != "uid"}}
    assert manifests.Layout(parse(old)).work == f"/var/lib/graphtrain/runs/{NAME}"
    # every pod of the training reads and writes there
    pods = [
        manifests.partition_job(body, parse(body), built_in()),
        manifests.trainer_pod(body, parse(body), built_in(), 0, 0),
    ]
    for made in pods:
        spec = made["spec"].get("template", made)["spec"]
        assert any(a.startswith(lay.work) for a in spec["containers"][0]["args"]), made["kind"]


# ------------------------------------------------------------------------ pods that cannot start
# Issue 17 e: the waiting reason of a pod that cannot start is in its stage's condition, and the training
# fails after runPolicy.startTimeoutSeconds (600 s unless the spec says otherwise).

T_PULL = "2026-11-22T11:55:00Z"  # 5 minutes before NOW


def waiting(reason: str, message: str = "", init: bool = False) -> dict:
    statuses = [{"name": "c", "state": {"waiting": {"reason": reason, "message": message}}}]
    return {"initContainerStatuses" if init else "containerStatuses": statuses}


def pod_with(name: str, role: str, phase: str = "Pending", conditions=(), **status) -> dict:
    body = {"phase": phase, "conditions": list(conditions), **status}
    return obj("Pod", name, body, labels=labels(NAME, role), creationTimestamp="2026-11-22T11:50:00Z")


UNSCHEDULED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
    "lastTransitionTime": T_PULL,
}
NOT_READY = {"type": "Ready", "status": "False", "lastTransitionTime": T_PULL}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (
            pod_with("p", "x", **waiting("ImagePullBackOff", 'Back-off pulling image "x"')),
            ("ImagePullBackOff", "11:50"),
        ),
        (pod_with("p", "x", conditions=[NOT_READY], **waiting("ErrImagePull")), ("ErrImagePull", "11:55")),
        (
            pod_with("p", "x", "Running", [NOT_READY], **waiting("CrashLoopBackOff")),
            ("CrashLoopBackOff", "11:55"),
        ),
        (
            pod_with("p", "x", **waiting("CreateContainerConfigError", 'secret "t" not found', init=True)),
            ("CreateContainerConfigError", "11:50"),
        ),
        (pod_with("p", "x", conditions=[UNSCHEDULED]), ("Unschedulable", "11:55")),
        (
            pod_with("p", "x", conditions=[{**UNSCHEDULED, "reason": "SchedulingGated"}]),
            None,
        ),  # held by Kueue
        (pod_with("p", "x", **waiting("ContainerCreating")), None),  # a slow pull is on its way
        (pod_with("p", "x", **waiting("PodInitializing")), None),
        (pod_with("p", "x"), None),  # no status yet
        (pod_with("p", "x", "Failed", **waiting("CrashLoopBackOff")), None),  # finished: its stage judges it
        (
            {
                **pod_with("p", "x", **waiting("ErrImagePull")),
                "metadata": {"name": "p", "deletionTimestamp": "x"},
            },
            None,
        ),
    ],
    ids=[
        "backoff",
        "pull-error-since-not-ready",
        "crash-loop",
        "config-error-init",
        "unschedulable",
        "gated",
        "creating",
        "initializing",
        "no-status",
        "finished",
        "being-deleted",
    ],
)
def test_why_a_pod_cannot_start(pod: dict, expected: tuple[str, str] | None) -> None:
    trouble = observation.pod_trouble(pod)
    if expected is None:
        assert trouble is None
        return
    assert trouble is not None and trouble.reason == expected[0] and trouble.pod == "p"
    assert trouble.since == dt.datetime.fromisoformat(f"2026-11-22T{expected[1]}:00+00:00")
    assert str(trouble).startswith(f"pod p: {expected[0]}")


PULL_BACKOFF = waiting("ImagePullBackOff", 'Back-off pulling image "localhost/nope:1"')
SLOW = {"runPolicy.startTimeoutSeconds": 900}  # the pods above have not started for 600 s at NOW


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "partition-pod-cannot-pull",
            observed(
                *base(), job("running"), pod_with(f"{NAME}-partition-x1", "partition", **PULL_BACKOFF), **SLOW
            ),
            "Partitioning",
            [],
            "PartitionReady=False PodsNotStarting",
            "Warning PodsNotStarting",
        ),
        row(
            "partition-pod-timed-out",
            observed(*base(), job("running"), pod_with(f"{NAME}-partition-x1", "partition", **PULL_BACKOFF)),
            "Failed",
            [f"delete Job/{NAME}-partition"],
            "PartitionReady=False PodsNotStarting, Failed=True StartTimeout",
            "Warning PodsNotStarting, Warning StartTimeout",
        ),
    ],
)
def test_partition_pods_that_cannot_start(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(stages.partition_stage, o) == (phase, actions, conds, events, status)


def test_the_condition_names_the_pod_its_reason_and_message_and_the_pending_claim() -> None:
    claim = {
        **manifests.data_claim(training(), parse(training()), built_in()),
        "status": {"phase": "Pending"},
    }
    o = observed(
        *base()[:-1],
        job("succeeded"),
        *SVC,
        claim,
        sts(0),
        pod_with(f"{NAME}-shards-0", "shards", conditions=[UNSCHEDULED]),
        pod_with(f"{NAME}-shards-1", "shards", conditions=[UNSCHEDULED]),
    )
    conds = vocab.Conditions([], "T")
    step = stages.shards_stage(context(o), conds)
    said = conds.get(ConditionType.shards_ready)
    assert said is not None and said.reason == "PodsNotStarting"
    assert said.message == (
        f"0/2 shard servers ready: pod {NAME}-shards-0: Unschedulable: 0/3 nodes are available: pod has "
        f"unbound immediate PersistentVolumeClaims.; pod {NAME}-shards-1: Unschedulable: 0/3 nodes are "
        f"available: pod has unbound immediate PersistentVolumeClaims.; claim {NAME}-data is Pending "
        "(no volume bound)"
    )
    assert step.phase is None and step.requeue_after == 600 - 300  # on to the trainers, who wait
    p = plan(o)
    assert p.status["phase"] == "Starting" and p.requeue_after == 300


def test_a_trainer_that_cannot_start_fails_the_training_after_the_start_timeout() -> None:
    c = Cluster(training(**{"runPolicy.startTimeoutSeconds": 120}))
    to_training(c)
    c.trainers("Running")
    pod = c.children[key("Pod", trainer_name(NAME, 1))]
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{**NOT_READY, "lastTransitionTime": "2026-11-22T12:00:00Z"}],
        **PULL_BACKOFF,
    }
    p = c.step()
    assert p.status["phase"] == "Training" and p.requeue_after == 120
    assert cond(p, "TrainersReady")["reason"] == "PodsNotStarting"
    assert (
        f"1/2 trainers running: pod {NAME}-trainer-1: ImagePullBackOff" in cond(p, "TrainersReady")["message"]
    )
    c.now = NOW + dt.timedelta(seconds=119)
    assert c.step().status["phase"] == "Training"
    c.now = NOW + dt.timedelta(seconds=120)
    p = c.step()
    assert p.status["phase"] == "Failed" and cond(p, "Failed")["reason"] == "StartTimeout"
    assert "runPolicy.startTimeoutSeconds 120" in cond(p, "Failed")["message"]
    assert kinds(p, "delete") == sorted([*PODS, f"StatefulSet/{NAME}-shards"])  # cleanPodPolicy Running
    assert ("Warning", "StartTimeout") in [(e.type, e.reason) for e in p.events]


def test_a_shard_crash_looping_after_hours_counts_from_when_it_was_last_ready() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Running")
    c.now = NOW + dt.timedelta(hours=5)
    crashed = (NOW + dt.timedelta(hours=5) - dt.timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    c.set_status("StatefulSet", f"{NAME}-shards", {"readyReplicas": 1, "replicas": 2})
    c.children[key("Pod", f"{NAME}-shards-1")]["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": crashed}],
        **waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container"),
    }
    p = c.step()
    assert p.status["phase"] == "Training" and cond(p, "ShardsReady")["reason"] == "PodsNotStarting"
    assert p.requeue_after == 540
