"""The whole GraphTraining: its spec with the rules that span sections, its metadata and status."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from graphtrain.contract.spec.base import (
    API_VERSION,
    DNS1035,
    KIND,
    MAX_NAME_LENGTH,
    MAX_TABLES,
    ObjectMeta,
    SpecModel,
)
from graphtrain.contract.spec.captured import CAPTURED_RULES
from graphtrain.contract.spec.enums import (
    Backend,
    Device,
    MixedPrecision,
    Mode,
    Sharding,
    TableKeys,
)
from graphtrain.contract.spec.execution import RunPolicy, ShardServers, Storage, Trainers
from graphtrain.contract.spec.graph import (
    KG_DATASETS,
    GraphSource,
    cel_has_node_type,
    cel_list,
    cel_node_types,
)
from graphtrain.contract.spec.inference import INFERENCE_RULES, Inference
from graphtrain.contract.spec.kge_tables import KGE_TABLE_RULES
from graphtrain.contract.spec.legacy import OLD_MODEL_FIELDS, read_old_form
from graphtrain.contract.spec.locality import LOCALITY_EVEN_TRAINERS, PodPlacement
from graphtrain.contract.spec.model import (
    GNN_KINDS,
    KGE_KINDS,
    MIXED_PRECISION_KINDS,
    MODELS,
    MOVED_TO_TASK,
    ModelSpec,
    tasks_of,
)
from graphtrain.contract.spec.placement import PARTITION_RULES, PartitionSpec
from graphtrain.contract.spec.pod_metadata import DESCRIPTION as POD_METADATA
from graphtrain.contract.spec.pod_metadata import OptionalPodMetadata
from graphtrain.contract.spec.rules import Rule, add_rules
from graphtrain.contract.spec.scheduling import Scheduling
from graphtrain.contract.spec.status import GraphTrainingStatus
from graphtrain.contract.spec.tables import EmbeddingTable
from graphtrain.contract.spec.task import (
    EDGE_TASKS,
    KGE,
    KGE_SAMPLERS,
    LINK_PREDICTION,
    NODE_CLASSIFICATION,
    TaskSpec,
)
from graphtrain.contract.spec.training import Training
from graphtrain.contract.spec.variants import cel_or_default, cel_strings, ownership_rules


class GraphTrainingSpec(SpecModel):
    """A whole training job: graph, partitioning, tables, model, training and the processes that run it.
    Every field but runPolicy and suspend is immutable once it runs (changed only while suspended)."""

    graph: GraphSource = Field(description="Where the graph comes from; required.")
    partition: PartitionSpec = Field(
        default_factory=PartitionSpec, description="How the graph is partitioned."
    )
    embeddings: list[EmbeddingTable] = Field(
        default_factory=list,
        max_length=MAX_TABLES,
        description="Learnable tables, sharded by row across the shard servers; each is read by one "
        "model input. Default: none.",
    )
    task: TaskSpec | None = Field(
        default=None,
        description="What is learned: nodeClassification, kge, linkPrediction, edgeClassification or "
        "edgeRegression, with the task's own "
        "fields. Unset: the model's own task (a GNN classifies nodes, a knowledge-graph model embeds a "
        "knowledge graph), and the spec is read in the old form (model.negatives, loss and margin as the "
        "kge task's).",
    )
    model: ModelSpec = Field(
        default_factory=lambda: ModelSpec(kind="graphsage"),
        description="The model trained: a GNN (graphsage, gat, rgcn, rgat) or a knowledge-graph "
        "embedding (transe, distmult, complex, rotate), each with its own fields.",
    )
    training: Training = Field(default_factory=Training, description="The training loop.")
    shard_servers: ShardServers = Field(default_factory=ShardServers, description="The shard servers.")
    trainers: Trainers = Field(default_factory=Trainers, description="The trainers.")
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy,
        description="Restarts, stalls, pods that cannot start, deadline and clean-up; may change while "
        "the training runs.",
    )
    suspend: bool = Field(
        default=False,
        description="True stops every pod of the training (trainers, shard servers, a running partition "
        "Job) and keeps the rest (the data claim with its checkpoints, the partition, the token): phase "
        "Suspended, condition Suspended True. False again resumes it: the shard servers and trainers "
        "restart from the last checkpoint (a suspension is not a restart of runPolicy.backoffLimit). As a "
        "Job's (for a queue such as Kueue): may change while the training runs; status.startTime is "
        "cleared while suspended and set again on resumption, so activeDeadlineSeconds counts from the last "
        "resumption; created suspended, the training makes no children, and its spec may still change "
        "until it first runs (status.appliedSpecHash unset); suspended after it ran, only runPolicy and "
        "suspend may change, as while it runs. Kubernetes only: `graphtrain run` ignores it.",
    )
    storage: Storage = Field(default_factory=Storage, description="The shared volume (Kubernetes only).")
    placement: PodPlacement = Field(
        default_factory=PodPlacement, description="The pods' layout (Kubernetes)."
    )
    pod_metadata: OptionalPodMetadata = Field(default=None, description=POD_METADATA)
    scheduling: Scheduling | None = Field(
        default=None,
        description="Admission and scheduling of every shard-server and trainer pod as one group: a "
        "Kueue queue, a gang PodGroup (Volcano or coscheduling) and the pods' scheduler (Kubernetes "
        "only). Unset: each pod scheduled on its own, the trainers made once the shard servers are ready.",
    )
    mode: Mode = Field(
        default=Mode.train,
        description="train (default) trains the model; inference infers every node's outputs from the "
        "checkpoint spec.inference names (a GNN task's: the same graph, model and tables as the training "
        "that wrote it), layer by layer over the whole graph, as training's evaluation does.",
    )
    inference: Inference | None = Field(
        default=None, description="The checkpoint and the output of mode inference; required by it."
    )
    image: str | None = Field(
        default=None,
        max_length=1024,
        # an image reference: [registry[:port]/]path[:tag][@digest]; whitespace or a quote is never one
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$",
        description="Container image of the runtime. Unset: the operator's default image.",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_form(cls, data: Any) -> Any:
        """A spec without task is the old form: read into the new one (legacy.py)."""
        return read_old_form(data)

    @property
    def num_shards(self) -> int:
        return self.shard_servers.replicas or self.partition.parts

    @property
    def task_kind(self) -> str:
        """The task learned: spec.task's kind, else the model's own."""
        return self.task.kind if self.task is not None else tasks_of(self.model.kind)[0]


def _reads_triples(s: GraphTrainingSpec, kind: str) -> bool:
    """Task `kind` (one that learns a knowledge graph's triples) is not learned, or has triples to learn."""
    return s.task_kind != kind or s.graph.dataset in KG_DATASETS or s.graph.triples is not None


def _reads_edge_labels(s: GraphTrainingSpec, kind: str) -> bool:
    """Task `kind` (one that learns labelled edges) is not learned, or the graph is the user's typed
    files, the only place edge labels come from."""
    return s.task_kind != kind or s.graph.edges is not None


# The model inputs that name a table: their path under model (as the user writes it), how the spec
# reads the name (None: unset) and the keys the table must have.
_REFS: tuple[tuple[str, Callable[[ModelSpec], str | None], TableKeys], ...] = (
    ("nodeEmbedding", lambda m: m.node_embedding, TableKeys.nodes),
    ("entityEmbedding", lambda m: m.entity_embedding, TableKeys.nodes),
    ("relationEmbedding", lambda m: m.relation_embedding, TableKeys.relations),
    (
        "featureBag.embedding",
        lambda m: None if m.feature_bag is None else m.feature_bag.embedding,
        TableKeys.features,
    ),
)


def _cel_set(path: str) -> str:
    """CEL: the model input at `path` is set (a nested name is set with its object: it is required)."""
    return f"has(self.model.{path.split('.')[0]})"


def _cel_has_ref(table: str) -> str:
    """CEL: the table `table` (a CEL expression) is named by some model input."""
    return " || ".join(f"({_cel_set(p)} && self.model.{p} == {table}.name)" for p, _, _ in _REFS)


def _unused_tables(spec: GraphTrainingSpec) -> list[str]:
    refs = {name(spec.model) for _, name, _ in _REFS}
    return [t.name for t in spec.embeddings if t.name not in refs]


def _small_vocabularies(s: GraphTrainingSpec, collective: bool) -> list[str]:
    """Tables whose dynamic vocabulary has fewer rows than the trainers (collective tables) or shard
    servers (server tables) holding it: one of them would own none."""
    holders = s.trainers.replicas if collective else s.num_shards
    return [
        t.name
        for t in s.embeddings
        if (t.sharding == Sharding.collective) == collective
        and t.vocabulary.capacity is not None
        and t.vocabulary.capacity < holders
    ]


def _typed_tables_untyped(s: GraphTrainingSpec) -> list[str]:
    """Tables with nodeTypes over a graph the spec gives no node types."""
    if s.graph.is_typed:
        return []
    return [t.name for t in s.embeddings if t.node_types is not None]


def _unknown_node_type(s: GraphTrainingSpec) -> tuple[str, str] | None:
    """(table, node type) of the first node type a table names that the typed graph lacks."""
    if not s.graph.is_typed:
        return None
    known = s.graph.node_types
    return next(((t.name, n) for t in s.embeddings for n in t.node_types or [] if n not in known), None)


def _unknown_arg(s: GraphTrainingSpec, i: int) -> str:
    found = _unknown_node_type(s)
    assert found is not None
    return found[i]


_CEL_TYPED = "((has(self.graph.typed) && self.graph.typed) || has(self.graph.nodes))"
_CEL_NODE_TYPES = cel_node_types("self.graph")
_CEL_KNOWN = cel_has_node_type("self.graph", "n")
_CEL_UNKNOWN = f"!{_CEL_KNOWN}"
# each table's unknown node types, a list per table: the first unknown type is then read from these lists
# (the API server's estimate of a filter of the first unknown table's own list exceeds its budget 100x)
_CEL_UNKNOWN_TYPES = f"self.embeddings.map(t, has(t.nodeTypes) ? t.nodeTypes.filter(n, {_CEL_UNKNOWN}) : [])"
_CEL_UNKNOWN_TABLE = (
    f"self.embeddings.filter(t, has(t.nodeTypes) && t.nodeTypes.exists(n, {_CEL_UNKNOWN}))[0]"
)

# shard servers in CEL: GraphTrainingSpec.num_shards
_CEL_SHARDS = "(has(self.shardServers.replicas) ? self.shardServers.replicas : self.partition.parts)"


def _first_duplicate(spec: GraphTrainingSpec) -> str | None:
    names = [t.name for t in spec.embeddings]
    return next((n for n in names if names.count(n) > 1), None)


def _ref_rules(path: str, name_of: Callable[[ModelSpec], str | None], keys: TableKeys) -> tuple[Rule, ...]:
    """A model input names an existing table, keyed as that input reads it."""
    ref, rule = f"self.model.{path}", path.split(".")[0]

    def exists(s: GraphTrainingSpec) -> bool:
        name = name_of(s.model)
        return name is None or any(t.name == name for t in s.embeddings)

    def keyed(s: GraphTrainingSpec) -> bool:
        name = name_of(s.model)
        return name is None or all(t.keys == keys for t in s.embeddings if t.name == name)

    return (
        Rule(
            f"{rule}-exists",
            f"model.{path}",
            exists,
            cel=f"!{_cel_set(path)} || self.embeddings.exists(t, t.name == {ref})",
            message="no embedding table named '%s' (tables: %s)",
            args=(
                (ref, lambda s: name_of(s.model)),
                ("self.embeddings.map(t, t.name)", lambda s: [t.name for t in s.embeddings]),
            ),
        ),
        Rule(
            f"{rule}-keys",
            f"model.{path}",
            keyed,
            cel=f"!{_cel_set(path)} || self.embeddings.all(t, t.name != {ref} || t.keys == '{keys.value}')",
            message=f"table '%s' must have keys: {keys.value}",
            args=((ref, lambda s: name_of(s.model)),),
        ),
    )


_GNN = cel_strings(GNN_KINDS)
_KGE = cel_strings(KGE_KINDS)
# the task in CEL: spec.task's kind, else the model's own (tasks_of(kind)[0])
_CEL_TASK = (
    f"(has(self.task) ? self.task.kind : (self.model.kind in {_KGE} ? '{KGE}' : '{NODE_CLASSIFICATION}'))"
)
_CEL_LAYERS = cel_or_default("self.model", ModelSpec, "num_layers", "graphsage")
_CEL_USE_FEATURES = cel_or_default("self.model", ModelSpec, "use_features", "graphsage")
_TASK_KINDS = sorted({t for m in MODELS for t in m.TASKS})  # type: ignore[attr-defined]
_CEL_SERVES = " || ".join(
    f"(self.task.kind == '{t}' && self.model.kind in {cel_strings([m.KIND for m in MODELS if t in m.TASKS])})"  # type: ignore[attr-defined]
    for t in _TASK_KINDS
)
_SERVERS = "; ".join(
    f"{t}: {', '.join(m.KIND for m in MODELS if t in m.TASKS)}"  # type: ignore[attr-defined]
    for t in _TASK_KINDS
)


def _moved_unset(s: GraphTrainingSpec, field: str) -> bool:
    """An old model field now the task's is not on the model of a spec that has a task."""
    return s.task is None or getattr(s.model, field) is None


def _num_layers(s: GraphTrainingSpec) -> int:
    layers: int | None = s.model.num_layers
    return layers if layers is not None else 2


# Which model kinds may hold each model field. The old form (no spec.task) may hold the old model's
# fields on any kind: they are read into the new form (legacy.py), and the API server keeps the
# defaults the old CRD stored on every training.
_OLD = {f for f in ModelSpec.model_fields if to_camel(f) in OLD_MODEL_FIELDS}
_MODEL_OWNERSHIP = (
    *ownership_rules(
        ModelSpec, "model", "self.model", lambda s: s.model, sorted(set(ModelSpec.model_fields) - _OLD)
    ),
    *ownership_rules(
        ModelSpec,
        "model",
        "self.model",
        lambda s: s.model,
        sorted(_OLD),
        waived=("!has(self.task)", lambda s: s.task is None),
    ),
    *(
        Rule(
            f"model-{to_camel(f)}-moved",
            f"model.{to_camel(f)}",
            partial(_moved_unset, field=f),
            cel=f"!has(self.task) || !has(self.model.{to_camel(f)})",
            message=f"is the kge task's: write it as task.{to_camel(f)}",
        )
        for f in MOVED_TO_TASK
    ),
)


add_rules(
    GraphTrainingSpec,
    *_MODEL_OWNERSHIP,
    *KGE_TABLE_RULES,
    *CAPTURED_RULES,
    Rule(
        "table-names-unique",
        "embeddings",
        lambda s: _first_duplicate(s) is None,
        cel="self.embeddings.all(t, self.embeddings.exists_one(u, u.name == t.name))",
        message="duplicate table name '%s'",
        args=(
            (
                "self.embeddings.filter(t, !self.embeddings.exists_one(u, u.name == t.name))[0].name",
                _first_duplicate,
            ),
        ),
    ),
    Rule(
        "tables-used",
        "embeddings",
        lambda s: not _unused_tables(s),
        cel=f"self.embeddings.all(t, {_cel_has_ref('t')})",
        message="read by no model input (model.nodeEmbedding, entityEmbedding, relationEmbedding, "
        "featureBag.embedding): %s",
        args=((f"self.embeddings.filter(t, !({_cel_has_ref('t')})).map(t, t.name)", _unused_tables),),
    ),
    *(r for path, name_of, keys in _REFS for r in _ref_rules(path, name_of, keys)),
    Rule(
        "fanouts-per-layer",
        "training.fanouts",
        lambda s: s.model.kind not in GNN_KINDS or len(s.training.fanouts) == _num_layers(s),
        cel=f"!(self.model.kind in {_GNN}) || size(self.training.fanouts) == {_CEL_LAYERS}",
        message="has %d entries but model.numLayers is %d",
        args=(
            ("size(self.training.fanouts)", lambda s: len(s.training.fanouts)),
            (_CEL_LAYERS, _num_layers),
        ),
    ),
    Rule(
        "mixed-precision-models",
        "training.mixedPrecision",
        lambda s: s.model.kind in MIXED_PRECISION_KINDS or s.training.mixed_precision == MixedPrecision.none,
        cel=f"self.model.kind in {cel_strings(MIXED_PRECISION_KINDS)} || "
        "!has(self.training.mixedPrecision) || self.training.mixedPrecision == 'none'",
        message=f"bfloat16 is for a GNN's layers ({', '.join(MIXED_PRECISION_KINDS)}); model.kind %s has "
        "none",
        args=(("self.model.kind", lambda s: s.model.kind),),
    ),
    Rule(
        "gang-scheduler",
        "scheduling.schedulerName",
        lambda s: s.scheduling is None or not s.scheduling.gang or s.scheduling.scheduler_name is not None,
        cel="!has(self.scheduling) || !has(self.scheduling.gang) || !self.scheduling.gang || "
        "has(self.scheduling.schedulerName)",
        message="scheduling.gang needs the scheduler that honours its PodGroup: volcano, or the one "
        "running the coscheduling plugin (e.g. scheduler-plugins-scheduler)",
    ),
    *INFERENCE_RULES,
    *PARTITION_RULES,
    Rule(
        "inference-gnn",
        "mode",
        lambda s: s.mode != Mode.inference or s.task_kind != KGE,
        cel=f"!has(self.mode) || self.mode != 'inference' || {_CEL_TASK} != '{KGE}'",
        message="task kge has no layers to infer: its embeddings are its tables (graphtrain export)",
    ),
    Rule(
        "task-model",
        "model.kind",
        lambda s: s.task is None or s.task.kind in tasks_of(s.model.kind),
        cel=f"!has(self.task) || {_CEL_SERVES}",
        message="%s does not learn task %s (" + _SERVERS + ")",
        args=(("self.model.kind", lambda s: s.model.kind), ("self.task.kind", lambda s: s.task.kind)),
    ),
    Rule(
        "node-classification-labelled-graph",
        "graph.dataset",
        lambda s: s.task_kind != NODE_CLASSIFICATION or s.graph.dataset not in KG_DATASETS,
        cel=f"{_CEL_TASK} != '{NODE_CLASSIFICATION}' || !has(self.graph.dataset) || "
        f"!(self.graph.dataset in {cel_list(KG_DATASETS)})",
        message="%s is a knowledge graph without node labels; learn it with task kge (model transe, "
        "distmult, complex or rotate)",
        args=(("self.graph.dataset", lambda s: s.graph.dataset),),
    ),
    Rule(
        "gnn-knowledge-graph-features",
        "model.useFeatures",
        lambda s: (
            s.model.kind not in GNN_KINDS
            or s.graph.dataset not in KG_DATASETS
            or s.model.use_features is False
        ),
        cel=f"!(self.model.kind in {_GNN}) || !has(self.graph.dataset) || "
        f"!(self.graph.dataset in {cel_list(KG_DATASETS)}) || !{_CEL_USE_FEATURES}",
        message="%s is a knowledge graph without node features: set useFeatures: false (the model then "
        "reads model.nodeEmbedding)",
        args=(("self.graph.dataset", lambda s: s.graph.dataset),),
    ),
    Rule(
        "node-classification-no-triples",
        "graph.triples",
        lambda s: s.task_kind != NODE_CLASSIFICATION or s.graph.triples is None,
        cel=f"{_CEL_TASK} != '{NODE_CLASSIFICATION}' || !has(self.graph.triples)",
        message="triples carry no node labels to classify; learn them with task kge (model transe, "
        "distmult, complex or rotate)",
    ),
    *(
        Rule(
            f"{kind}-knowledge-graph",
            "graph.dataset",
            partial(_reads_triples, kind=kind),
            cel=f"{_CEL_TASK} != '{kind}' || has(self.graph.triples) || "
            f"(has(self.graph.dataset) && self.graph.dataset in {cel_list(KG_DATASETS)})",
            message=f"task {kind} needs graph.triples (your own head/relation/tail files) or graph.dataset "
            "naming a knowledge graph (" + ", ".join(sorted(KG_DATASETS)) + ")",
        )
        for kind in (KGE, LINK_PREDICTION)
    ),
    *(
        Rule(
            f"{kind}-labelled-edges",
            "graph.edges",
            partial(_reads_edge_labels, kind=kind),
            cel=f"{_CEL_TASK} != '{kind}' || has(self.graph.edges)",
            message=f"task {kind} needs graph.nodes and graph.edges (your own typed files), with a label "
            "column on the edge types whose edges it learns",
        )
        for kind in EDGE_TASKS
    ),
    Rule(
        "kge-no-reverse",
        "graph.reverseEdges",
        lambda s: s.task_kind != KGE or not s.graph.reverse_edges,
        cel=f"{_CEL_TASK} != '{KGE}' || !has(self.graph.reverseEdges) || !self.graph.reverseEdges",
        message="task kge learns the graph's edges as triples, and a knowledge graph's triples are directed "
        "(a reversed triple is another fact); task linkPrediction's encoder may read reverses",
    ),
    Rule(
        "kge-sampler",
        "task.sampler",
        lambda s: s.task_kind != KGE or s.task is None or s.task.sampler in (None, *KGE_SAMPLERS),
        cel=f"{_CEL_TASK} != '{KGE}' || !has(self.task) || !has(self.task.sampler) || "
        f"self.task.sampler in {cel_strings(KGE_SAMPLERS)}",
        message="is %s, which task kge has not: uniform or joint (inBatch and local are linkPrediction's)",
        args=(("self.task.sampler", lambda s: s.task.sampler),),
    ),
    Rule(
        "shards-per-partition",
        "shardServers.replicas",
        lambda s: s.shard_servers.replicas is None or s.shard_servers.replicas == s.partition.parts,
        cel="!has(self.shardServers.replicas) || self.shardServers.replicas == self.partition.parts",
        message="is %d but partition.parts is %d: each shard server holds one partition",
        args=(
            ("self.shardServers.replicas", lambda s: s.shard_servers.replicas),
            ("self.partition.parts", lambda s: s.partition.parts),
        ),
    ),
    Rule(
        "dynamic-capacity-per-trainer",
        "embeddings",
        lambda s: not _small_vocabularies(s, collective=True),
        cel="self.embeddings.all(t, !has(t.sharding) || t.sharding != 'collective' || !has(t.vocabulary) || "
        "!has(t.vocabulary.capacity) || t.vocabulary.capacity >= self.trainers.replicas)",
        message="dynamic vocabulary of collective table %s holds fewer rows than trainers.replicas (%d): "
        "every trainer needs at least one",
        args=(
            (
                "self.embeddings.filter(t, has(t.sharding) && t.sharding == 'collective' && "
                "has(t.vocabulary) && has(t.vocabulary.capacity) && "
                "t.vocabulary.capacity < self.trainers.replicas).map(t, t.name)",
                lambda s: _small_vocabularies(s, collective=True),
            ),
            ("self.trainers.replicas", lambda s: s.trainers.replicas),
        ),
    ),
    Rule(
        "dynamic-capacity-per-shard",
        "embeddings",
        lambda s: not _small_vocabularies(s, collective=False),
        cel="self.embeddings.all(t, (has(t.sharding) && t.sharding == 'collective') || !has(t.vocabulary) || "
        "!has(t.vocabulary.capacity) || t.vocabulary.capacity >= " + _CEL_SHARDS + ")",
        message="dynamic vocabulary of %s holds fewer rows than there are shard servers (%d): every "
        "shard server needs at least one",
        args=(
            (
                "self.embeddings.filter(t, !(has(t.sharding) && t.sharding == 'collective') && "
                "has(t.vocabulary) && has(t.vocabulary.capacity) && "
                "t.vocabulary.capacity < " + _CEL_SHARDS + ").map(t, t.name)",
                lambda s: _small_vocabularies(s, collective=False),
            ),
            (_CEL_SHARDS, lambda s: s.num_shards),
        ),
    ),
    Rule(
        "table-node-types-typed-graph",
        "embeddings",
        lambda s: not _typed_tables_untyped(s),
        cel=f"{_CEL_TYPED} || self.embeddings.all(t, !has(t.nodeTypes))",
        message="nodeTypes of %s: the graph has no node types (graph.typed, graph.nodes)",
        args=(("self.embeddings.filter(t, has(t.nodeTypes)).map(t, t.name)", _typed_tables_untyped),),
    ),
    Rule(
        "table-node-types-known",
        "embeddings",
        lambda s: _unknown_node_type(s) is None,
        cel=f"!{_CEL_TYPED} || self.embeddings.all(t, !has(t.nodeTypes) || t.nodeTypes.all(n, {_CEL_KNOWN}))",
        message="nodeTypes of %s: the graph has no node type '%s' (node types: %s)",
        args=(
            (f"{_CEL_UNKNOWN_TABLE}.name", partial(_unknown_arg, i=0)),
            (f"{_CEL_UNKNOWN_TYPES}.filter(l, size(l) > 0)[0][0]", partial(_unknown_arg, i=1)),
            (_CEL_NODE_TYPES, lambda s: s.graph.node_types),
        ),
    ),
    LOCALITY_EVEN_TRAINERS,
    Rule(
        "nccl-needs-cuda",
        "trainers.backend",
        lambda s: s.trainers.backend != Backend.nccl or s.trainers.device == Device.cuda,
        cel="!has(self.trainers.backend) || self.trainers.backend != 'nccl' || "
        "self.trainers.device == 'cuda'",
        message="nccl runs on GPUs: set trainers.device: cuda, or use gloo for CPU trainers",
    ),
)


class GraphTraining(SpecModel):
    """A whole GraphTraining document: what both executors run, and (Kubernetes) its status."""

    api_version: Literal["graphtrain.io/v1alpha1"] = API_VERSION
    kind: Literal["GraphTraining"] = KIND
    metadata: ObjectMeta
    spec: GraphTrainingSpec
    status: GraphTrainingStatus | None = None


add_rules(
    GraphTraining,
    Rule(
        "name-dns-label",
        "metadata.name",
        lambda gt: (
            len(gt.metadata.name) <= MAX_NAME_LENGTH and re.match(DNS1035, gt.metadata.name) is not None
        ),
        cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{DNS1035}')",
        message="'%s' must be a lowercase DNS label (a-z, 0-9, '-', starting with a letter) of at most "
        f"{MAX_NAME_LENGTH} characters",
        args=(("self.metadata.name", lambda gt: gt.metadata.name),),
    ),
)
