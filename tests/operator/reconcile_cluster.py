"""plan()'s test helpers: a small "cluster" dict that stands in for the API server (the test applies
each plan's creates and deletes to it and plays the kubelet by writing job, StatefulSet and pod status),
literal training specs and observed objects, shared by the reconcile tests."""

from __future__ import annotations

import copy
import datetime as dt
import json

import pytest

from graphtrain.contract import conditions as vocab
from graphtrain.contract.children import LABEL_ATTEMPT, LABEL_RANK, labels, trainer_name
from graphtrain.contract.spec import Phase, parse
from graphtrain.operator import manifests
from graphtrain.operator.config import built_in
from graphtrain.operator.context import Context, Plan
from graphtrain.operator.observation import Observed, key
from graphtrain.operator.reconcile import plan

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


def sts(ready: int) -> dict:
    return obj("StatefulSet", f"{NAME}-shards", {"replicas": 2, "readyReplicas": ready}, api="apps/v1")


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
WAS_PARTITIONING = [
    {"type": "PartitionReady", "status": "False", "reason": "Partitioning", "lastTransitionTime": "T0"}
]
SVC = [
    obj("Service", f"{NAME}-shards"),
    obj("NetworkPolicy", f"{NAME}-shards", api="networking.k8s.io/v1"),
    obj("NetworkPolicy", f"{NAME}-trainers", api="networking.k8s.io/v1"),
    obj("PodDisruptionBudget", f"{NAME}-shards", api="policy/v1"),
]


FRESH = {"updated_at": "2026-11-22T11:59:55Z", "step": 5}
SILENT = {"updated_at": "2026-11-22T11:50:00Z", "step": 1}
PODS = [f"Pod/{NAME}-trainer-0", f"Pod/{NAME}-trainer-1"]
DELETE_ALL = [f"delete {p}" for p in PODS]
STOP_SHARDS = [f"delete StatefulSet/{NAME}-shards"]
RUNNING = (trainer(0, "Running"), trainer(1, "Running"))
EARLY = "2026-11-22T11:40:00Z"  # pods started before their ranks' last reports


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


def running_cluster(**spec) -> Cluster:
    """A training in phase Training: partitioned, both shard servers ready, both trainers running."""
    c = Cluster(training(**spec))
    to_training(c)
    c.trainers("Running")
    assert c.step().status["phase"] == "Training"
    return c


def deleted(c: Cluster) -> None:
    c.body["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:30Z"
