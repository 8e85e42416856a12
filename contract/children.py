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
"""

from __future__ import annotations

from typing import Any

from graphtrain.contract.spec import API_VERSION, KIND

LABEL_TRAINING = "graphtrain.io/training"  # the GraphTraining's name, on every child
LABEL_ROLE = "graphtrain.io/role"  # partition, shards, trainer, config, ...
LABEL_RANK = "graphtrain.io/rank"  # a trainer pod's rank
LABEL_ATTEMPT = "graphtrain.io/attempt"  # a trainer pod's attempt (status.restarts when it was made)
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
