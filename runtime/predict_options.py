"""What `graphtrain predict` answers for a spec's task, and the options each task reads: decided from the
spec alone, before a checkpoint is read, so a wrong option is refused without importing torch (predict.py
answers, with torch)."""

from __future__ import annotations

from graphtrain.contract.spec import EDGE_TASKS, KGE, LINK_PREDICTION, GraphTraining


def served_task(gt: GraphTraining) -> str:
    """How `gt`'s checkpoints answer: "nodes" (nodeClassification: per node), "pairs" (kge and
    linkPrediction: the top-k of a (head, relation, ?) query) or "edges" (edgeClassification and
    edgeRegression: every edge of the labelled edge types)."""
    kind = gt.spec.task_kind
    if kind in EDGE_TASKS:
        return "edges"
    return "pairs" if kind in (KGE, LINK_PREDICTION) else "nodes"


# the options of `graphtrain predict` each served task reads (the others are refused, not ignored)
OPTIONS_OF: dict[str, set[str]] = {
    "nodes": {"--nodes", "--embeddings"},
    "pairs": {"--head", "--relation", "--tail", "-k"},
    "edges": set(),
}


def foreign_options(gt: GraphTraining, given: dict[str, bool]) -> str | None:
    """A line naming the given options (`given`: option -> set) that `gt`'s task does not read, or None:
    an option read by no one would answer another question than the one asked, without a word."""
    served = served_task(gt)
    extra = sorted(o for o, on in given.items() if on and o not in OPTIONS_OF[served])
    if not extra:
        return None
    reads = ", ".join(sorted(OPTIONS_OF[served])) or "none of them"
    return f"task {gt.spec.task_kind} does not read {', '.join(extra)} (it reads {reads})"
