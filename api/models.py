"""The API's response models: the spec's status models as they are (GraphTrainingStatus, Condition,
Progress, ShardStatus, PartitionStatus: one schema with the CRD and status.json), wrapped in the few
shapes only the API has (a training's identity, a spec summary, trainers, events, lists).

The builders here are pure: each source reads its own storage and hands them plain values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from graphtrain.contract import reporting
from graphtrain.contract.spec import (
    Backend,
    ConditionType,
    Device,
    GraphTrainingSpec,
    GraphTrainingStatus,
    Mode,
    ModelKind,
    OptimizerKind,
    PartitionAlgorithm,
    Phase,
    Progress,
    Sharding,
    ShardStatus,
)

DATE_TIME: JsonDict = {"format": "date-time"}


# A namespace's or GraphTraining's name (Kubernetes' DNS label): what the routes take, so what a
# source may list (a run directory named otherwise, without a spec naming it, is no training)
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class ApiModel(BaseModel):
    """camelCase on the wire, like the spec."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


class Metadata(ApiModel):
    """Which training: its namespace and name, as Kubernetes names it (a local run: its spec's)."""

    namespace: str = Field(description="The namespace (a local run: metadata.namespace or 'default').")
    name: str = Field(description="The GraphTraining's name.")
    labels: dict[str, str] = Field(default_factory=dict, description="metadata.labels.")
    uid: str | None = Field(default=None, description="metadata.uid (Kubernetes only).")
    generation: int | None = Field(default=None, description="metadata.generation (Kubernetes only).")
    creation_timestamp: str | None = Field(
        default=None, json_schema_extra=DATE_TIME, description="When it was created (a local run: started)."
    )


class TableSummary(ApiModel):
    name: str
    dim: int
    optimizer: OptimizerKind
    sharding: Sharding


class SpecSummary(ApiModel):
    """The spec in a few fields: what is trained, on what, by how many processes."""

    graph: str = Field(description="The dataset's name, or the path of the graph's file.")
    task: str = Field(
        description="What is learned: nodeClassification, kge, linkPrediction, edgeClassification or "
        "edgeRegression."
    )
    model: ModelKind
    epochs: int
    batch_size: int
    partition_algorithm: PartitionAlgorithm
    partitions: int
    embeddings: list[TableSummary]
    shard_servers: int = Field(description="Shard servers (one per partition unless set).")
    trainers: int
    backend: Backend
    device: Device = Field(description="Where the shard servers keep their tables.")
    trainer_device: Device = Field(description="Where the trainers compute.")
    suspend: bool
    mode: Mode = Field(
        default=Mode.train,
        description="train, or inference: every node's outputs from a trained checkpoint (epochs and the "
        "batch size are then not read).",
    )
    inference_checkpoint: str | None = Field(
        default=None, description="Mode inference: the checkpoint it infers from (spec.inference.checkpoint)."
    )
    inference_output: str | None = Field(
        default=None,
        description="Mode inference: where its outputs go (spec.inference.output; unset: the "
        "training's work directory).",
    )


class TrainerState(StrEnum):
    """A rank's state: its pod's phase; Terminating while its pod is being deleted (as kubectl says);
    Stopped when it has no pod because the training was suspended, failed or is being deleted (a
    succeeded training's ranks stay Succeeded); Pending while its pod is still to come."""

    pending = "Pending"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"
    terminating = "Terminating"
    stopped = "Stopped"
    unknown = "Unknown"


class TrainerStatus(ApiModel):
    """One trainer rank: its process' (pod's) state and its last report, which is its heartbeat."""

    rank: int = Field(ge=0)
    state: TrainerState
    restarts: int = Field(default=0, ge=0, description="Times this rank was started again.")
    pod: str | None = Field(default=None, description="Its pod (Kubernetes only).")
    last_heartbeat: str | None = Field(
        default=None, json_schema_extra=DATE_TIME, description="When it last reported (its report's time)."
    )
    progress: Progress | None = Field(default=None, description="Its last report.")


class TrainingResource(ApiModel):
    """One training: identity, spec summary, the whole status, and its trainers."""

    metadata: Metadata
    spec: SpecSummary | None = Field(default=None, description="None when the spec cannot be read.")
    status: GraphTrainingStatus
    trainers: list[TrainerStatus] = Field(default_factory=list)


class TrainingSummary(ApiModel):
    """A training in a list: identity, phase and progress."""

    metadata: Metadata
    phase: Phase
    progress: Progress | None = None
    restarts: int = 0
    start_time: str | None = Field(default=None, json_schema_extra=DATE_TIME)
    completion_time: str | None = Field(default=None, json_schema_extra=DATE_TIME)


class TrainingList(ApiModel):
    items: list[TrainingSummary]
    continue_: str | None = Field(
        default=None,
        alias="continue",
        description="Pass it as ?continue= for the next page; absent on the last page.",
    )

    @classmethod
    def of(cls, items: list[TrainingSummary], token: str | None = None) -> TrainingList:
        return cls.model_validate({"items": items, "continue": token})


class TrainingEvent(ApiModel):
    """Something that happened to the training (Kubernetes: an Event; a local run: a condition's change)."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str = ""
    count: int = Field(default=1, ge=1)
    first_timestamp: str | None = Field(default=None, json_schema_extra=DATE_TIME)
    last_timestamp: str | None = Field(default=None, json_schema_extra=DATE_TIME)
    source: str | None = Field(default=None, description="Who reported it.")


class EventList(ApiModel):
    """The newest `limit` events (a query parameter) of the training's, oldest first."""

    items: list[TrainingEvent]
    total: int = Field(description="How many events the training has; more than items when cut.")


class History(ApiModel):
    """One entry per finished epoch, oldest first; at most `limit` are kept where they are stored."""

    items: list[Progress]
    limit: int = Field(description="How many entries the training keeps (the oldest are dropped).")


class ShardList(ApiModel):
    items: list[ShardStatus]


class TrainerList(ApiModel):
    items: list[TrainerStatus]


class Health(ApiModel):
    status: Literal["ok"] = "ok"


# ---------------------------------------------------------------------------------------- builders


def spec_summary(spec: GraphTrainingSpec) -> SpecSummary:
    return SpecSummary(
        graph=spec.graph.described,
        task=spec.task_kind,
        model=ModelKind(spec.model.kind),
        epochs=spec.training.epochs,
        batch_size=spec.training.batch_size,
        partition_algorithm=spec.partition.algorithm,
        partitions=spec.partition.parts,
        embeddings=[
            TableSummary(name=t.name, dim=t.dim, optimizer=t.optimizer.kind, sharding=t.sharding)
            for t in spec.embeddings
        ],
        shard_servers=spec.num_shards,
        trainers=spec.trainers.replicas,
        backend=spec.trainers.dist_backend,
        device=spec.shard_servers.device,
        trainer_device=spec.trainers.device,
        suspend=spec.suspend,
        mode=spec.mode,
        inference_checkpoint=spec.inference.checkpoint if spec.inference else None,
        inference_output=spec.inference.output if spec.inference else None,
    )


def summary(metadata: Metadata, status: GraphTrainingStatus) -> TrainingSummary:
    return TrainingSummary(
        metadata=metadata,
        phase=status.phase,
        progress=status.progress,
        restarts=status.restarts,
        start_time=status.start_time,
        completion_time=status.completion_time,
    )


def history_answer(stored: str | bytes | None) -> bytes:
    """/history's answer (History, JSON) from a stored history (reporting's JSON list; None: none):
    what the sources keep and the route sends as is. Built here, once per stored version, because
    decoding a 500-epoch history takes 3-10 ms and its answer (~108 KB) nothing to send again. Not the
    stored text itself: its entries that do not parse are skipped here, and the answer names every
    field (null where unset), as the schema's model dumps it."""
    items = reporting.decode_history(stored)
    return History(items=items, limit=reporting.HISTORY_LIMIT).model_dump_json(by_alias=True).encode()


WARNING_CONDITIONS = {ConditionType.failed.value, ConditionType.stalled.value}


def condition_events(status: GraphTrainingStatus, source: str) -> list[TrainingEvent]:
    """A status' conditions as the events of their last change, oldest first: what a local run has in
    place of Kubernetes events (a Failed or Stalled condition that holds is a Warning)."""
    events = [
        TrainingEvent(
            type="Warning" if c.type in WARNING_CONDITIONS and c.status == "True" else "Normal",
            reason=c.reason,
            message=c.message or f"{c.type} is {c.status}",
            first_timestamp=c.last_transition_time,
            last_timestamp=c.last_transition_time,
            source=source,
        )
        for c in status.conditions
    ]
    return sorted(events, key=lambda e: e.last_timestamp or "")


def trainer_state(phase: Phase | str, reported: bool) -> TrainerState:
    """A rank's state where no process state is seen (a local run): from the run's phase and whether
    the rank has reported."""
    if phase == Phase.succeeded:
        return TrainerState.succeeded
    if phase == Phase.failed:
        return TrainerState.failed
    if phase in (Phase.training, Phase.restarting) and reported:
        return TrainerState.running
    return TrainerState.pending
