"""Peak-memory estimate of partitioning, checked before any work starts.

The estimate counts the arrays the pipeline holds at its peak (edge lists, the symmetric adjacency
and its leaf-contracted core, METIS' copy and workspace, the relabeled edges) plus two copies of the
features (the source and the slice being written). Calibrated against peak RSS on this project's
datasets (bench/partition.py prints both); it errs high rather than low.
"""

from __future__ import annotations

import psutil

from graphtrain.runtime.data.graph import Graph, human

__all__ = ["available_bytes", "estimate", "estimate_bytes", "feature_bytes", "human"]

_PER_EDGE = 8 * 14  # src/dst/new ids/edge map + 2x symmetric CSR + METIS adjacency and workspace
_PER_NODE = 8 * 24  # maps, parts, weights, METIS vertex arrays and workspace


def feature_bytes(graph: Graph) -> int:
    feat = graph.feat
    if feat is None:
        return 0
    if hasattr(feat, "nnz"):
        return int(feat.data.nbytes + feat.indices.nbytes + feat.indptr.nbytes)
    return int(feat.nbytes)


def estimate(num_nodes: int, num_edges: int, feat_bytes: int = 0) -> int:
    """Estimated peak bytes of partitioning a graph of this size (beyond the graph already in memory)."""
    return _PER_EDGE * num_edges + _PER_NODE * num_nodes + 2 * feat_bytes


def estimate_bytes(graph: Graph) -> int:
    """Estimated peak bytes of partitioning `graph` (beyond the graph already in memory)."""
    return estimate(graph.num_nodes, graph.num_edges, feature_bytes(graph))


def available_bytes() -> int:
    return int(psutil.virtual_memory().available)
