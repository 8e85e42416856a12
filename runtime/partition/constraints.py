"""Balance constraints as METIS vertex weights (pure).

Each constraint is one column of an int64 weight matrix: `nodes` is 1 per node, `degree` is the
node's in-degree, i.e. the edges its partition stores (a partition holds the in-edges of the nodes it
owns), so balancing degree balances stored edges; `train`/`val`/`test` are the split masks.
Constraints the graph has no data for (no masks) or whose total is zero are skipped and reported.

On a typed graph, `nodes` and the split masks are balanced per node type, as DGL's partition_graph
balances "the number of nodes for each node type": one column per type (`nodes:paper`, `train:paper`,
...), so every partition holds its share of each type and of each type's training nodes. A type without
nodes, or without nodes in a split, is skipped (and reported) like any empty constraint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphtrain.runtime.data.graph import Graph


@dataclass(frozen=True)
class Constraints:
    names: list[str]
    weights: np.ndarray  # (num_nodes, len(names)) int64, C-contiguous
    skipped: dict[str, str]  # constraint -> why it was skipped


def in_degree(graph: Graph) -> np.ndarray:
    return np.bincount(graph.indices, minlength=graph.num_nodes).astype(np.int64)


def build(graph: Graph, balance: list[str], degree: np.ndarray | None = None) -> Constraints:
    """Weight columns for the requested constraints, in the requested order, duplicates removed.
    `degree`: the in-degree of every node when the graph's edges are not in memory (streaming)."""
    names: list[str] = []
    cols: list[np.ndarray] = []
    skipped: dict[str, str] = {}
    for name in dict.fromkeys(balance):
        if name == "nodes":
            col = np.ones(graph.num_nodes, dtype=np.int64)
        elif name == "degree":
            col = in_degree(graph) if degree is None else degree.astype(np.int64)
        elif name in ("train", "val", "test"):
            mask = graph.masks.get(name)
            if mask is None:
                skipped[name] = "the graph has no split masks"
                continue
            col = mask.astype(np.int64)
        else:
            raise ValueError(f"unknown balance constraint {name!r}")
        per_type = name != "degree" and graph.ntype is not None and graph.ntype_names is not None
        for label, column in _per_type(graph, name, col) if per_type else [(name, col)]:
            if column.sum() == 0:
                skipped[label] = "its total weight is zero"
                continue
            names.append(label)
            cols.append(column)
    if not cols:
        names, cols = ["nodes"], [np.ones(graph.num_nodes, dtype=np.int64)]
    return Constraints(names, np.ascontiguousarray(np.stack(cols, axis=1)), skipped)


def _per_type(graph: Graph, name: str, col: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """`col` split into one column per node type, named `<name>:<type>`."""
    assert graph.ntype is not None and graph.ntype_names is not None
    return [
        (f"{name}:{t}", np.where(graph.ntype == i, col, 0).astype(np.int64))
        for i, t in enumerate(graph.ntype_names.tolist())
    ]


def balance_of(weights: np.ndarray, parts: np.ndarray, num_parts: int) -> np.ndarray:
    """max/mean of each constraint's per-part sums (1.0 = perfect)."""
    out = np.empty(weights.shape[1])
    for c in range(weights.shape[1]):
        sums = np.bincount(parts, weights=weights[:, c], minlength=num_parts)
        out[c] = sums.max() / sums.mean() if sums.mean() > 0 else 1.0
    return out
