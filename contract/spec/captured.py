"""The spec's rule on training.cudaGraph: which steps can be captured as a CUDA graph. A KGE step
(runtime/train/graphed.py) and a GraphSAGE node-classification step (runtime/train/captured_sage.py),
each with one trainer holding its tables whole. What the spec cannot see (whether a bundled graph is
typed, the trainer's device and its CUDA core) the trainer refuses in one line. A Python check and the
same CEL rule of the CRD (rules.py); document.py adds it."""

from __future__ import annotations

from typing import Any

from graphtrain.contract.spec.enums import DuplicateRule, Sharding, VocabularyKind
from graphtrain.contract.spec.rules import Rule
from graphtrain.contract.spec.variants import cel_strings

# the checks read a GraphTrainingSpec (document.py, which imports this module: typed Any here)
GraphTrainingSpec = Any

# the KGE models whose step is captured: RotatE's relations are projected after each step
CAPTURED_KGE = ("transe", "distmult", "complex")
CAPTURED_GNN = "graphsage"


def _whole(t: Any) -> bool:
    """A table one trainer holds whole, as a captured step steps it."""
    return (
        t.sharding == Sharding.collective
        and str(t.dtype) == "float32"
        and t.vocabulary.kind == VocabularyKind.fixed
        and str(t.non_finite_grads) == "refuse"
    )


_CEL_WHOLE = (
    "(has(t.sharding) && t.sharding == 'collective' && (!has(t.dtype) || t.dtype == 'float32') && "
    "(!has(t.vocabulary) || !has(t.vocabulary.kind) || t.vocabulary.kind == 'fixed') && "
    "(!has(t.nonFiniteGrads) || t.nonFiniteGrads == 'refuse'))"
)


def _kge_ok(s: GraphTrainingSpec) -> bool:
    mine = {getattr(s.model, "entity_embedding", None), getattr(s.model, "relation_embedding", None)}
    return s.model.kind in CAPTURED_KGE and all(_whole(t) for t in s.embeddings if t.name in mine)


_CEL_KGE = (
    f"(self.model.kind in {cel_strings(CAPTURED_KGE)} && self.embeddings.all(t, "
    "!((has(self.model.entityEmbedding) && t.name == self.model.entityEmbedding) || "
    "(has(self.model.relationEmbedding) && t.name == self.model.relationEmbedding)) || "
    f"{_CEL_WHOLE}))"
)


def _sage_ok(s: GraphTrainingSpec) -> bool:
    m, task = s.model, s.task
    if m.kind != CAPTURED_GNN or (task is not None and task.kind != "nodeClassification"):
        return False
    if m.feature_bag is not None or getattr(m, "edge_weight", False):
        return False
    if str(s.trainers.device) == "cuda" and str(s.training.dense_optimizer) == "adagrad":
        return False  # torch's Adagrad counts its steps on the host
    return all(
        _whole(t) and t.duplicate_grads == DuplicateRule.sum and t.node_types is None
        for t in s.embeddings
        if t.name == m.node_embedding
    )


_CEL_SAGE = (
    f"(self.model.kind == '{CAPTURED_GNN}' && (!has(self.task) || self.task.kind == 'nodeClassification') && "
    "!has(self.model.featureBag) && (!has(self.model.edgeWeight) || !self.model.edgeWeight) && "
    "!(has(self.trainers.device) && self.trainers.device == 'cuda' && has(self.training.denseOptimizer) && "
    "self.training.denseOptimizer == 'adagrad') && "
    "self.embeddings.all(t, !has(self.model.nodeEmbedding) || t.name != self.model.nodeEmbedding || "
    f"({_CEL_WHOLE} && (!has(t.duplicateGrads) || t.duplicateGrads == 'sum') && !has(t.nodeTypes))))"
)


def capturable(s: GraphTrainingSpec) -> bool:
    """Whether training.cudaGraph, if set, names a step that can be captured: one trainer, and a KGE
    model (not RotatE) or GraphSAGE node classification (no feature bag or edge weights; on a GPU not
    the adagrad dense optimizer) whose tables it holds whole (collective,
    float32, a fixed vocabulary, nonFiniteGrads refuse; a node embedding also summing duplicate
    gradients over every node)."""
    if not s.training.cuda_graph:
        return True
    return s.trainers.replicas == 1 and (_kge_ok(s) or _sage_ok(s))


CAPTURED_RULES = (
    Rule(
        "cuda-graph",
        "training.cudaGraph",
        capturable,
        cel="!has(self.training.cudaGraph) || !self.training.cudaGraph || "
        f"(self.trainers.replicas == 1 && ({_CEL_KGE} || {_CEL_SAGE}))",
        message="captures a KGE step (transe, distmult, complex) or a GraphSAGE node-classification step "
        "(no model.featureBag or model.edgeWeight; on trainers.device cuda not "
        "training.denseOptimizer adagrad) on one trainer "
        "(trainers.replicas: 1) holding its tables whole: sharding collective, dtype float32, a fixed "
        "vocabulary, nonFiniteGrads refuse; a node embedding also duplicateGrads sum and no nodeTypes",
    ),
)
