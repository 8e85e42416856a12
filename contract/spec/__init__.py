"""The GraphTraining spec and status: the one source of the schema, one module per section of it
(graph, placement and partition, tables, model, training, execution, status; document holds the
whole resource and the rules that span sections, loading reads it from YAML).

Everything that describes a training job lives here as pydantic models. The CRD's openAPIV3Schema
(`graphtrain crd`, `contract/crd.py`) is generated from these models, the local launcher and the operator
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
tests/contract/test_spec_fields.py fails when a spec field is read by no executor.

`check()` returns every problem of a document at once: schema errors, then every rule that can be
evaluated on the parts that are valid (a rule that reads a value that failed the schema is skipped).
"""

from __future__ import annotations

from graphtrain.contract.spec.base import (
    API_VERSION,
    DNS1035,
    GROUP,
    IDENT,
    KIND,
    MAX_INIT,
    MAX_LAYERS,
    MAX_NAME_LENGTH,
    MAX_TABLES,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    MemoryQuantity,
    Quantity,
    SpecModel,
    quantity_to_bytes,
)
from graphtrain.contract.spec.document import (
    GraphTraining,
    GraphTrainingSpec,
    ObjectMeta,
)
from graphtrain.contract.spec.enums import (
    Backend,
    BalanceConstraint,
    ClaimRetention,
    CleanPodPolicy,
    ConditionType,
    Dataset,
    DenseOptimizer,
    Device,
    DType,
    DuplicateRule,
    FileFormat,
    InitKind,
    KGELoss,
    ModelKind,
    NonFiniteRule,
    OnFull,
    OptimizerKind,
    PartitionAlgorithm,
    Phase,
    Sharding,
    ShardState,
    StallPolicy,
    StepCount,
    TableKeys,
    VocabularyKind,
)
from graphtrain.contract.spec.execution import (
    MAX_SECONDS,
    RunPolicy,
    ShardServers,
    Storage,
    Trainers,
)
from graphtrain.contract.spec.graph import (
    KG_DATASETS,
    STANDARD_SPLIT_DATASETS,
    GraphSource,
    NodeIds,
    Split,
    TripleColumn,
    TriplesSource,
    cel_list,
)
from graphtrain.contract.spec.loading import (
    MAX_SPEC_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    SpecError,
    check,
    load_yaml,
    parse,
    yaml_document,
)
from graphtrain.contract.spec.model import (
    ModelSpec,
    is_kge,
)
from graphtrain.contract.spec.placement import (
    DNS1123_SUBDOMAIN_OR_EMPTY,
    MAX_TOLERATIONS,
    PLACEMENT_FIELDS,
    AccessMode,
    Affinity,
    KubernetesObject,
    LabelKey,
    LabelValue,
    PartitionSpec,
    Placement,
    Resources,
    Toleration,
)
from graphtrain.contract.spec.rules import (
    ROOT_PATH,
    RULES,
    Problem,
    Rule,
    problems_from_validation,
    rules_of,
)
from graphtrain.contract.spec.status import (
    Condition,
    GraphTrainingStatus,
    MemoryNeed,
    PartitionStatus,
    Progress,
    ShardStatus,
)
from graphtrain.contract.spec.tables import (
    EmbeddingTable,
    Init,
    Optimizer,
    Vocabulary,
)
from graphtrain.contract.spec.training import (
    EarlyStopping,
    Training,
)

__all__ = [
    "API_VERSION",
    "AccessMode",
    "Affinity",
    "Backend",
    "BalanceConstraint",
    "ClaimRetention",
    "CleanPodPolicy",
    "Condition",
    "ConditionType",
    "DNS1035",
    "DNS1123_SUBDOMAIN_OR_EMPTY",
    "DType",
    "Dataset",
    "DenseOptimizer",
    "Device",
    "DuplicateRule",
    "EarlyStopping",
    "EmbeddingTable",
    "FileFormat",
    "GROUP",
    "GraphSource",
    "GraphTraining",
    "GraphTrainingSpec",
    "GraphTrainingStatus",
    "IDENT",
    "Init",
    "InitKind",
    "KGELoss",
    "KG_DATASETS",
    "KIND",
    "KubernetesObject",
    "LabelKey",
    "LabelValue",
    "MAX_INIT",
    "MAX_LAYERS",
    "MAX_NAME_LENGTH",
    "MAX_SECONDS",
    "MAX_SPEC_BYTES",
    "MAX_TABLES",
    "MAX_TOLERATIONS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "MemoryNeed",
    "MemoryQuantity",
    "ModelKind",
    "ModelSpec",
    "NodeIds",
    "NonFiniteRule",
    "ObjectMeta",
    "Optimizer",
    "OptimizerKind",
    "PLACEMENT_FIELDS",
    "PLURAL",
    "PartitionAlgorithm",
    "PartitionSpec",
    "PartitionStatus",
    "Phase",
    "Placement",
    "Problem",
    "Progress",
    "Quantity",
    "ROOT_PATH",
    "RULES",
    "Resources",
    "Rule",
    "RunPolicy",
    "SHORT_NAMES",
    "SINGULAR",
    "STANDARD_SPLIT_DATASETS",
    "ShardServers",
    "ShardState",
    "ShardStatus",
    "Sharding",
    "SpecError",
    "SpecModel",
    "Split",
    "StallPolicy",
    "StepCount",
    "Storage",
    "TableKeys",
    "Toleration",
    "Trainers",
    "Training",
    "TripleColumn",
    "TriplesSource",
    "VERSION",
    "Vocabulary",
    "OnFull",
    "VocabularyKind",
    "cel_list",
    "check",
    "is_kge",
    "load_yaml",
    "parse",
    "problems_from_validation",
    "quantity_to_bytes",
    "rules_of",
    "yaml_document",
]
