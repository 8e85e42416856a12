"""plan(): every phase transition and failure of a GraphTraining, table-driven with literal objects.

A small "cluster" dict stands in for the API server: the test applies each plan's creates and deletes
to it and plays the kubelet by writing job, StatefulSet and pod status."""

from __future__ import annotations

import copy
import datetime as dt
import json

import pytest

from graphtrain.operator import manifests as M
from graphtrain.operator.reconcile import Observed, Plan, key, plan
from graphtrain.runtime import spec as S
from graphtrain.runtime.spec import conditions as C

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
NAME, NS = "wn", "ml"


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
        stats = {
            "algorithm": "metis",
            "parts": 2,
            "numNodes": 100,
            "numEdges": 300,
            "cutEdges": 9,
            "edgeCutFraction": 0.03,
            "balance": {"nodes": 1.02},
        }
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


def to_training(c: Cluster) -> Plan:
    c.step()
    c.finish_partition()
    p = c.step()
    assert p.status["phase"] == "Starting"
    assert kinds(p, "create") == [f"Service/{NAME}-shards", f"StatefulSet/{NAME}-shards"]
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
    }
    for o in objs:
        kv.validate(o, "1.33.0", strict=True)
    sts = next(o for o in objs if o["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["exec"]["command"][:2] == ["graphtrain", "health"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["securityContext"]["runAsNonRoot"] is True
