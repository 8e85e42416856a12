"""spec.task: what is learned, apart from the model that learns it (GraphStorm's split of task and
encoder): node classification or knowledge-graph embedding now, link prediction and edge tasks next.

A task says what a batch is, what the loss is and how a split is evaluated; the model (model.py) says
how nodes or triples are encoded and scored. Each model kind lists the tasks it serves. Unset, the task
is the model's own (a GNN classifies nodes, a KGE model embeds a knowledge graph), which is how every
spec was read before the task had a field of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeAlias

from pydantic import Field

from graphtrain.contract.spec.base import MAX_TYPES, TypeName
from graphtrain.contract.spec.enums import KGELoss, NegativeSampler
from graphtrain.contract.spec.variants import Variant, WireUnion, wire_model

NODE_CLASSIFICATION = "nodeClassification"
KGE = "kge"


class NodeClassificationTask(Variant):
    """Classify nodes by their labels: cross-entropy on the training nodes' classes, accuracy on the
    validation and test nodes (every neighbour at evaluation)."""

    KIND: ClassVar[str] = NODE_CLASSIFICATION

    target_node_types: list[TypeName] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TYPES,
        description="Typed graphs: the node types whose labelled nodes are trained and evaluated (their "
        "train, val and test masks). Unset: every node with a label, of any type.",
    )


class KGETask(Variant):
    """Knowledge-graph embedding: score true triples above corrupted ones; filtered MRR and Hits@k on the
    validation and test triples."""

    KIND: ClassVar[str] = KGE

    negatives: int = Field(
        default=64,
        ge=1,
        le=100000,
        description="Corrupted triples each positive is scored against (with sampler joint: the entities "
        "its chunk shares).",
    )
    sampler: NegativeSampler = Field(
        default=NegativeSampler.uniform,
        description="uniform: each positive draws its own negatives, replacing its head (first half of a "
        "batch) or tail (the rest) by another entity (PyKEEN's BasicNegativeSampler). joint: each chunk of "
        "`chunk` positives shares one draw of `negatives` entities, scored against the whole chunk as one "
        "matrix product (DGL-KE's chunked negatives): a batch pulls 2B + (B/chunk) x negatives entity rows "
        "instead of 2B + B x negatives, which is what large batches on GPUs need. A shared entity that is "
        "a positive's own true one is left out of that positive's loss.",
    )
    chunk: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="sampler joint: positives per shared set of negatives (DGL-KE's neg_chunk_size).",
    )
    loss: KGELoss = Field(
        default=KGELoss.crossentropy,
        description="margin (pairwise margin ranking), softplus (logistic), crossentropy (softmax over the "
        "true triple and its negatives).",
    )
    margin: float = Field(default=1.0, gt=0, description="The margin of loss: margin.")


TASKS = (NodeClassificationTask, KGETask)

if TYPE_CHECKING:  # a class made at import: to a static checker, the flat union it is made as
    TaskSpec: TypeAlias = WireUnion
else:
    TaskSpec = wire_model(
        "TaskSpec",
        "What is learned: one kind (nodeClassification, kge) with its own fields.",
        TASKS,
        prefix="task",
        default_kind=None,
        kind_description="nodeClassification: node labels; kge: knowledge-graph embedding (triples). "
        "Required.",
    )
