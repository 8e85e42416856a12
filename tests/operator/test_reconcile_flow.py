"""plan() from a new training to its end, on a small "cluster" dict standing in for the API server: the
test applies each plan's creates and deletes to it and plays the kubelet (reconcile_cluster.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from unittest import mock

import pytest

from graphtrain.contract.children import LABEL_ATTEMPT, LABEL_TRAINING, trainer_name
from graphtrain.contract.roles import ENV_OFFLINE
from graphtrain.contract.spec import parse
from graphtrain.operator import manifests
from graphtrain.operator.config import built_in
from graphtrain.operator.observation import key
from graphtrain.runtime.data.datasets import fetch
from graphtrain.runtime.errors import DataError
from tests.operator.reconcile_cluster import (
    NAME,
    NOW,
    NS,
    Cluster,
    cond,
    kinds,
    to_training,
    training,
)


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
