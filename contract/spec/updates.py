"""Which spec fields a training takes on once it runs: one table, read by the operator (its UpdateRefused
decision, operator/stages.py) and by the CRD's generator (transition rules over `oldSelf`, contract/crd.py).

No part of a training is elastic: the trainers' world size, the shard servers' row ranges and the
partition are fixed when it starts, and so is everything that defines the job (graph, tables, model,
training, image, storage, placement). As a Kubeflow PyTorchJob's or a Kubernetes Job's template, those
fields are immutable. runPolicy and suspend are the controls of a job and change at any time.

The CRD's rules (on the object's root, to read the old status) hold a fixed field to its value unless
the training has not run yet: its spec is suspended and its status has no appliedSpecHash, which the
operator writes once the training's applied spec exists (its config ConfigMap) and removes from one
that never ran. A training created suspended (for a queue to admit it, or to edit before it starts)
makes no child and may still change until it first runs; one that ran and was suspended may not.
Every change on a cluster that does not run CRD validation rules, or made while no operator had
written the status, is refused by the operator instead (SpecValid False / UpdateRefused), from the same
table. While it says so the stored spec is not the one that runs, and the rules admit any change too:
else the revert to the running spec (the user's own file applied again) would be refused as a change.
Users cannot write the status (the chart's roles grant graphtrainings/status get only), so the marker
is the operator's word.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final


class Update(StrEnum):
    """When a spec field may change."""

    any_time = "anyTime"  # a control of the running job (runPolicy, suspend)
    fixed = "fixed"  # defines the job: fixed once it runs; the CRD admits a change only while suspended


_F, _A = Update.fixed, Update.any_time

UPDATES: Final[Mapping[str, Update]] = MappingProxyType(
    {
        "graph": _F,
        "partition": _F,
        "embeddings": _F,
        "task": _F,
        "model": _F,
        "training": _F,
        "shardServers": _F,
        "trainers": _F,
        "runPolicy": _A,
        "suspend": _A,
        "storage": _F,
        "placement": _F,
        "podMetadata": _F,
        "scheduling": _F,
        "mode": _F,
        "inference": _F,
        "image": _F,
    }
)
"""Every field of GraphTrainingSpec (its wire name) and when it may change; a field missing from it is
fixed (tests/contract/test_updates.py fails until a new field is named here)."""

ANY_TIME: Final = frozenset(k for k, v in UPDATES.items() if v is Update.any_time)


def refused(applied: Mapping[str, Any], new: Mapping[str, Any] | None) -> list[str]:
    """The fields (wire names, sorted) in which `new`, a running training's spec as the user changed it,
    differs from `applied`, the spec it runs, and which it cannot take. Both are whole specs as
    model_dump(by_alias=True) writes them (a default and an unset field read alike); `new` None: the
    new spec is invalid, so every fixed field is refused."""
    return [
        k
        for k in sorted(applied)
        if UPDATES.get(k, Update.fixed) is Update.fixed and (new is None or new.get(k) != applied[k])
    ]


MESSAGE: Final = (
    "%s is immutable once the training runs (it may change only before it first runs, while spec.suspend "
    "is true, or while the operator refuses an update, back to the spec it runs): delete and re-create "
    "the training, or start a new one"
)

# When the CRD admits any change (the operator refuses what the running training cannot take): the
# training has not run (its spec suspended, no appliedSpecHash in its status: a training created
# suspended), or the operator refuses its spec (SpecValid False / UpdateRefused: the spec stored is not
# the one that runs, so the change may be the revert to it, which `self == oldSelf` would refuse).
OPEN: Final = (
    "oldSelf.spec.suspend && !(has(oldSelf.status) && has(oldSelf.status.appliedSpecHash)) || "
    "has(oldSelf.status) && has(oldSelf.status.conditions) && "
    "oldSelf.status.conditions.exists(c, c.type == 'SpecValid' && c.reason == 'UpdateRefused')"
)


# How CEL tells a field without a default is set, where its empty value is its absence to the Python
# side too ({x}: self.spec or oldSelf.spec): an empty podMetadata is none (pod_metadata.py:
# OptionalPodMetadata), and the API server stores `podMetadata: {}` as its two empty maps.
PRESENT: Final[Mapping[str, str]] = MappingProxyType(
    {
        "podMetadata": "has({x}.podMetadata) "
        "&& size({x}.podMetadata.labels) + size({x}.podMetadata.annotations) > 0"
    }
)


def transition_rule(field: str, defaulted: bool) -> dict[str, str]:
    """The CRD rule, on the object's root (where the status is seen), that holds spec.`field` to its old
    value unless the CRD cannot judge the change (OPEN). A field the API server defaults is in every
    stored spec, so written or not it compares as its default. One without a default may be added or
    removed: that is a change, unless both sides are unset (an explicit null reads as unset to has(), as
    to the Python side; so does an empty podMetadata, PRESENT)."""
    new, old = f"self.spec.{field}", f"oldSelf.spec.{field}"
    same = f"{new} == {old}"
    if not defaulted:
        is_set = PRESENT.get(field, f"has({{x}}.{field})")
        has_new, has_old = is_set.format(x="self.spec"), is_set.format(x="oldSelf.spec")
        same = f"({has_new} ? {has_old} && {same} : !({has_old}))"
    return {"rule": f"{OPEN} || {same}", "message": MESSAGE % field, "fieldPath": f".spec.{field}"}


def transition_rules(spec_schema: Mapping[str, Any]) -> list[dict[str, str]]:
    """The transition rules, for the object's root, of the spec whose CRD node is `spec_schema` (its
    structural schema): one for each fixed field, in the table's order."""
    props = spec_schema["properties"]
    return [
        transition_rule(k, "default" in props[k] or k in spec_schema.get("required", ()))
        for k, v in UPDATES.items()
        if v is Update.fixed
    ]
