"""spec.podMetadata on the pods the operator makes (contract/spec/pod_metadata.py says what and why):
the partition Job's template, the shard servers' StatefulSet template, the trainer pods and the worker
pods, each through `dress` once its own labels and annotations (the group's too) are set."""

from __future__ import annotations

from typing import Any

from graphtrain.contract.spec import GraphTraining

Obj = dict[str, Any]


def dress(gt: GraphTraining, meta: Obj) -> Obj:
    """`meta` (changed in place and returned) with the spec's pod labels and annotations under the
    operator's own: the spec cannot name those (its rules refuse them), and were one let through, the
    operator's value would still win, so its selectors keep matching its pods."""
    extra = gt.spec.pod_metadata
    if extra is None:
        return meta
    if extra.labels:
        meta["labels"] = {**extra.labels, **(meta.get("labels") or {})}
    if extra.annotations:
        meta["annotations"] = {**extra.annotations, **(meta.get("annotations") or {})}
    return meta
