"""spec.model: the model trained, one kind each with only its own fields (variants.py).

GNNs (graphsage, gat, rgcn, rgat) encode nodes from their features and learnable rows through sampled
neighbourhoods; knowledge-graph embeddings (transe, distmult, complex, rotate) score (head, relation,
tail) triples from an entity and a relation table. Which task a model serves is the task's business
(task.py); each kind says which tasks it can serve (TASKS). A new model is a Variant here, in MODELS,
beside its module in runtime/models/ (docs/architecture.md, "Adding a model").
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from pydantic import Field

from graphtrain.contract.spec.base import IDENT, MAX_LAYERS, SpecModel
from graphtrain.contract.spec.enums import BagCombiner
from graphtrain.contract.spec.rules import Rule, add_rules
from graphtrain.contract.spec.task import (
    EDGE_CLASSIFICATION,
    EDGE_REGRESSION,
    KGE,
    LINK_PREDICTION,
    NODE_CLASSIFICATION,
    KGETask,
)
from graphtrain.contract.spec.variants import Variant, WireUnion, cel_or_default, cel_strings, wire_model


class FeatureBag(SpecModel):
    """Sparse node features read as a multi-hot bag of learnable rows, one row per feature column (SOK's
    DistributedEmbedding, torch's EmbeddingBag): a node's input is the combination of the rows of its
    nonzero columns, e.g. WordNet's gloss words, instead of a fixed projection of its bag of words."""

    embedding: str = Field(
        max_length=63,
        pattern=IDENT,
        description="Name of the table (keys: features) holding one learnable row per feature column; "
        "required.",
    )
    combiner: BagCombiner = Field(
        default=BagCombiner.mean,
        description="How a node's rows become its input: mean (their average; a node without a nonzero "
        "column gets zeros) or sum. The values of the nonzero columns are not used (a multi-hot bag).",
    )


class GNNModel(Variant):
    """What every GNN has: its shape and its inputs (features, a feature bag, a node embedding)."""

    TASKS: ClassVar[tuple[str, ...]] = (
        NODE_CLASSIFICATION,
        LINK_PREDICTION,
        EDGE_CLASSIFICATION,
        EDGE_REGRESSION,
    )

    hidden_dim: int = Field(default=256, ge=1, le=65536, description="Width of the hidden layers.")
    num_layers: int = Field(
        default=2,
        ge=1,
        le=MAX_LAYERS,
        description="Number of layers (hops); training.fanouts has one entry per layer.",
    )
    dropout: float = Field(default=0.5, ge=0, lt=1, description="Dropout probability between layers.")
    use_features: bool = Field(
        default=True, description="Feed the graph's node features (feat) to the first layer."
    )
    feature_projection: int | None = Field(
        default=None,
        ge=1,
        description="Reduce the input features to this many dims by a seeded Gaussian random projection "
        "at partition time (sparse bag-of-words features need it or featureBag). Unset: the features as "
        "they are.",
    )
    feature_bag: FeatureBag | None = Field(
        default=None,
        description="Read the graph's sparse node features through a learnable table, each node the mean "
        "(or sum) of the rows of its nonzero feature columns, in place of featureProjection. Unset: the "
        "features are read as they are (dense) or projected.",
    )
    node_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=IDENT,
        description="Name of a table (keys: nodes) giving a learnable input per node, beside or instead of "
        "the features. Unset: features only.",
    )


class GraphSAGEModel(GNNModel):
    """GraphSAGE with the mean aggregator (DGL's SAGEConv); on a typed graph, one per relation, summed."""

    KIND: ClassVar[str] = "graphsage"

    edge_weight: bool = Field(
        default=False,
        description="Weight each sampled in-neighbour by its edge's first feature (graph edge features, "
        "efeat[0], non-negative) in the mean: sum of w h over sum of w. False: a plain mean.",
    )


class AttentionModel(GNNModel):
    """The fields every graph-attention kind has (gat, rgat)."""

    heads: int = Field(default=4, ge=1, le=64, description="Attention heads per layer.")
    attention_dropout: float = Field(
        default=0.0, ge=0, lt=1, description="Dropout probability of the attention weights."
    )
    negative_slope: float = Field(
        default=0.2, ge=0, le=1, description="Slope of the LeakyReLU of the attention logits."
    )
    edge_features: bool = Field(
        default=False,
        description="Read each sampled edge's features (graph edge features, efeat) in the attention "
        "logits and the messages. False: edges carry no data into the model.",
    )


class GATModel(AttentionModel):
    """Graph attention (DGL's GATConv): multi-head attention over the sampled in-neighbours, heads
    concatenated between layers and averaged at the output; edge features may enter the attention and
    the messages."""

    KIND: ClassVar[str] = "gat"


class RGCNModel(GNNModel):
    """Relational GCN (Schlichtkrull et al.; DGL's RelGraphConv): a weight per relation over the mean of
    a node's in-neighbours by that relation, plus a self-loop weight."""

    KIND: ClassVar[str] = "rgcn"

    num_bases: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Basis decomposition: each relation's weight a learned combination of this many "
        "shared bases. Unset: one full weight per relation.",
    )
    self_loop: bool = Field(default=True, description="Add each node's own transformed input (W_0 h_v).")
    edge_weight: bool = Field(
        default=False,
        description="Weight each sampled in-neighbour by its edge's first feature (graph edge features, "
        "efeat[0], non-negative) in the mean: sum of w h over sum of w. False: a plain mean.",
    )


class RGATModel(AttentionModel):
    """Relational graph attention: per relation its own weight and attention, softmax over a node's
    in-neighbours of that relation, the relations summed."""

    KIND: ClassVar[str] = "rgat"


class KGEModel(Variant):
    """A knowledge-graph embedding: an entity and a relation table, a score per triple."""

    TASKS: ClassVar[tuple[str, ...]] = (KGE,)
    COMPLEX_ROWS: ClassVar[bool] = False  # a row holds complex numbers: its dim is even

    entity_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=IDENT,
        description="Name of the entity table (keys: nodes); required.",
    )
    relation_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=IDENT,
        description="Name of the relation table (keys: relations); required.",
    )


class TransEModel(KGEModel):
    """TransE: -||h + r - t||_p."""

    KIND: ClassVar[str] = "transe"

    norm: Literal[1, 2] = Field(default=1, description="The p of the Lp distance, 1 or 2.")


class DistMultModel(KGEModel):
    """DistMult: <h, r, t>."""

    KIND: ClassVar[str] = "distmult"


class ComplExModel(KGEModel):
    """ComplEx: Re(<h, r, conj(t)>) over complex rows (real parts, then imaginary: an even dim)."""

    KIND: ClassVar[str] = "complex"
    COMPLEX_ROWS: ClassVar[bool] = True


class RotatEModel(KGEModel):
    """RotatE: -||h * r - t|| over complex rows, each relation element a rotation (|r_i| = 1)."""

    KIND: ClassVar[str] = "rotate"
    COMPLEX_ROWS: ClassVar[bool] = True


MODELS: tuple[type[Variant], ...] = (
    GraphSAGEModel,
    GATModel,
    RGCNModel,
    RGATModel,
    TransEModel,
    DistMultModel,
    ComplExModel,
    RotatEModel,
)
# The kinds, as an enumeration for what reports them (the REST API's model field)
ModelKind = StrEnum("ModelKind", {m.KIND: m.KIND for m in MODELS})  # type: ignore[misc]
GNN_KINDS = tuple(m.KIND for m in MODELS if issubclass(m, GNNModel))
# training.mixedPrecision: bfloat16 (the models whose layers take autocast: every GNN)
MIXED_PRECISION_KINDS = GNN_KINDS
KGE_KINDS = tuple(m.KIND for m in MODELS if issubclass(m, KGEModel))
COMPLEX_KINDS = tuple(m.KIND for m in MODELS if issubclass(m, KGEModel) and m.COMPLEX_ROWS)

# The old form's model fields that are now the kge task's (legacy.py moves them there): declared on the
# wire so that the API server keeps them (it prunes undeclared fields) and an old spec still reads.
MOVED_TO_TASK: tuple[str, ...] = ("negatives", "loss", "margin")
_MOVED = {
    name: (
        KGETask.model_fields[name].annotation,
        Field(default=None, description=f"Old form (a spec without task): task.{name} of the kge task."),
    )
    for name in MOVED_TO_TASK
}

if TYPE_CHECKING:  # a class made at import: to a static checker, the flat union it is made as
    ModelSpec: TypeAlias = WireUnion
else:
    ModelSpec = wire_model(
        "ModelSpec",
        "The model trained: one kind (graphsage, gat, rgcn, rgat; transe, distmult, complex, rotate) with "
        "its own fields.",
        MODELS,
        prefix="model",
        default_kind="graphsage",
        kind_description="graphsage, gat, rgcn, rgat: GNNs over sampled neighbourhoods (node "
        "classification); transe, distmult, complex, rotate: knowledge-graph embeddings scored on (head, "
        "relation, tail) triples.",
        extra_fields=_MOVED,  # type: ignore[arg-type]
        owned_here=False,  # the spec adds them: the old form (no spec.task) may hold the old fields
    )


def tasks_of(kind: str) -> tuple[str, ...]:
    """The tasks a model kind can serve, the first its default."""
    variant: Any = ModelSpec.VARIANTS[kind]
    return tuple(variant.TASKS)


def is_gnn(kind: str) -> bool:
    return kind in GNN_KINDS


def gnn(model: WireUnion) -> GNNModel:
    """`model` as its GNN variant (raises for a KGE model: a caller's bug, the spec's rules prevent it)."""
    v = model.variant
    if not isinstance(v, GNNModel):
        raise TypeError(f"model.kind {model.kind} is not a GNN")
    return v


def kge(model: WireUnion) -> KGEModel:
    """`model` as its knowledge-graph variant."""
    v = model.variant
    if not isinstance(v, KGEModel):
        raise TypeError(f"model.kind {model.kind} is not a knowledge-graph embedding")
    return v


_GNN = cel_strings(GNN_KINDS)
_KGE = cel_strings(KGE_KINDS)


def _kge_table_rule(field: str) -> Rule:
    """A KGE model needs its entity and relation tables."""
    camel = {"entity_embedding": "entityEmbedding", "relation_embedding": "relationEmbedding"}[field]
    return Rule(
        f"kge-needs-{camel}",
        camel,
        lambda m: m.kind not in KGE_KINDS or getattr(m, field) is not None,
        cel=f"!(self.kind in {_KGE}) || has(self.{camel})",
        message="%s needs this table",
        args=(("self.kind", lambda m: m.kind),),
    )


def _gnn_default(field: str) -> str:
    """CEL: a GNN's `field`, or its default (every GNN kind has the same)."""
    return cel_or_default("self", ModelSpec, field, "graphsage")


add_rules(
    ModelSpec,
    Rule(
        "gnn-has-input",
        "",
        lambda m: m.kind not in GNN_KINDS or m.use_features is not False or m.node_embedding is not None,
        cel=f"!(self.kind in {_GNN}) || {_gnn_default('use_features')} || has(self.nodeEmbedding)",
        message="%s needs useFeatures or a nodeEmbedding input",
        args=(("self.kind", lambda m: m.kind),),
    ),
    Rule(
        "feature-bag-uses-features",
        "featureBag",
        lambda m: m.feature_bag is None or m.use_features is not False,
        cel=f"!has(self.featureBag) || {_gnn_default('use_features')}",
        message="reads the node features, but useFeatures is false",
    ),
    Rule(
        "feature-bag-or-projection",
        "featureProjection",
        lambda m: m.feature_bag is None or m.feature_projection is None,
        cel="!has(self.featureBag) || !has(self.featureProjection)",
        message="the features go through featureBag's table as they are: set featureBag or "
        "featureProjection, not both",
    ),
    _kge_table_rule("entity_embedding"),
    _kge_table_rule("relation_embedding"),
    Rule(
        "attention-heads-divide-width",
        "heads",
        lambda m: m.heads is None or (m.hidden_dim if m.hidden_dim is not None else 256) % m.heads == 0,
        cel=f"!has(self.heads) || {_gnn_default('hidden_dim')} % self.heads == 0",
        message="must divide model.hiddenDim (%d), the heads' concatenated width",
        args=((_gnn_default("hidden_dim"), lambda m: m.hidden_dim if m.hidden_dim is not None else 256),),
    ),
)
