"""The GraphTraining status: phase, conditions, partition statistics, progress, shards."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from graphtrain.contract.spec.base import SpecModel
from graphtrain.contract.spec.enums import ConditionType, PartitionAlgorithm, Phase, ShardState

# -------------------------------------------------------------------------------------------- status

MAX_CONDITION_MESSAGE = 32768  # metav1.Condition's bound


class Condition(SpecModel):
    """One observation of the run, Kubernetes style: a type, whether it holds, why, since when."""

    type: ConditionType = Field(
        description="What is observed: SpecValid, PartitionReady, ShardsReady, TrainersReady, Stalled, "
        "Suspended, Succeeded or Failed."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds.")
    reason: str = Field(
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        max_length=1024,
        description="Why, as one CamelCase word a program can match.",
    )
    message: str = Field(default="", max_length=MAX_CONDITION_MESSAGE, description="Why, for people.")
    last_transition_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339).",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation of the spec this was observed for."
    )


class MemoryNeed(SpecModel):
    """The memory one pod of each role holds at least, measured on the partition written: the operator
    raises its default requests to it and refuses a stated memory limit below it (docs/collective.md)."""

    shard_server: int = Field(
        ge=0,
        description="Bytes of the largest shard server in host memory: its process, its partition's graph "
        "and node data, and (on CPU) its rows of the server-sharded tables and their optimizer state.",
    )
    trainer: int = Field(
        ge=0,
        description="Bytes of a trainer in host memory before its batches: its process and, on CPU, its "
        "share of each collective table (rows / trainers.replicas, of a dynamic vocabulary's capacity) "
        "with its optimizer state.",
    )


class PartitionStatus(SpecModel):
    """What the partitioner produced: sizes, edge cut and balance."""

    algorithm: PartitionAlgorithm = Field(description="The algorithm that made the partition.")
    parts: int = Field(ge=1, description="Number of partitions.")
    num_nodes: int = Field(ge=0, description="Nodes of the graph.")
    num_edges: int = Field(ge=0, description="Edges of the graph (directed, as stored).")
    cut_edges: int = Field(ge=0, description="Undirected edges whose ends lie in different partitions.")
    edge_cut_fraction: float = Field(ge=0, le=1, description="cutEdges over all undirected edges.")
    balance: dict[str, float] = Field(
        default_factory=dict, description="max/mean per balance constraint (1: perfect)."
    )
    nodes_per_part: list[int] = Field(default_factory=list, description="Nodes each partition owns.")
    edges_per_part: list[int] = Field(default_factory=list, description="Edges each partition holds.")
    halo_per_part: list[int] = Field(
        default_factory=list, description="Distinct remote neighbours of each partition's nodes."
    )
    seconds: float = Field(default=0.0, ge=0, description="Wall time of the partitioning, in seconds.")
    memory: MemoryNeed | None = Field(
        default=None, description="What each role's pods need in memory on this partition, at least."
    )


class Progress(SpecModel):
    """Training progress, written by the trainers (rank 0)."""

    epoch: int = Field(default=0, ge=0, description="Epochs completed.")
    epochs: int = Field(default=0, ge=0, description="Epochs planned (training.epochs).")
    step: int = Field(default=0, ge=0, description="Optimizer steps taken since the start.")
    loss: float | None = Field(default=None, description="Training loss of the latest steps.")
    samples_per_second: float | None = Field(
        default=None,
        ge=0,
        description="Seed nodes (or triples) trained per second, all trainers, over the training steps of "
        "the latest window (an epoch's validation pass not counted).",
    )
    eval_seconds: float | None = Field(
        default=None, ge=0, description="Seconds the latest validation pass took (rank 0)."
    )
    eval_metric: str | None = Field(
        default=None, description="Name of the latest validation metric (e.g. val_acc, val_mrr)."
    )
    eval_value: float | None = Field(default=None, description="Value of evalMetric.")
    summary: str = Field(default="", description="One line for people (the Progress column).")
    updated_at: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When this was written (RFC 3339).",
    )


class ShardStatus(SpecModel):
    """One shard server."""

    index: int = Field(ge=0, description="The shard's index (its partition).")
    state: ShardState = Field(
        default=ShardState.pending,
        description="Pending, Loading (its partition), Ready, Failed, or Stopped (the training ended or is "
        "being deleted, and its server was stopped).",
    )
    address: str | None = Field(default=None, description="Where trainers reach it (tcp://host:port).")
    rows: int | None = Field(default=None, ge=0, description="Embedding rows it holds, all tables.")
    bytes: int | None = Field(default=None, ge=0, description="Bytes of tables and optimizer state it holds.")
    restarts: int = Field(default=0, ge=0, description="Times it was restarted.")


class GraphTrainingStatus(SpecModel):
    """Observed state, written by the operator (Kubernetes) or the launcher (run directory)."""

    phase: Phase = Field(
        default=Phase.pending,
        description="Pending, Partitioning, Starting, Training, Restarting, Suspended, Succeeded or Failed.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=len(ConditionType),  # bounded: the CRD's transition rules read it (updates.py: OPEN)
        description="The latest observations, one per type.",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation of the spec this status describes."
    )
    partition: PartitionStatus | None = Field(default=None, description="The partition, once made.")
    progress: Progress | None = Field(default=None, description="Training progress, once training.")
    shards: list[ShardStatus] = Field(default_factory=list, description="One entry per shard server.")
    restarts: int = Field(
        default=0, ge=0, description="Trainer restarts so far (see runPolicy.backoffLimit)."
    )
    trainers_ran_attempt: int | None = Field(
        default=None,
        ge=0,
        description="The attempt (status.restarts then) in which every rank ran at once, unset until "
        "then and while suspended: a rank lost after it fails the attempt (every rank restarts from the "
        "last checkpoint), even once TrainersReady went False (a pod whose node stopped reporting reads "
        "Unknown first); before it, a missing rank is made again.",
    )
    start_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the run started, or last resumed after spec.suspend (RFC 3339); unset "
        "while suspended.",
    )
    completion_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the run succeeded or failed (RFC 3339).",
    )
    applied_spec_hash: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[0-9a-f]+$",
        description="A hash of the spec the training runs with (runPolicy and suspend left out), set once "
        "it first runs: how the operator knows its own spec again if the <name>-config ConfigMap holding "
        "it is deleted, and how the CRD tells a suspended training that ran (its spec fixed) from one "
        "created suspended (its spec still free).",
    )
