"""spec.training: epochs, batches, sampling, the dense optimizer, checkpoints, early stopping."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    StringConstraints,
)

from graphtrain.contract.spec.base import MAX_LAYERS, MAX_TYPES, SpecModel
from graphtrain.contract.spec.enums import DenseOptimizer, MixedPrecision, SamplerPlace
from graphtrain.contract.spec.rules import (
    Rule,
    add_rules,
)

# an edge type as written: its relation, or source:relation:destination
EdgeTypeKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]
# a layer's fan-out at most: what a shard server's sample request takes (runtime/kvstore/wire/opargs.py),
# so a larger one (or 2**70, past int64) is refused here, not by the first distributed step
MAX_FANOUT = 1 << 20
Fanout = Annotated[int, Field(le=MAX_FANOUT)]
LayerFanouts = Annotated[list[Fanout], Field(max_length=MAX_LAYERS)]


class EarlyStopping(SpecModel):
    """Stop when the validation metric (accuracy for node classification, filtered MRR for a
    knowledge-graph model) has not improved for `patience` validation passes; the best checkpoint is
    kept either way."""

    patience: int = Field(
        default=5, ge=1, le=100000, description="Validation passes without improvement before stopping."
    )
    min_delta: float = Field(
        default=0.0,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Smallest rise of the validation metric counted as an improvement.",
    )


class Training(SpecModel):
    """The training loop: epochs, batches, sampling and the dense optimizer."""

    epochs: int = Field(
        default=10, ge=1, le=100000, description="Passes over the training nodes (or triples)."
    )
    batch_size: int = Field(
        default=1024,
        ge=1,
        le=10_000_000,
        description="Global batch: each of the N trainers takes batchSize/N seed nodes (or triples) per "
        "step.",
    )
    fanouts: list[Fanout] = Field(
        default_factory=lambda: [10, 25],
        max_length=MAX_LAYERS,
        description="GraphSAGE: neighbours sampled per node at each layer, input side first; -1 takes all. "
        "One entry per model.numLayers.",
    )
    edge_type_fanouts: dict[EdgeTypeKey, LayerFanouts] | None = Field(
        default=None,
        max_length=MAX_TYPES * 4,
        description="Typed graphs: fan-outs per edge type, {edge type: [input layer, ..., output layer]}: "
        "each relation of a node is sampled on its own (-1: all its edges of that type, 0: none). An edge "
        "type is named by its relation when no other edge type has it, else as source:relation:"
        "destination; edge types not listed take training.fanouts' number for their layer. Unset: "
        "training.fanouts' number of in-edges of any type, as on an untyped graph.",
    )
    dense_lr: float = Field(
        default=0.003,
        gt=0,
        allow_inf_nan=False,
        description="Learning rate of the dense (GraphSAGE) parameters.",
    )
    dense_optimizer: DenseOptimizer = Field(
        default=DenseOptimizer.adam,
        description="torch optimizer of the dense parameters: adam, sgd or adagrad.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of sampling, negatives and dense initialisation.")
    checkpoint_interval: int = Field(
        default=0, ge=0, description="Steps between checkpoints; 0: one at the end of each epoch."
    )
    eval_every: int = Field(default=1, ge=1, description="Epochs between validation passes.")
    early_stopping: EarlyStopping | None = Field(
        default=None,
        description="Stop early when the validation metric stops improving. Unset: train every epoch.",
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Intra-op (torch) threads per trainer. Unset: a trainer pod's cores (its CPU limit, "
        "else its CPU request, else its node's); `graphtrain run` gives every trainer and shard server a "
        "core first and the trainers the rest.",
    )
    sampler: SamplerPlace = Field(
        default=SamplerPlace.auto,
        description="GNN models: where neighbours are sampled. auto: on a trainer's GPU when it computes on "
        "one and maps every shard's graph (standalone, or shard servers on its host), else on the host; "
        "host: the shards' samplers; device: the whole graph (on a typed graph with its edge types, ids "
        "and features) copied to the trainer's device, refused at start when a shard's graph is on "
        "another host. Either way a batch's samples are the same: the CUDA core draws what the host "
        "sampler draws.",
    )
    prefetch: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Mini-batches sampled ahead on a background thread; 0 samples inline. Ahead pays "
        "when sampling waits on remote shards and the trainer has cores to spare; a CPU trainer whose "
        "intra-op threads fill its cores loses more to the contention than it hides (so did 2 GPU trainers "
        "sharing an H100: WordNet at 16.6k samples/s 4 ahead, 29.9k inline).",
    )
    mixed_precision: MixedPrecision = Field(
        default=MixedPrecision.none,
        description="GNN models. bfloat16: a training step's forward runs under torch.autocast, so the "
        "layers' matrix products (linear maps, relation weights, GAT's transforms) take bfloat16 inputs and "
        "accumulate in float32; the neighbour means and sums, GAT's attention, the parameters, their "
        "gradients and optimizer, the loss, the embedding tables, and evaluation and inference stay "
        "float32, and so do R-GCN's per-relation products on a CPU (small bfloat16 GEMMs are slower there). "
        "It pays where the hardware multiplies bfloat16 (GPUs; CPUs with AVX-512 BF16 or AMX). On a CPU the "
        "products' rows are padded to one of eight sizes per power of two, so oneDNN reuses a few cached "
        "kernels rather than making one per sampled shape (a trainer grew by ~1 GB without it). On a CPU "
        "with AMX, GraphSAGE node classification runs no autocast: its blocks are padded so, and oneDNN "
        "rounds the float32 products' inputs to bfloat16 inside each GEMM (outputs float32, forward and "
        "backward), without autocast's casts (WordNet's model step 7.7 ms against autocast's 9.8, float32 "
        "12.0). none: float32 throughout.",
    )
    profile_steps: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Training steps profiled with torch.profiler on each trainer, after up to 10 warm-up "
        "steps of the first epoch it trains (the window ends with that epoch, or before a checkpoint: "
        "pick fewer steps than checkpointInterval for a whole window): the ops that cost the most "
        "host and device time, the device's busy share and its CUDA calls per step (launches, "
        "synchronisations, copies), in the trainer log and, under `graphtrain run`, in "
        "profile-rank<R>.txt with a Chrome trace beside it. 0: no profiling.",
    )
    cuda_graph: bool = Field(
        default=False,
        description="KGE models (not RotatE) on one GPU trainer holding both tables (sharding: collective, "
        "float32, nonFiniteGrads: refuse): each full batch's step (lookups, loss, backward and both sparse "
        "steps) is captured once as a CUDA graph and replayed, one launch a step. Its checks (ids in range, "
        "finite gradients) stay on the device and are reported a step late, naming the step, which changed "
        "neither table. The first 3 steps run eagerly and the last, partial batch of an epoch too. "
        "GraphSAGE node classification likewise (no featureBag or edgeWeight; on a GPU "
        "denseOptimizer adam or sgd; a node embedding held so, duplicateGrads sum): its batches are "
        "packed at a fixed capacity learned over the first 8 full batches (trained eagerly), exactly; a "
        "batch beyond it is trained eagerly. On a CPU trainer the step runs eagerly over the same fixed "
        "buffers.",
    )


add_rules(
    Training,
    Rule(
        "edge-type-fanouts-per-layer",
        "edgeTypeFanouts",
        lambda t: (
            t.edge_type_fanouts is None or all(len(v) == len(t.fanouts) for v in t.edge_type_fanouts.values())
        ),
        cel="!has(self.edgeTypeFanouts) || self.edgeTypeFanouts.all(k, "
        "size(self.edgeTypeFanouts[k]) == size(self.fanouts))",
        message="each edge type needs one fan-out per layer, as many as training.fanouts has (%d)",
        args=(("size(self.fanouts)", lambda t: len(t.fanouts)),),
    ),
    Rule(
        "edge-type-fanouts-range",
        "edgeTypeFanouts",
        lambda t: (
            t.edge_type_fanouts is None or all(f >= -1 for v in t.edge_type_fanouts.values() for f in v)
        ),
        cel="!has(self.edgeTypeFanouts) || "
        "self.edgeTypeFanouts.all(k, self.edgeTypeFanouts[k].all(f, f >= -1))",
        message="fan-outs are -1 (all), 0 (none) or positive",
    ),
    Rule(
        "fanouts-positive",
        "fanouts",
        lambda t: all(f >= 1 or f == -1 for f in t.fanouts),
        cel="self.fanouts.all(f, f >= 1 || f == -1)",
        message="must be positive or -1 (all neighbours), got %s",
        args=(
            (
                "self.fanouts.filter(f, f < 1 && f != -1)",
                lambda t: [f for f in t.fanouts if f < 1 and f != -1],
            ),
        ),
    ),
)
