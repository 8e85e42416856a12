"""Partition locality (spec.placement.locality, operator/workers.py): a worker pod per partition, its
shard server a native sidecar and its trainers the pod's containers, /dev/shm shared; planned with
literal objects as test_reconcile_stages.py's tests are."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from graphtrain.contract.children import (
    LABEL_ATTEMPT,
    LABEL_PARTITION,
    SHARD_CONTAINER,
    rank_pods,
    worker_name,
)
from graphtrain.contract.spec import SpecError, colocated, parse
from graphtrain.operator import gang, workers
from graphtrain.operator.config import OperatorConfig
from graphtrain.operator.observation import key
from tests.operator.reconcile_cluster import NAME, NS, Cluster, cond, kinds, training
from tests.pod_security import violations

WORKERS = [f"Pod/{worker_name(NAME, p)}" for p in range(2)]


def colocated_training(trainers: int = 2, **extra) -> dict:
    return training(**{"placement.locality": None, "trainers.replicas": trainers, **extra})


def body(trainers: int = 2, **extra) -> dict:
    b = colocated_training(trainers, **extra)
    del b["spec"]["placement"]  # unset: the default decides
    return b


def container_state(c: Cluster, partition: int, states: dict[str, dict], sidecar: dict | None = None) -> None:
    """The kubelet's report of worker `partition`: each trainer container's state, the sidecar's."""
    pod = c.children[key("Pod", worker_name(NAME, partition))]
    trainers = [x["name"] for x in pod["spec"]["containers"]]
    statuses = [{"name": n, "restartCount": 0, "state": states.get(n, {"running": {}})} for n in trainers]
    side = {"name": SHARD_CONTAINER, "ready": True, "restartCount": 0, "state": {"running": {}}}
    running = any("running" in cs["state"] for cs in statuses)
    pod["status"] = {
        "phase": "Running" if running else "Succeeded",
        "startTime": "2026-11-22T11:59:00Z",
        "containerStatuses": statuses,
        "initContainerStatuses": [{**side, **(sidecar or {})}],
    }


def to_workers(c: Cluster) -> None:
    c.step()
    c.finish_partition()
    p = c.step()
    # no StatefulSet, no shard Service: the servers come with the worker pods, made at once
    assert kinds(p, "create") == sorted(
        [
            f"NetworkPolicy/{NAME}-trainers",
            f"PodDisruptionBudget/{NAME}-trainers",
            f"Service/{NAME}-trainers",
            *WORKERS,
        ]
    )
    assert p.status["phase"] == "Starting"  # their servers load, as a StatefulSet's before trainers
    assert cond(p, "ShardsReady")["status"] == "False"


def test_the_default_is_partition_when_the_trainers_divide_evenly() -> None:
    assert colocated(parse(body(2)).spec)
    assert colocated(parse(body(4)).spec)
    assert not colocated(parse(body(3)).spec)
    assert not colocated(parse(body(1)).spec)  # fewer trainers than partitions
    assert not colocated(parse(training()).spec)  # said none


def test_partition_with_uneven_trainers_is_refused_naming_the_field() -> None:
    doc = training(**{"placement.locality": "partition", "trainers.replicas": 3})
    with pytest.raises(SpecError) as err:
        parse(doc)
    said = str(err.value)
    assert "spec.placement.locality" in said and "trainers.replicas (3)" in said and "(2)" in said


def test_a_worker_pod_holds_its_partitions_server_as_a_sidecar_and_its_trainers() -> None:
    gt = parse(body(4))
    pod = workers.worker_pod(gt_body(gt), gt, OperatorConfig(), partition=1, attempt=3)
    spec = pod["spec"]
    assert pod["metadata"]["name"] == worker_name(NAME, 1) and spec["hostname"] == worker_name(NAME, 1)
    assert (
        pod["metadata"]["labels"][LABEL_PARTITION] == "1" and pod["metadata"]["labels"][LABEL_ATTEMPT] == "3"
    )
    assert spec["restartPolicy"] == "Never" and spec["subdomain"] == f"{NAME}-trainers"
    (server,) = spec["initContainers"]
    assert server["name"] == SHARD_CONTAINER and server["restartPolicy"] == "Always"
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    args = server["args"]
    assert "--shm" in args and args[args.index("--shard") + 1] == "1"
    names = [c["name"] for c in spec["containers"]]
    assert names == ["trainer-2", "trainer-3"]  # ranks 2 and 3: partition 1 of 2, 2 trainers each
    shm = next(v for v in spec["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"
    ports = []
    for c in [server, *spec["containers"]]:
        assert {"name": "shm", "mountPath": "/dev/shm"} in c["volumeMounts"], c["name"]
        ports += [p["containerPort"] for p in c.get("ports", [])]
    assert len(ports) == len(set(ports))  # one network namespace: no port twice
    for c in spec["containers"]:
        a = c["args"]
        assert "--shm" in a
        servers = a[a.index("--servers") + 1].split(",")
        assert servers == [f"tcp://{worker_name(NAME, i)}.{NAME}-trainers.{NS}.svc:7000" for i in range(2)]
        assert a[a.index("--init") + 1] == f"tcp://{worker_name(NAME, 0)}.{NAME}-trainers.{NS}.svc:29500"
    assert violations(spec) == []
    # the sidecar's request threads: it shares the pod's cores with its trainers, as in graphtrain run
    assert args[args.index("--workers") + 1] == "2"


def test_every_worker_manifest_is_valid_kubernetes() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    c = Cluster(body(2, **{"shardServers.resources": {"limits": {"memory": "8Gi", "cpu": "2"}}}))
    objs = [a.obj for a in c.step().actions]
    c.finish_partition()
    objs += [a.obj for a in c.step().actions]
    for o in objs:
        kv.validate(o, "1.33.0", strict=True)
    pod = next(o for o in objs if o["kind"] == "Pod")
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}  # the tables live there


def gt_body(gt) -> dict:
    return {"metadata": {"name": NAME, "namespace": NS, "uid": "uid-1"}, "kind": "GraphTraining"}


def test_worker_pods_train_and_succeed_and_the_servers_stop_with_them() -> None:
    c = Cluster(body())
    to_workers(c)
    for p in range(2):
        container_state(c, p, {}, sidecar={"ready": False})
    p = c.step()
    assert cond(p, "ShardsReady")["status"] == "False" and p.status["phase"] == "Starting"
    assert [s["state"] for s in p.status["shards"]] == ["Loading", "Loading"]
    for p_ in range(2):
        container_state(c, p_, {})
    p = c.step()
    assert p.status["phase"] == "Training" and cond(p, "ShardsReady")["status"] == "True"
    assert cond(p, "TrainersReady")["status"] == "True"
    shards = p.status["shards"]
    assert shards[1]["address"] == f"tcp://{worker_name(NAME, 1)}.{NAME}-trainers.{NS}.svc:7000"
    done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    container_state(c, 0, {"trainer-0": done})
    assert c.step().status["phase"] == "Training"  # rank 1 still runs
    container_state(c, 1, {"trainer-1": done})
    for p_ in range(2):  # the trainers ended, the kubelet is stopping the sidecars: pods still Running
        c.children[key("Pod", worker_name(NAME, p_))]["status"]["phase"] = "Running"
    p = c.step()
    assert p.status["phase"] == "Succeeded"
    assert kinds(p, "delete") == []  # kept for `kubectl logs`, as finished trainer pods are
    for p_ in range(2):
        c.children[key("Pod", worker_name(NAME, p_))]["status"]["phase"] = "Succeeded"
    p = c.step()
    assert p.actions == [] and cond(p, "ShardsReady")["reason"] == "Stopped"


def test_a_failed_trainer_container_restarts_every_worker_pod() -> None:
    c = Cluster(body())
    to_workers(c)
    container_state(c, 0, {})
    killed = {"terminated": {"exitCode": 137, "reason": "Error", "message": "killed"}}
    container_state(c, 1, {"trainer-1": killed})
    p = c.step()
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert kinds(p, "delete") == WORKERS  # the servers go too: they restore the checkpoint
    assert "exit code 137" in cond(p, "TrainersReady")["message"]
    p = c.step()
    made = [a.obj for a in p.actions if a.obj["kind"] == "Pod"]
    assert [o["metadata"]["labels"][LABEL_ATTEMPT] for o in made] == ["1", "1"]


def test_a_restarting_sidecar_is_a_shard_not_ready_and_counts_its_restarts() -> None:
    c = Cluster(body())
    to_workers(c)
    container_state(c, 0, {})
    container_state(c, 1, {})
    assert c.step().status["phase"] == "Training"  # every server ready once
    container_state(c, 1, {}, sidecar={"ready": False, "restartCount": 1})
    p = c.step()
    assert p.status["phase"] == "Training" and p.actions == []  # a restart mid-run: still Training
    assert [s["state"] for s in p.status["shards"]] == ["Ready", "Loading"]
    assert p.status["shards"][1]["restarts"] == 1


def test_a_spec_applied_before_locality_keeps_its_statefulset_and_is_not_refused() -> None:
    c = Cluster(body())
    c.step()
    cm = c.children[key("ConfigMap", f"{NAME}-config")]
    assert "locality: partition" in cm["data"]["spec.yaml"]  # the default decided once, applied
    cm["data"]["spec.yaml"] = cm["data"]["spec.yaml"].replace("  placement:\n    locality: partition\n", "")
    assert "placement" not in cm["data"]["spec.yaml"]
    c.finish_partition()
    p = c.step()
    assert f"StatefulSet/{NAME}-shards" in kinds(p, "create")  # what its operator had made
    assert cond(p, "SpecValid")["status"] == "True"


def test_an_unchanged_spec_without_locality_is_not_an_update() -> None:
    c = Cluster(body())
    c.step()
    c.body["metadata"]["generation"] = 2
    p = c.step()
    assert cond(p, "SpecValid")["status"] == "True"
    c.body["spec"]["placement"] = {"locality": "none"}  # a real change: refused
    p = c.step()
    assert (
        cond(p, "SpecValid")["reason"] == "UpdateRefused"
        and "spec.placement" in cond(p, "SpecValid")["message"]
    )


def test_a_gang_of_worker_pods_counts_one_member_per_partition() -> None:
    gt = parse(body(4, **{"scheduling": {"gang": True, "schedulerName": "volcano"}}))
    assert gang.members(gt) == 2


def test_each_rank_of_a_worker_pod_is_judged_by_its_own_container() -> None:
    c = Cluster(body(4))
    to_workers(c)
    container_state(c, 0, {"trainer-1": {"terminated": {"exitCode": 1, "reason": "Error"}}})
    pod = copy.deepcopy(c.children[key("Pod", worker_name(NAME, 0))])
    views = dict(rank_pods(pod))
    assert sorted(views) == [0, 1]
    assert views[0]["status"]["phase"] == "Running" and views[1]["status"]["phase"] == "Failed"
    assert views[1]["metadata"]["name"] == worker_name(NAME, 0)


def test_a_suspension_stops_the_worker_pods_and_a_resumption_makes_them_again() -> None:
    c = Cluster(body())
    to_workers(c)
    for p in range(2):
        container_state(c, p, {})
    assert c.step().status["phase"] == "Training"
    c.body["spec"]["suspend"] = True
    p = c.step()
    assert p.status["phase"] == "Suspended" and kinds(p, "delete") == WORKERS
    assert cond(p, "ShardsReady")["reason"] == "Stopped"
    c.body["spec"]["suspend"] = False
    p = c.step()
    assert [a.key for a in p.actions if a.verb == "create" and a.obj["kind"] == "Pod"] == WORKERS


def test_a_crash_looping_sidecar_is_named_and_fails_the_training_after_the_start_timeout() -> None:
    """Its trainers run (the pod is Running, TrainersReady True) while its server cannot: the shard
    stage names the pod and its reason, and runPolicy.startTimeoutSeconds ends the training."""
    c = Cluster(body(**{"runPolicy.startTimeoutSeconds": 30}))
    to_workers(c)
    container_state(c, 0, {})
    looping = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting shard-server"}}
    container_state(c, 1, {}, sidecar={"ready": False, "restartCount": 4, "state": looping})
    for p_ in range(2):
        pod = c.children[key("Pod", worker_name(NAME, p_))]
        ready = "True" if p_ == 0 else "False"
        since = "2026-11-22T11:59:50Z"
        pod["status"]["conditions"] = [{"type": "Ready", "status": ready, "lastTransitionTime": since}]
    p = c.step()
    shards = cond(p, "ShardsReady")
    assert shards["reason"] == "PodsNotStarting", shards
    assert f"pod {worker_name(NAME, 1)}: CrashLoopBackOff" in shards["message"], shards
    assert p.status["phase"] == "Starting" and p.requeue_after is not None  # its server never loaded
    c.now += dt.timedelta(seconds=31)
    p = c.step()
    assert p.status["phase"] == "Failed" and cond(p, "Failed")["reason"] == "StartTimeout"
    assert worker_name(NAME, 1) in cond(p, "Failed")["message"]
    assert kinds(p, "delete") == WORKERS  # cleaned up: nothing keeps running


@pytest.mark.parametrize("how", ["gone", "being deleted"])
def test_a_worker_pod_deleted_as_the_others_finish_restarts_every_worker_pod(how: str) -> None:
    """Worker 1 deleted by hand as worker 0's trainer finished (an e2e run hung here for 10 minutes:
    worker 1 was made again alone, its trainer waiting for a peer that had finished): the attempt
    fails, every worker pod restarts from the last checkpoint."""
    c = Cluster(body())
    to_workers(c)
    for p_ in range(2):
        container_state(c, p_, {})
    assert c.step().status["phase"] == "Training"
    container_state(c, 0, {"trainer-0": {"terminated": {"exitCode": 0, "reason": "Completed"}}})
    if how == "gone":
        c.children.pop(key("Pod", worker_name(NAME, 1)))
    else:
        c.children[key("Pod", worker_name(NAME, 1))]["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:00Z"
    p = c.step()
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert kinds(p, "create") == []  # no worker made again alone
    assert kinds(p, "delete") == WORKERS[:1]  # worker 1 is gone or going already
    assert "deleted while the trainers ran" in cond(p, "TrainersReady")["message"]
    c.children.pop(key("Pod", worker_name(NAME, 1)), None)  # worker 1 stopped too
    p = c.step()
    made = [a.obj for a in p.actions if a.obj["kind"] == "Pod"]
    assert [o["metadata"]["labels"][LABEL_ATTEMPT] for o in made] == ["1", "1"]


def test_a_worker_pod_missing_before_every_rank_ran_is_made() -> None:
    """Before every rank of the attempt ran (TrainersReady never True), a missing worker pod is made,
    not counted as a restart: the pods of an attempt may be seen one at a time."""
    c = Cluster(body())
    to_workers(c)
    c.children.pop(key("Pod", worker_name(NAME, 1)))
    p = c.step()
    assert kinds(p, "create") == WORKERS[1:] and p.status.get("restarts", 0) == 0
