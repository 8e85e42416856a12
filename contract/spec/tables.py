"""spec.embeddings: learnable tables, their init, optimizer and vocabulary."""

from __future__ import annotations

from pydantic import (
    Field,
)
from pydantic.alias_generators import to_snake

from graphtrain.contract.optimizers import SPARSE_OPTIMIZERS
from graphtrain.contract.spec.base import IDENT, MAX_INIT, MAX_TYPES, SpecModel, TypeName
from graphtrain.contract.spec.enums import (
    DType,
    DuplicateRule,
    InitKind,
    NonFiniteRule,
    OnFull,
    OptimizerKind,
    RowsStepped,
    Sharding,
    StepCount,
    TableKeys,
    VocabularyKind,
)
from graphtrain.contract.spec.rules import Rule, add_rules, distinct


class Init(SpecModel):
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


NORMAL_SPAN = 6.0  # a normal init's draws are held to mean ± this many stds

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
    Rule(
        "init-normal-float32",
        "",
        lambda i: i.kind != InitKind.normal or abs(i.mean) + NORMAL_SPAN * i.std <= MAX_INIT,
        cel=f"self.kind != 'normal' || (self.mean + {NORMAL_SPAN:.1f} * self.std <= {MAX_INIT:g} && "
        f"self.mean - {NORMAL_SPAN:.1f} * self.std >= -{MAX_INIT:g})",
        message=f"a normal init's mean ± {NORMAL_SPAN:g} std must lie within ±{MAX_INIT:g}, as a uniform's "
        "bounds (beyond float32's 3.4e38 its rows would start infinite, and training fail on their first "
        "push)",
    ),
)


class Optimizer(SpecModel):
    """Sparse optimizer applied to the rows a step touched (or every row: rows), where they live (shard
    servers or trainers).

    Weight decay is L2 folded into the gradient (g' = g + weightDecay * w) for every kind."""

    kind: OptimizerKind = Field(
        default=OptimizerKind("adagrad"),
        description="; ".join(f"{o.name}: {o.summary}" for o in SPARSE_OPTIMIZERS) + ".",
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
    rows: RowsStepped = Field(
        default=RowsStepped.touched,
        description="Which rows a step updates. touched: the rows its batch read, as sparse optimizers "
        "do. all: every row, the untouched ones with a zero gradient, so Adam's momentum keeps moving "
        "them and every row counts every step: torch.optim.Adam on a dense table, as PyKEEN trains "
        "(with stepCount row, the same update). For the small tables of a knowledge-graph model "
        "(model.entityEmbedding, relationEmbedding, task kge, fixed vocabulary, sharding server): each "
        "trainer reads and pushes the whole table at every step.",
    )


class Vocabulary(SpecModel):
    """Which ids a table has rows for."""

    kind: VocabularyKind = Field(
        default=VocabularyKind.fixed,
        description="fixed: ids 0..rows-1; dynamic: arbitrary int64 keys mapped to rows on first use (a "
        "training lookup; an evaluation lookup of an unseen key reads its initial value and inserts "
        "nothing), up to capacity rows in all, each key's row on the shard server (sharding: server) or "
        "trainer (collective) numbered key mod their count.",
    )
    capacity: int | None = Field(
        default=None,
        ge=1,
        le=2**40,
        description="Rows of a dynamic vocabulary in all, split like its keys over the shard servers "
        "(sharding: server) or the trainers (collective); only with kind: dynamic. A share needing more "
        "than 4Ti of memory per pod is refused unless that role states its memory.",
    )
    on_full: OnFull = Field(
        default=OnFull.error,
        description="A dynamic vocabulary whose shard (a shard server's or trainer's share) is full: error "
        "(the lookup is refused, "
        "naming table, shard and capacity) or evict (its least recently used rows give way and restart "
        "from their new keys' initial values).",
    )


add_rules(
    Vocabulary,
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


class EmbeddingTable(SpecModel):
    """A learnable table, sharded by row across the shard servers (or across the trainers: sharding)."""

    name: str = Field(
        pattern=IDENT,
        max_length=63,
        description="Name of the table (lowercase letters, digits, '_'), as model.nodeEmbedding, "
        "entityEmbedding, relationEmbedding or featureBag.embedding name it; required.",
    )
    dim: int = Field(ge=1, le=65536, description="Width of a row (the embedding dimension); required.")
    keys: TableKeys = Field(
        default=TableKeys.nodes,
        description="What a row stands for: nodes (one row per graph node or KG entity, sharded like the "
        "graph), relations (one row per KG relation), features (one row per column of the graph's sparse "
        "node features, e.g. a word of a bag of words: model.featureBag reads it), custom (not supported "
        "yet: numEmbeddings rows). Must match the model input that reads the table.",
    )
    num_embeddings: int | None = Field(
        default=None, ge=1, description="Row count of a keys: custom table; only with keys: custom."
    )
    dtype: DType = Field(
        default=DType.float32,
        description="Element type of the rows: float32, or float16 / bfloat16 (half the memory, pull "
        "and lookup bytes and checkpoint; the optimizer steps in float32 and rounds back stochastically, "
        "its state stays float32). Server and collective tables, fixed and dynamic vocabularies, on "
        "CPUs and GPUs (the CPU and CUDA cores round alike: bit for bit where their float32 results agree).",
    )
    init: Init = Field(default_factory=Init, description="How the rows start.")
    optimizer: Optimizer = Field(
        default_factory=Optimizer, description="The sparse optimizer applied to the rows where they live."
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
        description="Where the rows live: server (on the shard servers, updated there); collective (sharded "
        "across the trainers, row of key k on trainer k mod trainers.replicas, looked up and updated "
        "all-to-all; docs/collective.md).",
    )
    vocabulary: Vocabulary = Field(
        default_factory=Vocabulary, description="Which ids the table has rows for."
    )
    node_types: list[TypeName] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TYPES,
        description="Typed graphs, keys: nodes: the node types the table has rows for, one per node of "
        "them (featureless types, as DGL's and GraphStorm's learnable node embeddings); a model input "
        "reads their rows for those nodes and zeros for the others, whose features carry them. Rows in "
        "(partition, type, node) order, so each shard server holds its own nodes' rows; with one type, "
        "a node's row is its id within its type. Unset: a row for every node.",
    )


FLOAT16_MAX = 65504.0  # the largest finite float16


def init_fits_float16(i: Init) -> bool:
    """Whether init `i` draws values a float16 row can hold (a normal one within mean ± 6 std)."""
    if i.kind == InitKind.uniform:
        return max(abs(i.low), abs(i.high)) <= FLOAT16_MAX
    if i.kind == InitKind.normal:
        return abs(i.mean) + NORMAL_SPAN * i.std <= FLOAT16_MAX
    return True


def _cel_init_fits_float16() -> str:
    kind = "(has(self.init.kind) ? self.init.kind : 'uniform')"
    low, high = "(has(self.init.low) ? self.init.low : -1.0)", "(has(self.init.high) ? self.init.high : 1.0)"
    mean, std = "(has(self.init.mean) ? self.init.mean : 0.0)", "(has(self.init.std) ? self.init.std : 1.0)"
    m, n = f"{FLOAT16_MAX:.1f}", f"{NORMAL_SPAN:.1f}"
    uniform = f"{low} >= -{m} && {high} <= {m}"
    normal = f"{mean} + {n} * {std} <= {m} && {mean} - {n} * {std} >= -{m}"
    return (
        "!has(self.dtype) || self.dtype != 'float16' || !has(self.init) || "
        f"({kind} == 'uniform' && {uniform}) || ({kind} == 'normal' && {normal}) || {kind} == 'zeros'"
    )


def _keys_only(name: str, field: str, keys: TableKeys) -> Rule:
    """The rule that table field `field` (camelCase) is set only on tables of `keys`."""
    attr = to_snake(field)
    return Rule(
        name,
        field,
        lambda t: getattr(t, attr) is None or t.keys == keys,
        cel=f"!has(self.{field}) || self.keys == '{keys.value}'",
        message=f"is only for keys: {keys.value} (keys is %s)",
        args=(("self.keys", lambda t: t.keys),),
    )


add_rules(
    EmbeddingTable,
    Rule(
        "table-keys-not-custom",
        "keys",
        lambda t: t.keys != TableKeys.custom,
        cel="self.keys != 'custom'",
        message="custom is not supported yet: a model reads tables keyed by nodes, relations or features",
    ),
    Rule(
        "table-custom-rows",
        "numEmbeddings",
        lambda t: t.keys != TableKeys.custom or t.num_embeddings is not None,
        cel="self.keys != 'custom' || has(self.numEmbeddings)",
        message="keys: custom needs numEmbeddings",
    ),
    _keys_only("table-rows-custom-only", "numEmbeddings", TableKeys.custom),
    _keys_only("table-node-types-nodes-keys", "nodeTypes", TableKeys.nodes),
    Rule(
        "table-node-types-fixed-vocabulary",
        "nodeTypes",
        lambda t: t.node_types is None or t.vocabulary.kind == VocabularyKind.fixed,
        cel="!has(self.nodeTypes) || !has(self.vocabulary) || self.vocabulary.kind == 'fixed'",
        message="a table over node types has a fixed vocabulary (a row per node of them)",
    ),
    Rule(
        "table-float16-init-range",
        "init",
        lambda t: t.dtype != DType.float16 or init_fits_float16(t.init),
        cel=_cel_init_fits_float16(),
        message=f"draws values a float16 row cannot hold (at most ±{FLOAT16_MAX:g}; a normal init is held "
        f"to mean ± {NORMAL_SPAN:g} std): narrow it, or use bfloat16 or float32",
    ),
    distinct("table-node-types-distinct", "nodeTypes", "node_types", "node type"),
)
