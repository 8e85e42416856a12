"""Partition locality on Kubernetes (spec.placement.locality, contract/spec/locality.py): a worker pod
per partition in place of the shard servers' StatefulSet and the trainer pods.

Worker pod `<name>-worker-p` (restartPolicy Never, made and restarted by the operator as trainer pods
are):
- `shard-server`, a native sidecar (an init container with restartPolicy Always, Kubernetes >= 1.29):
  partition p's shard server, with --shm. It starts before the trainers, is restarted in place by the
  kubelet if it dies (it restores its checkpoint, as a StatefulSet's server does), and is stopped once
  every trainer container of the pod has ended, which is why trainers leave only after a final
  barrier of all of them (roles/train.py): no trainer of another pod still reads it.
- `trainer-r`, one container per rank of the partition (ranks p*k .. p*k+k-1), with --shm: a trainer
  maps its own partition's tables and graph from /dev/shm and sends only requests to the others.
- /dev/shm an emptyDir of medium Memory that every container mounts: the segments the server makes are
  the trainers' to map (containers of a pod share its network and hostname, so kvstore/shm's host
  identity matches; the restricted Pod Security Standard holds: no hostIPC, no hostPath). Its
  sizeLimit is the shard server's memory limit: its tables live there.

The pod's trainers reach every shard, their own too, at `<name>-worker-i.<name>-trainers` (the
trainers' headless Service); rank 0's rendezvous is in worker 0. The pod's scheduling fields are the
trainers' (spec.trainers: nodeSelector, tolerations, affinity, priorityClassName), with the GPU
defaults when either role runs on a GPU. The service-account token (patching the progress ConfigMap,
nothing else) is mounted in the sidecar too: the kubelet mounts it pod-wide.
"""

from __future__ import annotations

from typing import Any

from graphtrain.contract import roles
from graphtrain.contract.children import (
    LABEL_ATTEMPT,
    LABEL_PARTITION,
    names,
    trainer_container,
    worker_name,
)
from graphtrain.contract.spec import Device, GraphTraining, MemoryNeed, trainers_per_shard
from graphtrain.operator import gang, placement, pod_metadata
from graphtrain.operator.config import OperatorConfig
from graphtrain.operator.manifests import (
    FAST_PORT,
    METRICS_PORT,
    POD_IP_ENV,
    RENDEZVOUS_PORT,
    SHARD_PORT,
    Layout,
    _container,
    _meta,
    _pod_spec,
    _selector,
    shard_addresses,
    shard_container,
    trainer_network_policy,
)

Obj = dict[str, Any]
SHM_DIR = "/dev/shm"


def per_pod(gt: GraphTraining) -> int:
    """Trainers in each worker pod."""
    return trainers_per_shard(gt.spec) or 1


def ranks_of(gt: GraphTraining, partition: int) -> range:
    k = per_pod(gt)
    return range(partition * k, (partition + 1) * k)


def partition_of(gt: GraphTraining, rank: int) -> int:
    return rank // per_pod(gt)


def trainer_metrics_port(j: int) -> int:
    """The metrics port of the pod's j-th trainer (the sidecar has METRICS_PORT)."""
    return METRICS_PORT + 1 + j


def _shm_volume(shard_resources: dict[str, dict[str, str]]) -> Obj:
    empty: Obj = {"medium": "Memory"}
    limit = shard_resources.get("limits", {}).get("memory")
    if limit is not None:
        empty["sizeLimit"] = limit
    return {"name": "shm", "emptyDir": empty}


def worker_pod(
    owner: Obj,
    gt: GraphTraining,
    config: OperatorConfig,
    partition: int,
    attempt: int,
    need: MemoryNeed | None = None,
) -> Obj:
    """Partition `partition`'s worker pod of attempt `attempt`: its shard server as a sidecar and its
    trainers; `need`: what the partition measured (each container's memory sized to its role's)."""
    n, lay, ns = names(gt.metadata.name), Layout(gt), owner["metadata"]["namespace"]
    me = worker_name(gt.metadata.name, partition)
    shards = placement.pod_settings(gt.spec, config, "shards", need.shard_server if need else None)
    trainers = placement.pod_settings(gt.spec, config, "trainer", need.trainer if need else None)
    shm_mount = {"name": "shm", "mountPath": SHM_DIR}
    ip_env = {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    server_args = roles.shard_server(
        lay.files,
        bind=f"tcp://$({POD_IP_ENV}):{SHARD_PORT}",
        # other partitions' trainers pull through it (the policy admits every port to them)
        fast_port=FAST_PORT if gt.spec.shard_servers.fast_lane else -1,
        shard=partition,
        shm=True,  # the pod's trainers map its tables
        workers=roles.SHARED_HOST_WORKERS,  # its trainers share the pod's cores, as in `graphtrain run`
        metrics_port=METRICS_PORT,
        metrics_host=f"$({POD_IP_ENV})",
        device=Device(gt.spec.shard_servers.device).value,
    )
    # a native sidecar: up before the trainers, stopped after them
    server = shard_container(gt, config, shards, server_args, restartPolicy="Always")
    server["volumeMounts"].append(shm_mount)
    rank0 = f"{worker_name(gt.metadata.name, 0)}.{n['trainers']}.{ns}.svc"
    containers = []
    for j, rank in enumerate(ranks_of(gt, partition)):
        args = roles.train(
            lay.files,
            servers=shard_addresses(gt, ns),
            rank=rank,
            world=gt.spec.trainers.replicas,
            threads=placement.requested_threads(trainers.resources),
            init=f"tcp://{rank0}:{RENDEZVOUS_PORT}",
            shm=True,  # its own partition's rows and graph through the pod's /dev/shm
            progress_configmap=n["progress"],
            metrics_port=trainer_metrics_port(j),
            metrics_host=f"$({POD_IP_ENV})",
        )
        ports = [{"name": f"metrics-{j}", "containerPort": trainer_metrics_port(j)}]
        if j == 0:  # a port is declared once per pod: rank 0 (pod 0's first trainer) binds it
            ports.insert(0, {"name": "rendezvous", "containerPort": RENDEZVOUS_PORT})
        c = _container(gt, config, trainers, trainer_container(rank), args, token=True, ports=ports)
        c["env"] += [
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            ip_env,
        ]
        threads = gt.spec.training.threads or placement.requested_threads(trainers.resources)
        if threads:  # torch's pools and OpenMP's one count, as `graphtrain run` gives its children
            c["env"].append({"name": "OMP_NUM_THREADS", "value": str(threads)})
        c["volumeMounts"].append(shm_mount)
        containers.append(c)
    pod_fields = dict(trainers.pod_spec)
    if placement.uses_gpu(gt.spec, "shards") and not placement.uses_gpu(gt.spec, "trainer"):
        pod_fields = placement.with_gpu_defaults(pod_fields, config.gpu)
    settings = placement.PodSettings(trainers.image, trainers.pull_policy, trainers.resources, pod_fields)
    meta = _meta(owner, me, "trainer")
    meta["labels"].update({LABEL_PARTITION: str(partition), LABEL_ATTEMPT: str(attempt)})
    spec = _pod_spec(
        gt,
        config,
        settings,
        containers,
        token=True,
        initContainers=[server],
        restartPolicy="Never",
        hostname=me,
        subdomain=n["trainers"],
        serviceAccountName=n["account"],
        automountServiceAccountToken=True,
    )
    spec["volumes"].append(_shm_volume(shards.resources))
    gang.join(gt, meta, spec)
    pod_metadata.dress(gt, meta)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def worker_network_policy(owner: Obj, gt: GraphTraining, config: OperatorConfig) -> Obj | None:
    """Ingress of the worker pods: every port from the training's own worker pods (the kvstore, gloo's
    rendezvous and its pairs' ports), the kvstore port from its partition pod, the metrics ports (the
    sidecar's and each trainer's) from its pods and the configured scrapers; nothing else."""
    partition = {
        "from": [{"podSelector": _selector(gt, "partition")}],
        "ports": [{"protocol": "TCP", "port": SHARD_PORT}],
    }
    return trainer_network_policy(owner, gt, config, (partition,), trainer_metrics_port(per_pod(gt) - 1))


def worker_disruption_budget(owner: Obj, gt: GraphTraining, config: OperatorConfig) -> Obj | None:
    """No voluntary eviction of a worker pod: each holds a partition's rows. minAvailable all of them
    (maxUnavailable needs pods with a controller; worker pods are the operator's own)."""
    if not config.pod_disruption_budget.enabled:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(owner, names(gt.metadata.name)["trainers"], "trainer"),
        "spec": {"minAvailable": gt.spec.num_shards, "selector": _selector(gt, "trainer")},
    }
