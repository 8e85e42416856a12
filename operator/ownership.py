"""Which objects are a GraphTraining's own: pure decisions over ownerReferences, apart from the API
calls (k8s.py) that find the objects, so tests use literal objects."""

from __future__ import annotations

from typing import Any

from graphtrain.contract.spec import KIND
from graphtrain.operator import manifests


def owned(obj: dict[str, Any], owners: set[str]) -> bool:
    """A child of this very training: an ownerReference to it, or (pods) to one of its own Jobs or
    StatefulSets. An earlier GraphTraining of the same name left children with the same names and
    labels (until the garbage collector removes them); they never count, nor do their pods."""
    return any(r.get("uid") in owners for r in obj["metadata"].get("ownerReferences") or [])


def whose(obj: dict[str, Any], training: str, uid: str) -> str | None:
    """None if `obj`, found under a child's name, may stand there: the training's own (an
    ownerReference to it, or its retained data claim), or an earlier GraphTraining of this name's,
    which the garbage collector removes (the plan waits for the name, as for its own 409); else whose
    it is, in words for SpecValid's NameConflict message."""
    if owned(obj, {uid}) or (
        obj.get("kind") == "PersistentVolumeClaim" and manifests.retained_claim(obj, training)
    ):
        return None
    refs = obj["metadata"].get("ownerReferences") or []
    if any(r.get("kind") == KIND and r.get("name") == training for r in refs):
        return None
    return "exists and is not this training's"


def same(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Nothing to write: a merge patch of `new` would leave `old` as it is."""
    return all(old.get(k) == v for k, v in new.items())


def with_owner(metadata: dict[str, Any], owner: dict[str, Any] | None) -> dict[str, Any]:
    """`metadata` whose ownerReferences name `owner` (None: as it is): a reference to an earlier object
    of the owner's kind and name (the chart re-installed) is replaced, any other kept."""
    if owner is None:
        return metadata
    refs = [
        r
        for r in metadata.get("ownerReferences") or []
        if (r.get("kind"), r.get("name")) != (owner["kind"], owner["name"])
    ]
    return {**metadata, "ownerReferences": [*refs, owner]}
