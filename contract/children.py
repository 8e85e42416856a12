"""The children of a GraphTraining: their names and the labels that select them.

Every role agrees on these: the operator names and labels what it creates (operator/manifests.py), the
REST API finds a training's pods and progress by them (api/sources/kubernetes.py), the pod runner in the
tests and `kubectl get pods -l graphtrain.io/training=<name>` select by them. Defined once here, so the
API reads four label keys without importing the operator's builders.

Children of `<name>` (each with an ownerReference to the GraphTraining that made it):
  <name>-config     ConfigMap: the applied spec
  <name>-token      Secret: the shard servers' shared token
  <name>-progress   ConfigMap: progress and per-rank heartbeats written by the trainers
  <name>-trainer    ServiceAccount + Role + RoleBinding of the trainers
  <name>-data       PersistentVolumeClaim (unless storage.volumeClaimName names one)
  <name>-partition  Job: `graphtrain partition`
  <name>-shards     headless Service + StatefulSet of the shard servers (+ NetworkPolicy, PodDisruptionBudget)
  <name>-trainers   headless Service for the trainers' rendezvous
  <name>-trainer-i  trainer Pods, rank i
  <name>-worker-p   with partition locality (spec.placement.locality), in place of the StatefulSet and
                    the trainer pods: partition p's shard server (a sidecar) and its trainers' containers
"""

from __future__ import annotations

from typing import Any

from graphtrain.contract.spec import API_VERSION, KIND

LABEL_TRAINING = "graphtrain.io/training"  # the GraphTraining's name, on every child
LABEL_ROLE = "graphtrain.io/role"  # partition, shards, trainer, config, ...
LABEL_RANK = "graphtrain.io/rank"  # a trainer pod's rank
LABEL_ATTEMPT = "graphtrain.io/attempt"  # a trainer pod's attempt (status.restarts when it was made)
LABEL_PARTITION = "graphtrain.io/partition"  # a worker pod's partition (partition locality)
SHARD_CONTAINER = "shard-server"  # the shard server's container, in its StatefulSet pod or a worker pod
MANAGED_BY = {"app.kubernetes.io/managed-by": "graphtrain-operator"}


def names(name: str) -> dict[str, str]:
    """The names of the children of the training `name`, by what they are."""
    return {
        "config": f"{name}-config",
        "token": f"{name}-token",
        "progress": f"{name}-progress",
        "account": f"{name}-trainer",
        "data": f"{name}-data",
        "partition": f"{name}-partition",
        "shards": f"{name}-shards",
        "trainers": f"{name}-trainers",
    }


def trainer_name(name: str, rank: int) -> str:
    """The trainer pod of rank `rank`."""
    return f"{name}-trainer-{rank}"


def worker_name(name: str, partition: int) -> str:
    """The worker pod of partition `partition` (partition locality): its shard server and trainers."""
    return f"{name}-worker-{partition}"


def trainer_container(rank: int) -> str:
    """The container of rank `rank` in a worker pod."""
    return f"trainer-{rank}"


def _container_phase(state: dict[str, Any], pod_phase: str) -> str:
    """A trainer container's state as a pod phase (its pod's restartPolicy is Never)."""
    if "terminated" in state:
        return "Succeeded" if state["terminated"].get("exitCode") == 0 else "Failed"
    if "running" in state:
        return "Running"
    return "Failed" if pod_phase == "Failed" else "Pending"


def rank_pods(pod: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The ranks a trainer pod runs, each with the pod as that rank sees it: a trainer pod is its rank's
    own; a worker pod (partition locality) gives each of its trainer containers a view of the pod whose
    phase and containerStatuses are that container's (its sidecar's initContainerStatuses kept), so the
    operator and the REST API judge a rank the same way whichever pod runs it."""
    meta = pod.get("metadata") or {}
    tags = meta.get("labels") or {}
    if LABEL_PARTITION not in tags:
        try:
            return [(int(tags.get(LABEL_RANK, -1)), pod)]
        except ValueError:
            return []
    status = pod.get("status") or {}
    statuses = {cs.get("name"): cs for cs in status.get("containerStatuses") or []}
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        name = str(c.get("name", ""))
        if not name.startswith("trainer-") or not name[8:].isdigit():
            continue
        rank = int(name[8:])
        cs = statuses.get(name)
        view_status = {
            **status,
            "phase": _container_phase((cs or {}).get("state") or {}, status.get("phase", "Pending")),
            "containerStatuses": [cs] if cs else [],
        }
        view_meta = {**meta, "labels": {**tags, LABEL_RANK: str(rank)}}
        out.append((rank, {**pod, "metadata": view_meta, "status": view_status}))
    return out


def labels(name: str, role: str, **extra: str) -> dict[str, str]:
    """The labels of a child of `name` in `role` (plus `extra`: a trainer's rank and attempt)."""
    return {LABEL_TRAINING: name, LABEL_ROLE: role, **MANAGED_BY, **extra}


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference a child carries to the GraphTraining `owner` (its body as the API returns it)."""
    meta = owner["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
