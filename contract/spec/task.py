"""spec.task: what is learned, apart from the model that learns it (GraphStorm's split of task and
encoder): node classification, knowledge-graph embedding, link prediction and edge classification and
regression with a GNN encoder.

A task says what a batch is, what the loss is and how a split is evaluated; the model (model.py) says
how nodes or triples are encoded and scored. Each model kind lists the tasks it serves. Unset, the task
is the model's own (a GNN classifies nodes, a KGE model embeds a knowledge graph), which is how every
spec was read before the task had a field of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeAlias

from pydantic import Field

from graphtrain.contract.spec.base import MAX_TYPES, TypeName
from graphtrain.contract.spec.enums import Exclude, KGELoss, LinkDecoder, NegativeSampler, NegativeSide
from graphtrain.contract.spec.rules import add_rules, distinct
from graphtrain.contract.spec.variants import Variant, WireUnion, wire_model

NODE_CLASSIFICATION = "nodeClassification"
KGE = "kge"
LINK_PREDICTION = "linkPrediction"
EDGE_CLASSIFICATION = "edgeClassification"
EDGE_REGRESSION = "edgeRegression"
KGE_SAMPLERS = (NegativeSampler.uniform, NegativeSampler.joint)  # inBatch and local: linkPrediction's


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
        "a positive's own true one is left out of that positive's loss. (inBatch and local: task "
        "linkPrediction's only.)",
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


class LinkPredictionTask(Variant):
    """Predict edges with a GNN encoder and a pair decoder (DistDGL's and GraphStorm's link prediction):
    the encoder embeds a batch's endpoints and negatives from the graph without the batch's own edges
    (exclude), the decoder scores pairs; filtered MRR and Hits@k on the held-out valid and test edges,
    each ranked against every entity (the metrics code of task kge). The target edges are a knowledge
    graph's triples (graph.dataset or graph.triples), whose valid and test splits never enter the
    graph the GNN samples."""

    KIND: ClassVar[str] = LINK_PREDICTION

    decoder: LinkDecoder = Field(
        default=LinkDecoder.distmult,
        description="dot: <z_h, z_t>; distmult: <z_h, w_r, z_t> with a learned diagonal per relation; "
        "mlp: an MLP on [z_h + w_r, z_t] (one hidden layer of the encoder's width).",
    )
    target_relations: list[TypeName] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TYPES,
        description="The relations whose edges are trained and evaluated (their names). Unset: every "
        "relation. The other relations stay in the graph as context.",
    )
    negatives: int = Field(
        default=32,
        ge=1,
        le=100000,
        description="Negative tails each positive is scored against (inBatch: the batch's other tails, "
        "so at most the batch).",
    )
    sampler: NegativeSampler = Field(
        default=NegativeSampler.joint,
        description="uniform: each positive its own negatives; joint: each chunk of `chunk` positives "
        "shares one draw (the encoder embeds far fewer nodes: GraphStorm's and DGL-KE's cheap option); "
        "local: joint, drawn from the nodes of the trainer's own partition (no remote rows; with fewer "
        "trainers than partitions, an equal run of whole partitions each, so every node can be a "
        "negative); inBatch: "
        "the batch's other tails. A negative equal to the positive's own tail is left out.",
    )
    chunk: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="sampler joint or local: positives per shared draw.",
    )
    negative_side: NegativeSide = Field(
        default=NegativeSide.tail,
        description="What a negative replaces (uniform, joint, local; inBatch always takes the batch's "
        "other tails): tail (DGL's and GraphStorm's samplers), or both (the head for half of a batch, "
        "the tail for the rest, as PyKEEN and task kge: better where held-out heads are ranked from "
        "directed relations, as WordNet's).",
    )
    loss: KGELoss = Field(
        default=KGELoss.crossentropy,
        description="crossentropy: contrastive, the softmax of each positive against its negatives; "
        "softplus: binary cross-entropy, positives to 1 and negatives to 0; margin: pairwise ranking.",
    )
    margin: float = Field(default=1.0, gt=0, description="The margin of loss: margin.")
    exclude: Exclude | None = Field(
        default=None,
        description="What leaves the graph a batch's GNN samples: self (the batch's target edges), "
        "reverse (those and their reverses), none (nothing: the target edge leaks into its own "
        "embedding). Unset: reverse when graph.reverseEdges adds a reverse to every edge, else self.",
    )


class EdgeClassificationTask(Variant):
    """Classify edges by their labels (GraphStorm's edge classification): the encoder embeds both ends
    of a batch's labelled edges from the graph without those edges (exclude), a pair decoder (an MLP on
    [z_s, z_d, z_s * z_d] plus the edge type's row) gives class scores; cross-entropy on the training
    edges, accuracy on the validation and test edges (every neighbour at evaluation). The labelled
    edges are those of graph.edges entries with a label column, split by graph.split."""

    KIND: ClassVar[str] = EDGE_CLASSIFICATION

    exclude: Exclude | None = Field(
        default=None,
        description="What leaves the graph a batch's GNN samples: self (the batch's labelled edges), "
        "reverse (those and their reverses), none (nothing: an edge's own features reach its "
        "endpoints' embeddings). Unset: reverse when graph.reverseEdges adds a reverse to every edge, "
        "else self.",
    )


class EdgeRegressionTask(Variant):
    """Predict a number per edge (GraphStorm's edge regression): as edgeClassification, with a label
    column of numbers, one output, the mean squared error on the training edges and the RMSE (lower is
    better) on the validation and test edges."""

    KIND: ClassVar[str] = EDGE_REGRESSION

    exclude: Exclude | None = Field(
        default=None,
        description="What leaves the graph a batch's GNN samples: self (the batch's labelled edges), "
        "reverse (those and their reverses), none (nothing). Unset: reverse when graph.reverseEdges adds "
        "a reverse to every edge, else self.",
    )


TASKS = (NodeClassificationTask, KGETask, LinkPredictionTask, EdgeClassificationTask, EdgeRegressionTask)
EDGE_TASKS = (EDGE_CLASSIFICATION, EDGE_REGRESSION)

if TYPE_CHECKING:  # a class made at import: to a static checker, the flat union it is made as
    TaskSpec: TypeAlias = WireUnion
else:
    TaskSpec = wire_model(
        "TaskSpec",
        "What is learned: one kind (nodeClassification, kge, linkPrediction, edgeClassification, "
        "edgeRegression) with its own fields.",
        TASKS,
        prefix="task",
        default_kind=None,
        kind_description="nodeClassification: node labels; kge: knowledge-graph embedding (triples); "
        "linkPrediction: a GNN encoder and a pair decoder on a knowledge graph's triples; "
        "edgeClassification (edgeRegression): a GNN encoder and a pair classifier (regressor) on "
        "labelled edges. Required.",
    )

add_rules(
    TaskSpec, distinct("task-target-relations-distinct", "targetRelations", "target_relations", "relation")
)
