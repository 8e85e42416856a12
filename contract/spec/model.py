"""spec.model: GraphSAGE node classification or a TransE/DistMult knowledge-graph embedding."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)
from pydantic.alias_generators import to_camel

from graphtrain.contract.spec.base import IDENT, MAX_LAYERS, SpecModel
from graphtrain.contract.spec.enums import BagCombiner, KGELoss, ModelKind
from graphtrain.contract.spec.rules import (
    Rule,
    add_rules,
)


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


class ModelSpec(SpecModel):
    """The model trained: GraphSAGE node classification, or a TransE/DistMult knowledge-graph embedding."""

    kind: ModelKind = Field(
        default=ModelKind.graphsage,
        description="graphsage: GraphSAGE with the mean aggregator, node classification; transe, "
        "distmult: knowledge-graph embeddings scored on (head, relation, tail) triples.",
    )
    hidden_dim: int = Field(default=256, ge=1, le=65536, description="GraphSAGE: width of the hidden layers.")
    num_layers: int = Field(
        default=2,
        ge=1,
        le=MAX_LAYERS,
        description="GraphSAGE: number of layers (hops); training.fanouts has one entry per layer.",
    )
    dropout: float = Field(
        default=0.5, ge=0, lt=1, description="GraphSAGE: dropout probability between layers."
    )
    use_features: bool = Field(
        default=True, description="GraphSAGE: feed the graph's node features (feat) to the first layer."
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
        description="GraphSAGE: read the graph's sparse node features through a learnable table, each node "
        "the mean (or sum) of the rows of its nonzero feature columns, in place of featureProjection. "
        "Unset: the features are read as they are (dense) or projected.",
    )
    node_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=IDENT,
        description="GraphSAGE: name of a table (keys: nodes) giving a learnable input per node, beside or "
        "instead of the features. Unset: features only.",
    )
    entity_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=IDENT,
        description="TransE/DistMult: name of the entity table (keys: nodes); required by them.",
    )
    relation_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=IDENT,
        description="TransE/DistMult: name of the relation table (keys: relations); required by them.",
    )
    negatives: int = Field(
        default=64, ge=1, le=100000, description="TransE/DistMult: corrupted triples drawn per positive."
    )
    loss: KGELoss = Field(
        default=KGELoss.crossentropy,
        description="TransE/DistMult loss: margin (pairwise margin ranking), softplus (logistic), "
        "crossentropy (softmax over the true triple and its negatives).",
    )
    margin: float = Field(default=1.0, gt=0, description="TransE/DistMult: the margin of loss: margin.")
    norm: Literal[1, 2] = Field(default=1, description="TransE: the p of the Lp distance, 1 or 2.")


def is_kge(kind: str) -> bool:
    return kind != ModelKind.graphsage


def _kge_table_rules(field: str) -> tuple[Rule, ...]:
    """The KGE models need their entity and relation tables, and GraphSAGE reads neither."""
    camel = to_camel(field)
    return (
        Rule(
            f"kge-needs-{camel}",
            camel,
            lambda m: not is_kge(m.kind) or getattr(m, field) is not None,
            cel=f"self.kind == 'graphsage' || has(self.{camel})",
            message="%s needs this table",
            args=(("self.kind", lambda m: m.kind),),
        ),
        Rule(
            f"{camel}-kge-only",
            camel,
            lambda m: is_kge(m.kind) or getattr(m, field) is None,
            cel=f"self.kind != 'graphsage' || !has(self.{camel})",
            message="graphsage does not read it (transe and distmult do)",
        ),
    )


add_rules(
    ModelSpec,
    Rule(
        "graphsage-has-input",
        "",
        lambda m: is_kge(m.kind) or m.use_features or m.node_embedding is not None,
        cel="self.kind != 'graphsage' || self.useFeatures || has(self.nodeEmbedding)",
        message="graphsage needs useFeatures or a nodeEmbedding input",
    ),
    Rule(
        "node-embedding-graphsage-only",
        "nodeEmbedding",
        lambda m: m.node_embedding is None or not is_kge(m.kind),
        cel="!has(self.nodeEmbedding) || self.kind == 'graphsage'",
        message="%s does not read a node embedding (graphsage does)",
        args=(("self.kind", lambda m: m.kind),),
    ),
    Rule(
        "feature-bag-graphsage-only",
        "featureBag",
        lambda m: m.feature_bag is None or not is_kge(m.kind),
        cel="!has(self.featureBag) || self.kind == 'graphsage'",
        message="%s reads no node features (graphsage does)",
        args=(("self.kind", lambda m: m.kind),),
    ),
    Rule(
        "feature-bag-uses-features",
        "featureBag",
        lambda m: m.feature_bag is None or m.use_features,
        cel="!has(self.featureBag) || self.useFeatures",
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
    *_kge_table_rules("entity_embedding"),
    *_kge_table_rules("relation_embedding"),
)
