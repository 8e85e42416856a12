"""Each stage of plan() on its own: literal observed objects in; actions, status, conditions and events
(with their types) out. A row names only what the stage observes."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from graphtrain.contract import conditions as vocab
from graphtrain.contract.children import labels
from graphtrain.contract.spec import parse
from graphtrain.operator import lifecycle, manifests, spec_stage, stages
from graphtrain.operator.observation import Observed, key
from tests.operator.reconcile_cluster import (
    BASE,
    DEADLINE,
    DELETE_ALL,
    EARLY,
    FRESH,
    KEPT,
    KEPT_CONDS,
    NAME,
    NOW,
    NS,
    PODS,
    RUNNING,
    SILENT,
    STATS,
    STOP_SHARDS,
    SVC,
    TABLE,
    WAS_PARTITIONING,
    base,
    ended_as,
    job,
    obj,
    observed,
    progress,
    row,
    run,
    since,
    sts,
    trainer,
    training,
)

# ------------------------------------------------------------------------------------ stage tables
# Each stage of plan() on its own: literal observed objects in; actions, status, conditions and events
# (with their types) out. A row names only what the stage observes; conditions and events are those the
# stage sets (no previous status unless the row gives one).

MINUTE = dt.timedelta(minutes=1)


def partition_pod(message: str) -> dict:
    term = {"state": {"terminated": {"exitCode": 0, "message": message}}}
    return obj(
        "Pod",
        f"{NAME}-partition-x1",
        {"phase": "Succeeded", "containerStatuses": [term]},
        labels=labels(NAME, "partition"),
    )


def stopping(pod: dict, phase: str = "Running") -> dict:
    """`pod` running, and being deleted (its Job deleted: the pod's grace period)."""
    pod["status"]["phase"] = phase
    pod["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:50Z"
    return pod


def finished_partition_pod() -> dict:
    """A partition pod of an earlier Job that failed (killed as its Job was deleted)."""
    pod = partition_pod("")
    pod["status"]["phase"] = "Failed"
    return pod


def shard_pod(i: int, ready: bool, phase: str = "Running", restarts: int = 0) -> dict:
    status = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [{"restartCount": restarts, "state": {}}],
    }
    return obj("Pod", f"{NAME}-shards-{i}", status, labels=labels(NAME, "shards"))


PARTITIONED = {
    **STATS,
    "balance": {},
    "nodesPerPart": [],
    "edgesPerPart": [],
    "haloPerPart": [],
    "seconds": 0.0,
}


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "first",
            observed(),
            "Partitioning",
            [f"create {k}" for k in BASE],
            "PartitionReady=False Partitioning",
            "Normal Partitioning",
        ),
        row(
            "claim-named-by-the-spec",
            observed(*base()[:-1], job("running"), **{"storage.volumeClaimName": "shared"}),
            "Partitioning",
            [],
            "PartitionReady=False Partitioning",
            "Normal Partitioning",
        ),
        row(
            "job-failed",
            observed(*base(), job("failed")),
            "Failed",
            [],
            "PartitionReady=False PartitionFailed, Failed=True PartitionFailed",
            "Warning PartitionFailed, Warning PartitionFailed",
        ),
        row(
            "job-succeeded",
            observed(*base(), job("succeeded"), partition_pod(json.dumps(STATS))),
            None,
            [],
            "PartitionReady=True Partitioned",
            "Normal Partitioned",
            partition=PARTITIONED,
        ),
        row(
            "unreadable-stats",
            observed(*base(), job("succeeded"), partition_pod("not json")),
            None,
            [],
            "PartitionReady=True Partitioned",
            "Normal Partitioned",
        ),
        row(  # the Job deleted mid-partition: a new one waits for the old pod (no two partitioners)
            "earlier-pod-stopping",
            observed(*base(), stopping(partition_pod("")), status={"conditions": WAS_PARTITIONING}),
            "Partitioning",
            [],
            "PartitionReady=False Partitioning",
            "",
        ),
        row(
            "earlier-pod-gone",
            observed(*base(), finished_partition_pod(), status={"conditions": WAS_PARTITIONING}),
            "Partitioning",
            [f"create Job/{NAME}-partition"],
            "PartitionReady=False Partitioning",
            "",
        ),
        row(
            "unchanged-no-event",
            observed(*base(), job("running"), status={"conditions": WAS_PARTITIONING}),
            "Partitioning",
            [],
            "PartitionReady=False Partitioning",
            "",
        ),
    ],
)
def test_partition_stage(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(stages.partition_stage, o) == (phase, actions, conds, events, status)


SHARDS = [
    f"create {k}/{NAME}-shards" for k in ("Service", "NetworkPolicy", "PodDisruptionBudget", "StatefulSet")
] + [f"create NetworkPolicy/{NAME}-trainers"]


def shards(*states: tuple[str, int]) -> list[dict]:
    return [
        {
            "index": i,
            "state": st,
            "address": f"tcp://{NAME}-shards-{i}.{NAME}-shards.{NS}.svc:7000",
            "restarts": r,
        }
        for i, (st, r) in enumerate(states)
    ]


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "none-yet",
            observed(),
            None,
            SHARDS,
            "ShardsReady=False Waiting",
            "Normal Waiting",
            shards=shards(("Pending", 0), ("Pending", 0)),
        ),
        row(
            "one-loading",
            observed(*SVC, sts(1), shard_pod(0, True), shard_pod(1, False, restarts=2)),
            None,
            [],
            "ShardsReady=False Waiting",
            "Normal Waiting",
            shards=shards(("Ready", 0), ("Loading", 2)),
        ),
        row(
            "one-failed",
            observed(*SVC, sts(1), shard_pod(0, True), shard_pod(1, False, phase="Failed")),
            None,
            [],
            "ShardsReady=False Waiting",
            "Normal Waiting",
            shards=shards(("Ready", 0), ("Failed", 0)),
        ),
        row(
            "all-ready",
            observed(*SVC, sts(2), shard_pod(0, True), shard_pod(1, True)),
            None,
            [],
            "ShardsReady=True AllReady",
            "Normal AllReady",
            shards=shards(("Ready", 0), ("Ready", 0)),
        ),
    ],
)
def test_shards_stage(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(stages.shards_stage, o) == (phase, actions, conds, events, status)


CREATE_ALL = [*(f"create {p}" for p in PODS), f"create Service/{NAME}-trainers"]


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "shards-not-ready",
            observed(sts(1)),
            "Starting",
            [],
            "TrainersReady=False NotStarted",
            "Normal NotStarted",
        ),
        row(
            "create-every-rank",
            observed(sts(2)),
            "Training",
            CREATE_ALL,
            "TrainersReady=False Starting",
            "Normal Starting",
        ),
        row(
            "create-next-attempt",
            observed(sts(2), status={"restarts": 1}),
            "Restarting",
            CREATE_ALL,
            "TrainersReady=False Starting",
            "Normal Starting",
        ),
        row(
            "stale-attempt-removed-first",
            observed(sts(2), trainer(0, "Running"), trainer(1, "Failed"), status={"restarts": 1}),
            "Restarting",
            DELETE_ALL,
            "TrainersReady=False Restarting",
            "Normal Restarting",
        ),
        row(
            "a-missing-rank",
            observed(sts(2), trainer(0, "Running"), obj("Service", f"{NAME}-trainers")),
            "Training",
            [f"create {PODS[1]}"],
            "TrainersReady=False Starting",
            "Normal Starting",
        ),
        row(
            "all-running-progress-copied",
            observed(
                sts(2), *RUNNING, progress(progress={"epoch": 1, "step": 40}, rank_0=FRESH, rank_1=FRESH)
            ),
            "Training",
            [],
            "TrainersReady=True Running, Stalled=False Progressing",
            "Normal Running, Normal Progressing",
            progress={"epoch": 1, "epochs": 0, "step": 40, "summary": ""},
            trainersRanAttempt=0,
        ),
        row(
            "a-silent-rank",
            observed(
                sts(2),
                trainer(0, "Running", start=EARLY),
                trainer(1, "Running", start=EARLY),
                progress(rank_0=FRESH, rank_1=SILENT),
            ),
            "Training",
            [],
            "TrainersReady=True Running, Stalled=True NoProgress",
            "Normal Running, Warning NoProgress",
            trainersRanAttempt=0,
        ),
        row(
            "failed-restart",
            observed(sts(2), trainer(0, "Running"), trainer(1, "Failed")),
            "Restarting",
            DELETE_ALL,
            "TrainersReady=False TrainerFailed",
            "Warning TrainerFailed",
            restarts=1,
        ),
        row(
            "failed-backoff-used-up",
            observed(sts(2), trainer(0, "Running", 1), trainer(1, "Failed", 1), status={"restarts": 1}),
            "Failed",
            [*STOP_SHARDS, f"delete {PODS[0]}"],  # cleanPodPolicy Running: the rank still running stops
            "TrainersReady=False TrainerFailed, Failed=True BackoffLimitExceeded",
            "Warning TrainerFailed, Warning BackoffLimitExceeded",
        ),
        row(
            "failed-no-backoff",
            observed(sts(2), trainer(0, "Failed"), trainer(1, "Running"), **{"runPolicy.backoffLimit": 0}),
            "Failed",
            [*STOP_SHARDS, f"delete {PODS[1]}"],
            "TrainersReady=False TrainerFailed, Failed=True TrainerFailed",
            "Warning TrainerFailed, Warning TrainerFailed",
        ),
        row(
            "all-succeeded",
            observed(sts(2), trainer(0, "Succeeded"), trainer(1, "Succeeded")),
            "Succeeded",
            STOP_SHARDS,
            "TrainersReady=False Completed, Succeeded=True Completed",
            "Normal Completed, Normal Completed",
        ),
    ],
)
def test_trainers_stage(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(stages.trainers_stage, o) == (phase, actions, conds, events, status)


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "succeeded",
            observed(sts(2), status={"phase": "Succeeded", "conditions": [*KEPT, ended_as("Succeeded")]}),
            "Succeeded",
            STOP_SHARDS,  # a StatefulSet seen after the end (a delete that failed) is deleted again
            f"{KEPT_CONDS}, Succeeded=True Completed",
            "",
        ),
        row(
            "failed-past-its-deadline",
            observed(
                trainer(0, "Running"),
                status={"phase": "Failed", "conditions": [*KEPT, ended_as("Failed")]},
                now=NOW + 9 * MINUTE,
                **DEADLINE,
            ),
            "Failed",
            [f"delete {PODS[0]}"],  # a trainer still running after the end is stopped
            f"{KEPT_CONDS}, Failed=True TrainerFailed",
            "",
        ),
        row("no-deadline", observed(status=since("2026-11-22T11:00:00Z")), None, [], "", ""),
        row(
            "before-the-deadline",
            observed(status=since("2026-11-22T11:59:01Z"), **DEADLINE),
            None,
            [],
            "",
            "",
        ),
        row(
            "deadline-while-training",
            observed(
                job("succeeded"),
                sts(2),
                trainer(0, "Running"),
                trainer(1, "Succeeded"),
                status=since("2026-11-22T11:59:00Z", conditions=KEPT),
                **DEADLINE,
            ),
            "Failed",
            [f"delete {PODS[0]}", *STOP_SHARDS],
            KEPT_CONDS + ", Failed=True DeadlineExceeded",
            "Warning DeadlineExceeded",
        ),
        row(
            "deadline-while-partitioning",
            observed(
                job("running"),
                status={"phase": "Partitioning", "startTime": "2026-11-22T11:58:00Z"},
                **DEADLINE,
            ),
            "Failed",
            [f"delete Job/{NAME}-partition"],
            "Failed=True DeadlineExceeded",
            "Warning DeadlineExceeded",
        ),
    ],
)
def test_terminal_stage(o: Observed, phase, actions, conds, events, status) -> None:
    assert run(lifecycle.terminal_stage, o) == (phase, actions, conds, events, status)


@pytest.mark.parametrize(
    ("applied", "current", "expected", "generation", "run_policy"),
    [
        ({}, {}, {"SpecValid": "True Valid"}, 2, 1),
        (None, {}, {"SpecValid": "True Valid"}, 2, 1),
        (
            None,
            {"training.fanouts": [10]},
            {"SpecValid": "False InvalidSpec", "Failed": "True InvalidSpec"},
            2,
            None,
        ),
        ({}, {"training.epochs": 50}, {"SpecValid": "False UpdateRefused"}, 1, 1),
        ({}, {"runPolicy.backoffLimit": 3}, {"SpecValid": "True Valid"}, 2, 3),
        ({}, {"training.fanouts": [10]}, {"SpecValid": "False UpdateRefused"}, 1, 1),
    ],
    ids=["applied-unchanged", "first", "invalid-first", "refused", "run-policy-applies", "invalid-update"],
)
def test_spec_stage(
    applied: dict | None, current: dict, expected: dict, generation: int, run_policy: int | None
) -> None:
    """`applied`: overrides of the spec in the config ConfigMap (None: not made yet); `current`: of the
    GraphTraining's spec, at generation 2 (the status observed generation 1)."""
    body = training(**current)
    body["metadata"]["generation"] = 2
    body["status"] = {"observedGeneration": 1}
    kids = {}
    if applied is not None:
        applied_body = training(**applied)
        cm = manifests.config_map(applied_body, parse(applied_body))
        kids[key("ConfigMap", cm["metadata"]["name"])] = cm
    conds = vocab.Conditions([], "T", 2)
    decided = spec_stage.spec_stage(Observed(body, kids, [], NOW), conds)
    assert {str(c.type): f"{c.status} {c.reason}" for c in conds.as_list()} == expected
    assert decided.observed_generation == generation
    if run_policy is None:
        assert decided.gt is None
    else:
        assert decided.gt is not None and decided.gt.spec.run_policy.backoff_limit == run_policy
        assert decided.gt.spec.training.epochs == 2  # the applied spec's, whatever changed
    for e in conds.events():
        assert e.type == ("Normal" if e.reason == "Valid" else "Warning")
