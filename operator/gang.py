"""A training's pods as one group (spec.scheduling, contract/spec/scheduling.py): the gang's PodGroup,
and what each shard-server and trainer pod carries to join it (labels, annotations, schedulerName).

The PodGroup is made with the shard servers' StatefulSet (ensure() makes it once; it is not watched,
so the cluster needs no PodGroup CRD unless a training asks for a gang) and goes with the training
(its ownerReference). Its minMember counts every shard server and trainer: the scheduler binds none of
them until all fit, so the trainers are made with the servers, not after them (stages.py)."""

from __future__ import annotations

from typing import Any

from graphtrain.contract.children import labels, names, owner_reference
from graphtrain.contract.spec import GraphTraining, colocated
from graphtrain.contract.spec.scheduling import (
    COSCHEDULING_GROUP,
    KUEUE_GROUP,
    KUEUE_QUEUE,
    KUEUE_TOTAL,
    VOLCANO,
    VOLCANO_GROUP,
    Scheduling,
    group_name,
    pod_group_api,
)

Obj = dict[str, Any]


def members(gt: GraphTraining) -> int:
    """The pods of the group: every shard server and every trainer, or with partition locality every
    worker pod (a partition's server and trainers in one)."""
    if colocated(gt.spec):
        return gt.spec.num_shards
    return gt.spec.num_shards + gt.spec.trainers.replicas


def is_grouped(gt: GraphTraining) -> bool:
    """Whether the pods form a group admitted or scheduled whole (a Kueue queue, a gang)."""
    s = gt.spec.scheduling
    return s is not None and (s.gang or s.queue is not None)


def pod_metadata(s: Scheduling | None, training: str, members: int) -> dict[str, dict[str, str]]:
    """The labels and annotations that put a pod of `training` in its group (`members`: every pod of
    the group), {"labels": ..., "annotations": ...}; empty without grouping."""
    tags: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if s is not None and s.queue is not None:
        tags[KUEUE_QUEUE] = s.queue
        tags[KUEUE_GROUP] = group_name(training)
        annotations[KUEUE_TOTAL] = str(members)
    if s is not None and s.gang:
        if s.scheduler_name == VOLCANO:
            annotations[VOLCANO_GROUP] = group_name(training)
        else:
            tags[COSCHEDULING_GROUP] = group_name(training)
    return {"labels": tags, "annotations": annotations}


def pod_group_spec(s: Scheduling, members: int, priority_class: str | None) -> dict[str, Any]:
    """The gang PodGroup's spec: minMember every pod (and Volcano's priorityClassName: the group's
    priority, the trainers' when they name one)."""
    spec: dict[str, Any] = {"minMember": members}
    if s.scheduler_name == VOLCANO and priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def pod_group(owner: Obj, gt: GraphTraining) -> Obj | None:
    """The gang's PodGroup (None without scheduling.gang)."""
    s = gt.spec.scheduling
    if s is None or not s.gang:
        return None
    return {
        "apiVersion": pod_group_api(s),
        "kind": "PodGroup",
        "metadata": {
            "name": group_name(gt.metadata.name),
            "namespace": owner["metadata"]["namespace"],
            "labels": labels(gt.metadata.name, "gang"),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": pod_group_spec(s, members(gt), gt.spec.trainers.priority_class_name),
    }


def join(gt: GraphTraining, meta: Obj, pod_spec: Obj) -> None:
    """Put a pod (its metadata and spec, changed in place) in the training's group: the group's labels
    and annotations, and schedulerName when the spec names one."""
    s = gt.spec.scheduling
    if s is None:
        return
    extra = pod_metadata(s, gt.metadata.name, members(gt))
    meta.setdefault("labels", {}).update(extra["labels"])
    if extra["annotations"]:
        meta.setdefault("annotations", {}).update(extra["annotations"])
    if s.scheduler_name:
        pod_spec["schedulerName"] = s.scheduler_name


def group_of(gt: GraphTraining) -> str:
    """The name the group goes by in conditions and events."""
    return group_name(gt.metadata.name) if is_grouped(gt) else names(gt.metadata.name)["shards"]
