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

from graphtrain.contract import conditions as vocab
from graphtrain.contract.children import LABEL_ATTEMPT, LABEL_RANK, LABEL_TRAINING, labels, trainer_name
from graphtrain.contract.roles import ENV_OFFLINE
from graphtrain.contract.spec import API_VERSION, ConditionType, Phase, parse
from graphtrain.operator import lifecycle, manifests, observation, spec_stage, stages
from graphtrain.operator.config import built_in
from graphtrain.operator.context import Context, Plan
from graphtrain.operator.observation import Observed, key
from graphtrain.operator.reconcile import plan
from graphtrain.runtime.data.datasets import fetch
from graphtrain.runtime.errors import DataError

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
        # the StatefulSet layout (2 trainers on 2 partitions would default to worker pods: test_workers.py)
        "placement": {"locality": "none"},
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
        self.events: list[vocab.Event] = []  # every event posted so far

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
        pod_labels = labels(NAME, role, **extra.pop("labels", {}))
        self.children[key("Pod", name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": pod_labels},
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
            name = trainer_name(NAME, r)
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
            assert e.type == vocab.phase_severity(Phase(e.reason)), e
        else:
            assert e.type == vocab.severity(vocab.Reason(e.reason)), e


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
        assert a.obj["metadata"]["labels"][LABEL_TRAINING] == NAME
        if a.obj["kind"] == "PersistentVolumeClaim":  # storage.whenDeleted Retain: it outlives the training
            assert "ownerReferences" not in a.obj["metadata"]
        else:
            assert a.obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
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
    job = manifests.partition_job(training(), parse(training()), built_in())
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def to_training(c: Cluster) -> Plan:
    c.step()
    c.finish_partition()
    p = c.step()
    assert p.status["phase"] == "Starting"
    assert kinds(p, "create") == sorted(
        [f"{k}/{NAME}-shards" for k in ("Service", "NetworkPolicy", "PodDisruptionBudget", "StatefulSet")]
        + [f"NetworkPolicy/{NAME}-trainers"]
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
    assert pod["metadata"]["labels"][LABEL_ATTEMPT] == "0"
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
    assert len(created) == 2 and all(o["metadata"]["labels"][LABEL_ATTEMPT] == "1" for o in created)
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
    for r in range(2):
        c.children[key("Pod", trainer_name(NAME, r))]["status"]["startTime"] = "2026-11-22T11:40:00Z"
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


def sts(ready: int) -> dict:
    return obj("StatefulSet", f"{NAME}-shards", {"replicas": 2, "readyReplicas": ready}, api="apps/v1")


def shard_pod(i: int, ready: bool, phase: str = "Running", restarts: int = 0) -> dict:
    status = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [{"restartCount": restarts, "state": {}}],
    }
    return obj("Pod", f"{NAME}-shards-{i}", status, labels=labels(NAME, "shards"))


def trainer(rank: int, phase: str, attempt: int = 0, start: str = "2026-11-22T11:59:00Z", **status) -> dict:
    status = {"phase": phase, "startTime": start, **status}
    if phase == "Failed":
        status["containerStatuses"] = [
            {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "boom"}}}
        ]
    pod_labels = labels(NAME, "trainer", **{LABEL_RANK: str(rank), LABEL_ATTEMPT: str(attempt)})
    return obj("Pod", trainer_name(NAME, rank), status, labels=pod_labels)


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


def context(o: Observed) -> Context:
    return Context(
        o, parse({k: o.training[k] for k in ("apiVersion", "kind", "metadata", "spec")}), token="t0k3n"
    )


def row(name: str, o: Observed, phase: str | None, actions: list[str], conds: str, events: str, **status):
    """One row of a stage table: observed objects in; the phase decided (None: on to the next stage), the
    actions ("verb Kind/name", any order), the conditions set ("Type=Status Reason, ..."), the events in
    order ("Type Reason, ..."), and the status fields the stage reports."""
    return pytest.param(o, phase, sorted(actions), conds, events, status, id=name)


def run(stage, o: Observed) -> tuple[str | None, list[str], str, str, dict]:
    """A stage's result in the tables' terms (the previous conditions are the observed status')."""
    conds = vocab.Conditions(vocab.parse((o.training.get("status") or {}).get("conditions") or []), "T")
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
    gt = parse(training())
    body = training()
    return [
        manifests.config_map(body, gt),
        manifests.token_secret(body, gt, "x"),
        manifests.progress_map(body, gt),
        *manifests.trainer_rbac(body, gt),
        manifests.data_claim(body, gt, built_in()),
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
SVC = [
    obj("Service", f"{NAME}-shards"),
    obj("NetworkPolicy", f"{NAME}-shards", api="networking.k8s.io/v1"),
    obj("NetworkPolicy", f"{NAME}-trainers", api="networking.k8s.io/v1"),
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
    assert run(stages.shards_stage, o) == (phase, actions, conds, events, status)


FRESH = {"updated_at": "2026-11-22T11:59:55Z", "step": 5}
SILENT = {"updated_at": "2026-11-22T11:50:00Z", "step": 1}
PODS = [f"Pod/{NAME}-trainer-0", f"Pod/{NAME}-trainer-1"]
CREATE_ALL = [*(f"create {p}" for p in PODS), f"create Service/{NAME}-trainers"]
DELETE_ALL = [f"delete {p}" for p in PODS]
STOP_SHARDS = [f"delete StatefulSet/{NAME}-shards"]
RUNNING = (trainer(0, "Running"), trainer(1, "Running"))
EARLY = "2026-11-22T11:40:00Z"  # pods started before their ranks' last reports


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


KEPT = [
    {"type": "PartitionReady", "status": "True", "reason": "Partitioned", "lastTransitionTime": "T0"},
    {"type": "TrainersReady", "status": "True", "reason": "Running", "lastTransitionTime": "T0"},
]
KEPT_CONDS = "PartitionReady=True Partitioned, TrainersReady=True Running"


def ended_as(phase: str) -> dict:
    """The condition the operator sets with a terminal phase (a phase without it ends nothing)."""
    reason = "Completed" if phase == "Succeeded" else "TrainerFailed"
    return {"type": phase, "status": "True", "reason": reason, "lastTransitionTime": "T0"}


DEADLINE = {"runPolicy.activeDeadlineSeconds": 60}


def since(start: str, **extra) -> dict:
    return {"phase": "Training", "startTime": start, **extra}


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


def running_cluster(**spec) -> Cluster:
    """A training in phase Training: partitioned, both shard servers ready, both trainers running."""
    c = Cluster(training(**spec))
    to_training(c)
    c.trainers("Running")
    assert c.step().status["phase"] == "Training"
    return c


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


def deleted(c: Cluster) -> None:
    c.body["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:30Z"


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
