"""plan(): every phase transition and failure of a GraphTraining, table-driven with literal objects.

A small "cluster" dict stands in for the API server: the test applies each plan's creates and deletes
to it and plays the kubelet by writing job, StatefulSet and pod status."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
from pathlib import Path
from unittest import mock

import pytest

from graphtrain.operator import manifests as M
from graphtrain.operator import reconcile as R
from graphtrain.operator.config import built_in
from graphtrain.operator.reconcile import Observed, Plan, key, plan
from graphtrain.runtime import spec as S
from graphtrain.runtime.data.datasets import fetch
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.spec import conditions as C
from graphtrain.runtime.spec.roles import ENV_OFFLINE

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
NAME, NS = "wn", "ml"
# the partition pod's report (its termination message)
STATS = {
    "algorithm": "metis",
    "parts": 2,
    "numNodes": 100,
    "numEdges": 300,
    "cutEdges": 9,
    "edgeCutFraction": 0.03,
}


def training(**spec_overrides) -> dict:
    spec = {
        "graph": {"dataset": "wordnet"},
        "partition": {"parts": 2},
        "embeddings": [{"name": "node", "dim": 16}],
        "model": {"nodeEmbedding": "node", "featureProjection": 64},
        "training": {"epochs": 2},
        "trainers": {"replicas": 2},
        "runPolicy": {"backoffLimit": 1, "stallTimeoutSeconds": 60},
    }
    for dotted, value in spec_overrides.items():
        node = spec
        *path, last = dotted.split(".")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = value
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-1", "generation": 1},
        "spec": spec,
    }


class Cluster:
    """The training, its children and pods; apply() runs a plan like k8s.apply does."""

    def __init__(self, body: dict):
        self.body = body
        self.children: dict[str, dict] = {}
        self.now = NOW
        self.events: list[C.Event] = []  # every event posted so far

    def observe(self) -> Observed:
        pods = [o for k, o in self.children.items() if k.startswith("Pod/")]
        return Observed(copy.deepcopy(self.body), copy.deepcopy(self.children), copy.deepcopy(pods), self.now)

    def step(self) -> Plan:
        p = plan(self.observe(), token="t0k3n")
        check_events(p)
        self.events += p.events
        for a in p.actions:
            k = key(a.obj["kind"], a.obj["metadata"]["name"])
            if a.verb == "create":
                self.children[k] = copy.deepcopy(a.obj)
            else:
                self.children.pop(k, None)
        self.body["status"] = p.status
        return p

    def set_status(self, kind: str, name: str, status: dict) -> None:
        self.children[key(kind, name)]["status"] = status

    def pod(self, name: str, role: str, phase: str, **extra) -> None:
        labels = M.labels(NAME, role, **extra.pop("labels", {}))
        self.children[key("Pod", name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "status": {"phase": phase, **extra},
        }

    def finish_partition(self) -> None:
        self.set_status(
            "Job",
            f"{NAME}-partition",
            {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
        )
        stats = {**STATS, "balance": {"nodes": 1.02}}
        term = {"state": {"terminated": {"exitCode": 0, "message": json.dumps(stats)}}}
        self.pod(f"{NAME}-partition-x1", "partition", "Succeeded", containerStatuses=[term])

    def ready_shards(self, ready: int = 2, restarts: int = 0) -> None:
        self.set_status("StatefulSet", f"{NAME}-shards", {"readyReplicas": ready, "replicas": 2})
        for i in range(2):
            ok = "True" if i < ready else "False"
            self.pod(
                f"{NAME}-shards-{i}",
                "shards",
                "Running",
                conditions=[{"type": "Ready", "status": ok}],
                containerStatuses=[{"restartCount": restarts if i == 1 else 0, "state": {}}],
            )

    def trainers(self, phase: str, attempt: int = 0, **per_rank: str) -> None:
        for r in range(2):
            name = M.trainer_name(NAME, r)
            if key("Pod", name) in self.children:
                self.children[key("Pod", name)]["status"] = {
                    "phase": per_rank.get(f"r{r}", phase),
                    "startTime": "2026-11-22T11:59:00Z",
                    "containerStatuses": [
                        {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "boom"}}}
                    ]
                    if per_rank.get(f"r{r}", phase) == "Failed"
                    else [],
                }


def check_events(p: Plan) -> None:
    """Every event has the severity the vocabulary gives its reason (or its phase)."""
    for e in p.events:
        if e.message.startswith("phase "):
            assert e.type == C.phase_severity(S.Phase(e.reason)), e
        else:
            assert e.type == C.severity(C.Reason(e.reason)), e


def cond(p: Plan, kind: str) -> dict:
    return next(c for c in p.status["conditions"] if c["type"] == kind)


def kinds(p: Plan, verb: str) -> list[str]:
    return sorted(a.key for a in p.actions if a.verb == verb)


def test_a_new_training_gets_its_base_children_and_partition_job() -> None:
    c = Cluster(training())
    p = c.step()
    assert p.status["phase"] == "Partitioning"
    assert kinds(p, "create") == sorted(
        [
            f"ConfigMap/{NAME}-config",
            f"ConfigMap/{NAME}-progress",
            f"Secret/{NAME}-token",
            f"ServiceAccount/{NAME}-trainer",
            f"Role/{NAME}-trainer",
            f"RoleBinding/{NAME}-trainer",
            f"PersistentVolumeClaim/{NAME}-data",
            f"Job/{NAME}-partition",
        ]
    )
    for a in p.actions:
        assert a.obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert a.obj["metadata"]["labels"][M.LABEL_TRAINING] == NAME
    assert cond(p, "SpecValid")["status"] == "True"
    assert [e.reason for e in p.events][0] == "Partitioning"
    assert p.status["observedGeneration"] == 1
    assert c.step().actions == []  # idempotent: nothing more while the job runs


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"training.fanouts": [10]}, "spec.training.fanouts"),
        ({"model.nodeEmbedding": "nope"}, "spec.model.nodeEmbedding"),
        ({"partition.parts": 0}, "spec.partition.parts"),
    ],
)
def test_an_invalid_spec_fails_with_no_children(overrides: dict, needle: str) -> None:
    p = Cluster(training(**overrides)).step()
    assert p.actions == []
    assert p.status["phase"] == "Failed"
    assert cond(p, "SpecValid")["status"] == "False" and needle in cond(p, "SpecValid")["message"]
    assert any(e.type == "Warning" for e in p.events)


def test_a_failed_partition_job_fails_the_training_with_its_reason() -> None:
    c = Cluster(training())
    c.step()
    c.set_status(
        "Job",
        f"{NAME}-partition",
        {
            "failed": 2,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ],
        },
    )
    p = c.step()
    assert p.status["phase"] == "Failed"
    assert cond(p, "PartitionReady")["reason"] == "PartitionFailed"
    assert "BackoffLimitExceeded" in cond(p, "Failed")["message"]
    assert "completionTime" in p.status
    assert c.step().actions == []  # terminal


def test_a_failed_partition_says_why_in_the_pods_own_words() -> None:
    """Offline mode's "not pre-seeded" error reaches the conditions and the Warning event: the pod's
    termination message is its log's tail (FallbackToLogsOnError), whose last line is the error."""
    c = Cluster(training())
    c.step()
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff"}
    c.set_status("Job", f"{NAME}-partition", {"failed": 1, "conditions": [failed]})
    data = "/var/lib/graphtrain/data"  # the pod's, as manifests.Layout puts it
    with mock.patch.dict(os.environ, {ENV_OFFLINE: "1"}), pytest.raises(DataError) as refused:
        fetch("wordnet", Path(data))
    said = f"error: {refused.value}"  # the runtime's own words, whole: the pre-seed command must survive
    tail = f"loading the graph\n{said}\n"
    term = {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": tail}}}
    c.pod(f"{NAME}-partition-x1", "partition", "Failed", containerStatuses=[term])
    p = c.step()
    assert f"graphtrain data fetch wordnet --data-dir {data}`" in said
    assert p.status["phase"] == "Failed"
    assert cond(p, "PartitionReady")["message"].endswith(said) and said in cond(p, "Failed")["message"]
    assert any(e.type == "Warning" and said in e.message for e in p.events)
    assert "loading the graph" not in cond(p, "PartitionReady")["message"]


def test_the_partition_job_falls_back_to_its_log_on_error() -> None:
    job = M.partition_job(training(), S.parse(training()), built_in())
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def to_training(c: Cluster) -> Plan:
    c.step()
    c.finish_partition()
    p = c.step()
    assert p.status["phase"] == "Starting"
    assert kinds(p, "create") == sorted(
        f"{k}/{NAME}-shards" for k in ("Service", "NetworkPolicy", "PodDisruptionBudget", "StatefulSet")
    )
    assert p.status["partition"]["cutEdges"] == 9 and cond(p, "PartitionReady")["status"] == "True"
    assert cond(p, "ShardsReady")["status"] == "False"
    c.ready_shards()
    p = c.step()
    assert p.status["phase"] == "Training"
    assert kinds(p, "create") == [
        f"Pod/{NAME}-trainer-0",
        f"Pod/{NAME}-trainer-1",
        f"Service/{NAME}-trainers",
    ]
    assert cond(p, "ShardsReady")["status"] == "True"
    return p


def test_partition_then_shards_then_trainers() -> None:
    c = Cluster(training())
    p = to_training(c)
    pod = next(a.obj for a in p.actions if a.key == f"Pod/{NAME}-trainer-1")
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--rank") + 1] == "1" and args[args.index("--world") + 1] == "2"
    assert f"tcp://{NAME}-shards-1.{NAME}-shards.{NS}.svc:7000" in args[args.index("--servers") + 1]
    assert pod["metadata"]["labels"][M.LABEL_ATTEMPT] == "0"
    c.trainers("Running")
    c.children[key("ConfigMap", f"{NAME}-progress")]["data"] = {
        "progress": json.dumps(
            {"epoch": 1, "epochs": 2, "step": 40, "loss": 0.5, "updated_at": "2026-11-22T11:59:50Z"}
        ),
        "rank-0": json.dumps({"updated_at": "2026-11-22T11:59:50Z"}),
        "rank-1": json.dumps({"updated_at": "2026-11-22T11:59:40Z"}),
    }
    p = c.step()
    assert p.status["phase"] == "Training" and p.status["progress"]["step"] == 40
    assert cond(p, "TrainersReady")["status"] == "True" and cond(p, "Stalled")["status"] == "False"


def test_all_trainers_succeed() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Succeeded")
    p = c.step()
    assert p.status["phase"] == "Succeeded" and cond(p, "Succeeded")["status"] == "True"
    assert kinds(p, "delete") == [f"StatefulSet/{NAME}-shards"]  # shard servers stop with the job
    assert c.step().actions == []
    assert [e for e in c.events if e.type == "Warning"] == []  # a success warns of nothing
    assert {"Completed", "Succeeded"} <= {e.reason for e in p.events}


def test_a_failed_trainer_restarts_every_rank_from_the_checkpoint_then_gives_up() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Running", r1="Failed")
    p = c.step()
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert kinds(p, "delete") == [f"Pod/{NAME}-trainer-0", f"Pod/{NAME}-trainer-1"]
    assert "wn-trainer-1 failed (Error, exit code 1): boom" in cond(p, "TrainersReady")["message"]
    assert any(e.type == "Warning" and e.reason == "TrainerFailed" for e in p.events)
    p = c.step()  # pods gone: the next attempt
    assert p.status["phase"] == "Restarting"
    created = [a.obj for a in p.actions if a.obj["kind"] == "Pod"]
    assert len(created) == 2 and all(o["metadata"]["labels"][M.LABEL_ATTEMPT] == "1" for o in created)
    c.trainers("Running")
    assert c.step().status["phase"] == "Training"
    c.trainers("Running", r0="Failed")  # backoffLimit 1 is used up
    p = c.step()
    assert p.status["phase"] == "Failed" and p.status["restarts"] == 1
    assert (
        cond(p, "Failed")["reason"] == "BackoffLimitExceeded"
        and "wn-trainer-0" in cond(p, "Failed")["message"]
    )


def test_stale_pods_of_an_earlier_attempt_are_removed_first() -> None:
    c = Cluster(training())
    to_training(c)
    c.body["status"]["restarts"] = 1  # e.g. the operator restarted after deciding a restart
    p = c.step()
    assert p.status["phase"] == "Restarting" and kinds(p, "delete") == [
        f"Pod/{NAME}-trainer-0",
        f"Pod/{NAME}-trainer-1",
    ]


def test_a_restarting_shard_marks_shards_not_ready_and_trainers_wait() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Running")
    c.ready_shards(ready=1, restarts=2)
    p = c.step()
    assert p.status["phase"] == "Training" and p.actions == []
    assert cond(p, "ShardsReady")["status"] == "False" and "1/2" in cond(p, "ShardsReady")["message"]
    assert [s["state"] for s in p.status["shards"]] == ["Ready", "Loading"]
    assert p.status["shards"][1]["restarts"] == 2


def test_no_heartbeat_for_the_stall_timeout_names_the_silent_rank() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Running")
    c.children[key("ConfigMap", f"{NAME}-progress")]["data"] = {
        "rank-0": json.dumps({"updated_at": "2026-11-22T11:59:55Z"}),
        "rank-1": json.dumps({"updated_at": "2026-11-22T11:50:00Z"}),
    }
    p = c.step()
    assert cond(p, "Stalled")["status"] == "True" and "rank 1" in cond(p, "Stalled")["message"]
    assert any(e.type == "Warning" and e.reason == "NoProgress" for e in p.events)


def test_a_spec_change_to_a_running_job_is_refused_but_run_policy_applies() -> None:
    c = Cluster(training())
    to_training(c)
    c.trainers("Running")
    c.body["spec"]["training"]["epochs"] = 50
    c.body["metadata"]["generation"] = 2
    p = c.step()
    refused = cond(p, "SpecValid")
    assert (
        refused["status"] == "False"
        and refused["reason"] == "UpdateRefused"
        and "spec.training" in refused["message"]
    )
    assert p.status["observedGeneration"] == 1 and p.actions == [] and p.status["phase"] == "Training"
    c.body["spec"]["training"]["epochs"] = 2
    c.body["spec"]["runPolicy"]["backoffLimit"] = 3
    c.body["metadata"]["generation"] = 3
    p = c.step()
    assert cond(p, "SpecValid")["status"] == "True" and p.status["observedGeneration"] == 3
    c.trainers("Running", r1="Failed")
    assert c.step().status["restarts"] == 1  # the new backoffLimit counts


def test_condition_times_are_kept_while_the_status_holds() -> None:
    c = Cluster(training())
    first = cond(c.step(), "SpecValid")["lastTransitionTime"]
    c.now = NOW + dt.timedelta(minutes=5)
    assert cond(c.step(), "SpecValid")["lastTransitionTime"] == first


def test_every_rendered_manifest_is_valid_kubernetes() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    c = Cluster(
        training(**{"shardServers.device": "cuda", "shardServers.resources": {"limits": {"memory": "8Gi"}}})
    )
    objs = [a.obj for a in c.step().actions]
    c.finish_partition()
    objs += [a.obj for a in c.step().actions]
    c.ready_shards()
    objs += [a.obj for a in c.step().actions]
    assert {o["kind"] for o in objs} >= {
        "ConfigMap",
        "Secret",
        "Job",
        "StatefulSet",
        "Service",
        "Pod",
        "Role",
        "NetworkPolicy",
        "PodDisruptionBudget",
    }
    for o in objs:
        kv.validate(o, "1.33.0", strict=True)
    sts = next(o for o in objs if o["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "tcp://$(POD_IP):7000" in container["args"]
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert pod_ip in container["env"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["securityContext"]["runAsNonRoot"] is True


# ------------------------------------------------------------------------------------ stage tables
# Each stage of plan() on its own: literal observed objects in; actions, status, conditions and events
# (with their types) out. A row names only what the stage observes; conditions and events are those the
# stage sets (no previous status unless the row gives one).

MINUTE = dt.timedelta(minutes=1)


def obj(kind: str, name: str, status: dict | None = None, api: str = "v1", **meta) -> dict:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, **meta},
        "status": status or {},
    }


def job(outcome: str) -> dict:
    status = {
        "running": {"active": 1},
        "succeeded": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
        "failed": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
    }[outcome]
    return obj("Job", f"{NAME}-partition", status, api="batch/v1")


def partition_pod(message: str) -> dict:
    term = {"state": {"terminated": {"exitCode": 0, "message": message}}}
    return obj(
        "Pod",
        f"{NAME}-partition-x1",
        {"phase": "Succeeded", "containerStatuses": [term]},
        labels=M.labels(NAME, "partition"),
    )


def sts(ready: int) -> dict:
    return obj("StatefulSet", f"{NAME}-shards", {"replicas": 2, "readyReplicas": ready}, api="apps/v1")


def shard_pod(i: int, ready: bool, phase: str = "Running", restarts: int = 0) -> dict:
    status = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [{"restartCount": restarts, "state": {}}],
    }
    return obj("Pod", f"{NAME}-shards-{i}", status, labels=M.labels(NAME, "shards"))


def trainer(rank: int, phase: str, attempt: int = 0) -> dict:
    status: dict = {"phase": phase, "startTime": "2026-11-22T11:59:00Z"}
    if phase == "Failed":
        status["containerStatuses"] = [
            {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "boom"}}}
        ]
    labels = M.labels(NAME, "trainer", **{M.LABEL_RANK: str(rank), M.LABEL_ATTEMPT: str(attempt)})
    return obj("Pod", M.trainer_name(NAME, rank), status, labels=labels)


def progress(**data: dict) -> dict:
    cm = obj("ConfigMap", f"{NAME}-progress")
    cm["data"] = {k.replace("_", "-"): json.dumps(v) for k, v in data.items()}
    return cm


def observed(*children: dict, status: dict | None = None, now: dt.datetime = NOW, **spec) -> Observed:
    body = training(**spec)
    if status is not None:
        body["status"] = status
    kids = {key(o["kind"], o["metadata"]["name"]): o for o in children}
    return Observed(body, kids, [o for o in children if o["kind"] == "Pod"], now)


def context(o: Observed) -> R.Context:
    return R.Context(
        o, S.parse({k: o.training[k] for k in ("apiVersion", "kind", "metadata", "spec")}), token="t0k3n"
    )


def row(name: str, o: Observed, phase: str | None, actions: list[str], conds: str, events: str, **status):
    """One row of a stage table: observed objects in; the phase decided (None: on to the next stage), the
    actions ("verb Kind/name", any order), the conditions set ("Type=Status Reason, ..."), the events in
    order ("Type Reason, ..."), and the status fields the stage reports."""
    return pytest.param(o, phase, sorted(actions), conds, events, status, id=name)


def run(stage, o: Observed) -> tuple[str | None, list[str], str, str, dict]:
    """A stage's result in the tables' terms (the previous conditions are the observed status')."""
    conds = C.Conditions(C.parse((o.training.get("status") or {}).get("conditions") or []), "T")
    step = stage(context(o), conds)
    return (
        step.phase.value if step.phase else None,
        sorted(f"{a.verb} {a.key}" for a in step.actions),
        ", ".join(f"{c.type}={c.status} {c.reason}" for c in conds.as_list()),
        ", ".join(f"{e.type} {e.reason}" for e in conds.events()),
        step.status,
    )


TABLE = ("o", "phase", "actions", "conds", "events", "status")


def base() -> list[dict]:
    """The children the partition stage makes, as observed once made (the data claim last)."""
    gt = S.parse(training())
    body = training()
    return [
        M.config_map(body, gt),
        M.token_secret(body, gt, "x"),
        M.progress_map(body, gt),
        *M.trainer_rbac(body, gt),
        M.data_claim(body, gt, built_in()),
    ]


BASE = [f"ConfigMap/{NAME}-config", f"ConfigMap/{NAME}-progress", f"Secret/{NAME}-token"]
BASE += [f"{k}/{NAME}-trainer" for k in ("ServiceAccount", "Role", "RoleBinding")]
BASE += [f"PersistentVolumeClaim/{NAME}-data", f"Job/{NAME}-partition"]
PARTITIONED = {
    **STATS,
    "balance": {},
    "nodesPerPart": [],
    "edgesPerPart": [],
    "haloPerPart": [],
    "seconds": 0.0,
}
WAS_PARTITIONING = [
    {"type": "PartitionReady", "status": "False", "reason": "Partitioning", "lastTransitionTime": "T0"}
]


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
    assert run(R.partition_stage, o) == (phase, actions, conds, events, status)


SHARDS = [
    f"create {k}/{NAME}-shards" for k in ("Service", "NetworkPolicy", "PodDisruptionBudget", "StatefulSet")
]
SVC = [
    obj("Service", f"{NAME}-shards"),
    obj("NetworkPolicy", f"{NAME}-shards", api="networking.k8s.io/v1"),
    obj("PodDisruptionBudget", f"{NAME}-shards", api="policy/v1"),
]


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
    assert run(R.shards_stage, o) == (phase, actions, conds, events, status)


FRESH = {"updated_at": "2026-11-22T11:59:55Z", "step": 5}
SILENT = {"updated_at": "2026-11-22T11:50:00Z", "step": 1}
PODS = [f"Pod/{NAME}-trainer-0", f"Pod/{NAME}-trainer-1"]
CREATE_ALL = [*(f"create {p}" for p in PODS), f"create Service/{NAME}-trainers"]
DELETE_ALL = [f"delete {p}" for p in PODS]
STOP_SHARDS = [f"delete StatefulSet/{NAME}-shards"]
RUNNING = (trainer(0, "Running"), trainer(1, "Running"))


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
            observed(sts(2), trainer(0, "Running")),
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
        ),
        row(
            "a-silent-rank",
            observed(sts(2), *RUNNING, progress(rank_0=FRESH, rank_1=SILENT)),
            "Training",
            [],
            "TrainersReady=True Running, Stalled=True NoProgress",
            "Normal Running, Warning NoProgress",
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
            STOP_SHARDS,
            "TrainersReady=False TrainerFailed, Failed=True BackoffLimitExceeded",
            "Warning TrainerFailed, Warning BackoffLimitExceeded",
        ),
        row(
            "failed-no-backoff",
            observed(sts(2), trainer(0, "Failed"), trainer(1, "Running"), **{"runPolicy.backoffLimit": 0}),
            "Failed",
            STOP_SHARDS,
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
    assert run(R.trainers_stage, o) == (phase, actions, conds, events, status)


KEPT = [
    {"type": "PartitionReady", "status": "True", "reason": "Partitioned", "lastTransitionTime": "T0"},
    {"type": "TrainersReady", "status": "True", "reason": "Running", "lastTransitionTime": "T0"},
]
KEPT_CONDS = "PartitionReady=True Partitioned, TrainersReady=True Running"
DEADLINE = {"runPolicy.activeDeadlineSeconds": 60}


def since(start: str, **extra) -> dict:
    return {"phase": "Training", "startTime": start, **extra}


@pytest.mark.parametrize(
    TABLE,
    [
        row(
            "succeeded",
            observed(sts(2), status={"phase": "Succeeded", "conditions": KEPT}),
            "Succeeded",
            [],
            KEPT_CONDS,
            "",
        ),
        row(
            "failed-past-its-deadline",
            observed(
                trainer(0, "Running"),
                status={"phase": "Failed", "conditions": KEPT},
                now=NOW + 9 * MINUTE,
                **DEADLINE,
            ),
            "Failed",
            [],
            KEPT_CONDS,
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
    assert run(R.terminal_stage, o) == (phase, actions, conds, events, status)


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
        cm = M.config_map(applied_body, S.parse(applied_body))
        kids[key("ConfigMap", cm["metadata"]["name"])] = cm
    conds = C.Conditions([], "T", 2)
    decided = R.spec_stage(Observed(body, kids, [], NOW), conds)
    assert {str(c.type): f"{c.status} {c.reason}" for c in conds.as_list()} == expected
    assert decided.observed_generation == generation
    if run_policy is None:
        assert decided.gt is None
    else:
        assert decided.gt is not None and decided.gt.spec.run_policy.backoff_limit == run_policy
        assert decided.gt.spec.training.epochs == 2  # the applied spec's, whatever changed
    for e in conds.events():
        assert e.type == ("Normal" if e.reason == "Valid" else "Warning")


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
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "Failed"), ("Warning", "DeadlineExceeded")]
    assert cond(p, "TrainersReady")["status"] == "True"  # as last observed
    assert "completionTime" in p.status
    assert c.step().actions == []  # terminal


def test_no_deadline_asks_for_no_requeue() -> None:
    assert Cluster(training()).step().requeue_after is None


def to_training_from(c: Cluster) -> None:
    c.finish_partition()
    c.step()
    c.ready_shards()
    c.step()


def test_a_training_being_deleted_is_left_alone() -> None:
    c = Cluster(training())
    c.step()
    c.body["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:30Z"
    c.children.clear()  # its children are being deleted
    p = c.step()
    assert p.actions == [] and p.events == [] and p.status == c.body["status"]
