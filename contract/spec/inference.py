"""spec.inference: where a GraphTraining of mode inference reads its checkpoint and writes its outputs.

A training's checkpoint is inferred from by a GraphTraining with the same graph, model and tables and
`mode: inference` (`graphtrain infer` writes one): its trainers restore the checkpoint's model and tables
and compute every node's outputs layer by layer over the whole graph, as training's evaluation does
(runtime/train/layerwise.py), then write them as sharded parquet keyed by the user's own ids.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import Field

from graphtrain.contract.spec.base import SpecModel
from graphtrain.contract.spec.enums import Mode
from graphtrain.contract.spec.rules import Rule

# the names a checkpoint root holds besides checkpoints: marker files naming one of them
MARKERS = ("LATEST", "BEST")


class Inference(SpecModel):
    """The checkpoint inferred from and where the outputs go."""

    checkpoint: str = Field(
        min_length=1,
        max_length=4096,
        description="The checkpoint to infer from: a checkpoints directory (its LATEST), a LATEST or "
        "BEST marker file in one, or a checkpoint directory (step-<n>). `graphtrain run`: relative "
        "paths are the spec file's directory's. Kubernetes: a path on the training's volume, relative "
        "ones under storage.mountPath (a training's are runs/<name>/<uid>/checkpoints).",
    )
    output: str | None = Field(
        default=None,
        max_length=4096,
        description="Directory the outputs go to: part-<trainer>.parquet files (an id column with the "
        "user's node ids, node_type on a typed graph, embedding, and for node classification "
        "predicted and p_<class>) and manifest.json. An earlier inference's output there is replaced; "
        "any other existing path is refused. Unset: <run dir>/inference (Kubernetes: the training's "
        "work directory on the volume).",
    )


# The spec's rules tying spec.mode to spec.inference (a GraphTrainingSpec: document.py imports this module
# and adds them). Each is a Python check and the same CEL rule of the CRD (rules.py).
INFERENCE_RULES = (
    Rule(
        "inference-checkpoint",
        "inference",
        lambda s: s.mode != Mode.inference or s.inference is not None,
        cel="!has(self.mode) || self.mode != 'inference' || has(self.inference)",
        message="mode inference needs inference.checkpoint: the checkpoint to infer from",
    ),
    Rule(
        "inference-mode",
        "inference",
        lambda s: s.inference is None or s.mode == Mode.inference,
        cel="!has(self.inference) || (has(self.mode) && self.mode == 'inference')",
        message="is read by mode inference alone, and mode is train (the default), which would train "
        "from scratch: set mode: inference, or remove inference",
    ),
)


def checkpoint_root(path: str) -> str:
    """The checkpoints directory holding the checkpoint `path` names (pure: no file is read, so the
    operator can say where shard servers restore from): a marker's or a checkpoint's parent, else
    `path` itself (a checkpoints directory)."""
    p = PurePosixPath(path.rstrip("/") or "/")
    if p.name in MARKERS or p.name.startswith("step-"):
        return str(p.parent)
    return str(p)
