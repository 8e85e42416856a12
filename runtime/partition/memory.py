"""Peak-memory estimate of partitioning, checked before any work starts.

The estimate counts the arrays the pipeline holds at its peak (edge lists, the symmetric adjacency
and its leaf-contracted core, METIS' copy and workspace, the relabeled edges) plus two copies of the
features (the source and the slice being written). Calibrated against peak RSS on this project's
datasets (bench/partition.py prints both); it errs high rather than low.
"""

from __future__ import annotations

import psutil

from graphtrain.runtime.data.graph import Graph, human

__all__ = [
    "available_bytes",
    "estimate",
    "estimate_bytes",
    "feature_bytes",
    "human",
    "metis_need",
    "streaming_need",
]

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


# Beyond the estimate above: the graph loaded for METIS (src, dst and the stable sort's order while the
# CSR is built, then the CSR itself) and its node arrays.
_LOAD_PER_EDGE = 8 * 4
_LOAD_PER_NODE = 8 * 3
# Streaming (Fennel): per node the parts, degrees, edge-id counters, node maps and weights; per edge of
# a chunk its arrays and the chunk adjacency; per edge of the largest part (taken as 2x the mean) the
# arrays that sort it into its in-CSR.
_STREAM_PER_NODE = 8 * 12
_STREAM_PER_CHUNK_EDGE = 8 * 24
_STREAM_PER_PART_EDGE = 8 * 12
# The refinement after the stream (refine.py): per node and part its counts and one round's gains (int32
# each), per node the best parts kept, the round's new parts, targets, gains and candidates.
_STREAM_PER_NODE_PART = 4 * 2
_STREAM_REFINE_PER_NODE = 8 * 5


def metis_need(num_nodes: int, num_edges: int, feat_bytes: int = 0) -> int:
    """Estimated peak bytes of the METIS path as a whole: loading the graph, then partitioning it."""
    load = _LOAD_PER_EDGE * num_edges + _LOAD_PER_NODE * num_nodes + feat_bytes
    return load + estimate(num_nodes, num_edges, feat_bytes)


def streaming_need(num_nodes: int, num_edges: int, num_parts: int, chunk: int, feat_bytes: int = 0) -> int:
    """Estimated peak bytes of the streaming path: O(nodes x parts) state, one chunk, one part's edges."""
    part_edges = 2 * num_edges // max(num_parts, 1)
    return (
        (_STREAM_PER_NODE + _STREAM_REFINE_PER_NODE + _STREAM_PER_NODE_PART * max(num_parts, 1)) * num_nodes
        + _STREAM_PER_CHUNK_EDGE * min(chunk, num_edges)
        + _STREAM_PER_PART_EDGE * part_edges
        + 2 * feat_bytes
    )
