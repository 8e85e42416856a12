"""What a run checks in its graph once loaded, before anything is partitioned or started.

A spec can be valid and still not fit its data (a GraphSAGE run on a graph without labels, a feature
projection with no features): those are problems naming the spec field, raised before any work, by
`graphtrain validate` and by every executor's partition step alike. What is legal but probably not meant
(a one-direction edge list given to GraphSAGE, which then sees only in-neighbours) is a DataWarning.
"""

from __future__ import annotations

import warnings

import numpy as np

from graphtrain.runtime import spec as S
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import DataWarning

DIRECTED_WARN = 0.5  # share of edges without their reverse above which an input is called directed


def graph_name(source: S.GraphSource) -> str:
    """How a source is named in messages: the dataset, the file, or the triples file."""
    if source.dataset is not None:
        return str(source.dataset)
    if source.triples is not None:
        return source.triples.path
    return str(source.path)


def directedness(graph: Graph) -> float:
    """Share of the non-loop edges (u, v) whose reverse (v, u) is not in the graph: 0 for an undirected
    graph stored both ways, 1 for a one-direction edge list."""
    src, dst = graph.edges()
    keep = src != dst
    if not keep.any():
        return 0.0
    n = np.int64(graph.num_nodes)
    forward = np.sort(src[keep] * n + dst[keep])
    backward = dst[keep] * n + src[keep]
    at = np.minimum(np.searchsorted(forward, backward), len(forward) - 1)
    return float(1.0 - (forward[at] == backward).mean())


def check_data(gt: S.GraphTraining, graph: Graph) -> None:
    """Warn about what is probably not meant. (Stream A's requirements check joins here.)"""
    spec = gt.spec
    if spec.model.kind == S.ModelKind.graphsage and not spec.graph.reverse_edges:
        share = directedness(graph)
        if share > DIRECTED_WARN:
            warnings.warn(
                f"{graph_name(spec.graph)}: {100 * share:.0f} % of its edges have no reverse edge and "
                "graph.reverseEdges is false, so GraphSAGE sees each node's in-neighbours only; set "
                "graph.reverseEdges: true if the graph is undirected",
                DataWarning,
                stacklevel=2,
            )
