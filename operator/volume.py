"""Where a GraphTraining's files live: on its volume (the work directory, mode inference's checkpoint
and output) and in its pods (the applied spec, the token). Pure: a spec in, paths out.
"""

from __future__ import annotations

import dataclasses
import posixpath

from graphtrain.contract import roles
from graphtrain.contract.spec import GraphTraining, Mode
from graphtrain.contract.spec.inference import checkpoint_root

CONFIG_DIR = "/etc/graphtrain"
# not under CONFIG_DIR: runc cannot make a mount point inside a read-only volume
TOKEN_DIR = "/var/run/secrets/graphtrain.io"


def training_uid(gt: GraphTraining) -> str | None:
    """The uid of the GraphTraining a spec belongs to: metadata.uid, which config_map() records in the
    applied spec (None: a spec applied before it did, or one that is no object of the API server)."""
    uid = (gt.metadata.model_extra or {}).get("uid")
    return str(uid) if uid else None


class Layout:
    """Where things live inside the pods, from the spec's storage section.

    The work directory (partition, checkpoints) is per training: <mount>/runs/<name>/<uid>. A claim
    outlives its training (storage.whenDeleted Retain, or a claim the spec names), and a GraphTraining
    re-created with the same name must start afresh, not resume the checkpoints of the one before it
    (its trainers and shard servers restore whatever LATEST their checkpoint root holds). A training
    whose applied spec has no uid (applied by an operator before this) keeps <mount>/runs/<name>."""

    def __init__(self, gt: GraphTraining):
        mount = gt.spec.storage.mount_path.rstrip("/")
        self.mount = mount
        self.data = f"{mount}/data"
        uid = training_uid(gt)
        self.work = f"{mount}/runs/{gt.metadata.name}" + (f"/{uid}" if uid else "")
        self.partition = f"{self.work}/partition"
        self.checkpoints = f"{self.work}/checkpoints"
        self.spec_file = f"{CONFIG_DIR}/spec.yaml"
        self.token_file = f"{TOKEN_DIR}/token"
        self.files = roles.Files(
            spec=self.spec_file, partition=self.partition, token=self.token_file, checkpoints=self.checkpoints
        )
        if gt.spec.mode == Mode.inference and gt.spec.inference is not None:  # the volume's paths
            inf = gt.spec.inference
            checkpoint = posixpath.join(mount, inf.checkpoint)
            output = posixpath.join(mount, inf.output) if inf.output else f"{self.work}/inference"
            self.files = dataclasses.replace(
                self.files, checkpoints=checkpoint_root(checkpoint), infer_from=checkpoint, output=output
            )


def outside_volume(gt: GraphTraining) -> list[str]:
    """Mode inference's paths that leave the training's volume (an absolute path elsewhere, or `..`
    past storage.mountPath): in a pod, a checkpoint there is on no volume of the training, and an
    output there lands in the pod's own filesystem (its /tmp emptyDir) and is lost with the pod while
    the trainers succeed. Each problem names its field."""
    inf = gt.spec.inference
    if gt.spec.mode != Mode.inference or inf is None:
        return []
    mount = posixpath.normpath(gt.spec.storage.mount_path)
    problems = []
    for field, value in (("checkpoint", inf.checkpoint), ("output", inf.output)):
        if not value:
            continue
        path = posixpath.normpath(posixpath.join(mount, value))
        if path != mount and not path.startswith(mount.rstrip("/") + "/"):
            problems.append(
                f"spec.inference.{field}: {value!r} is {path}, outside the training's volume "
                f"(storage.mountPath {mount}): name a path on the volume, relative to its mount"
            )
    return problems
