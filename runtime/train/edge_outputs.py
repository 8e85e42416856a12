"""An edge task's predictions for every edge of its labelled edge types (GraphStorm's edge-prediction
output), which `graphtrain infer` writes beside the node outputs and `graphtrain predict` writes for
an edge checkpoint: the same classifier on the same layer-wise embeddings as the task's evaluation, so
a test split's accuracy computed from them is the evaluation's.

Each trainer predicts the in-edges of its share of the nodes (layerwise.node_share), so the shares
cover every edge once. An edge is named by its ends' original ids (and types and relation on a typed
graph); a labelled one also carries its split and label, the others are the ones a user wants
predicted. On an untyped graph with graph.reverseEdges every edge is there in both directions (the
reverse keeps the edge's type); on a typed one a reverse has its own type, which is not labelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphtrain.runtime import arrays
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.partition.format import load_maps, load_names

CHUNK = 4096  # destination nodes whose in-edges one request lists
SPLITS = ("train", "valid", "test")


def in_edges(graph: DistGraph, lo: int, hi: int, types: np.ndarray) -> np.ndarray:
    """Every in-edge of nodes [lo, hi) whose type is one of `types`, as (n, 3) rows (source, edge
    type, destination) in the partition's node ids, grouped by destination."""
    rows = [np.empty((0, 3), np.int64)]
    for start in range(lo, hi, CHUNK):
        frontier = np.arange(start, min(start + CHUNK, hi), dtype=np.int64)
        if graph.typed:
            got = graph.sample_edges(frontier, -1)
            src, counts, etype = got.src, got.counts, got.etype
        else:
            src, counts = graph.sample_neighbors(frontier, -1)
            etype = np.zeros(len(src), np.int64)
        dst = np.repeat(frontier, counts)
        keep = np.isin(etype, types)
        rows.append(np.stack([src[keep], etype[keep], dst[keep]], 1).astype(np.int64))
    return np.concatenate(rows)


def occurrence(keys: np.ndarray) -> np.ndarray:
    """Each key's count of equal keys before it (0 for a first): which copy of a repeated edge it is
    (pure)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    at = np.arange(len(keys))
    first = np.ones(len(keys), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    out = np.empty(len(keys), np.int64)
    out[order] = at - np.maximum.accumulate(np.where(first, at, 0))
    return out


def label_rows(
    edges: np.ndarray, labelled: dict[str, np.ndarray], num_nodes: int, num_types: int
) -> tuple[np.ndarray, np.ndarray]:
    """(split, row) of each of `edges` (source, type, destination): the index in SPLITS of the split
    whose labelled rows hold it and its row there, or -1 and -1 (pure). An edge the graph holds k times
    (a customer who bought a product twice) matches its labelled copies one each, in SPLITS order, so
    every labelled row is matched once and a split's counts are the evaluation's."""

    def key(a: np.ndarray) -> np.ndarray:
        return (a[:, 0] * num_types + a[:, 1]) * num_nodes + a[:, 2]

    rows = [labelled.get(name, np.empty((0, 4), np.int64)) for name in SPLITS]
    have = np.concatenate([key(r) for r in rows]) if rows else np.empty(0, np.int64)
    which = np.concatenate([np.full(len(r), s, np.int64) for s, r in enumerate(rows)])
    index = np.concatenate([np.arange(len(r), dtype=np.int64) for r in rows])
    order = np.lexsort((occurrence(have), have))  # by key, copies in SPLITS order
    have = have[order]
    split = np.full(len(edges), -1, np.int64)
    row = np.full(len(edges), -1, np.int64)
    if not len(have) or not len(edges):
        return split, row
    want = key(edges)
    pos = np.searchsorted(have, want) + occurrence(want)  # this copy's labelled row, if there is one
    hit = pos < len(have)
    hit[hit] = have[pos[hit]] == want[hit]
    split[hit], row[hit] = which[order[pos[hit]]], index[order[pos[hit]]]
    return split, row


def label_types(spec: Any, labelled: dict[str, np.ndarray]) -> np.ndarray:
    """The edge types whose edges are predicted: each that has a labelled edge, and each the spec gives a
    label column (graph.edges[e].label: edge type e of a graph from your files), even one whose cells
    are all empty, whose edges are then all to be predicted (pure)."""
    declared = [e for e, edge in enumerate(getattr(spec.graph, "edges", None) or []) if edge.label]
    seen = [r[:, 1] for r in labelled.values()]
    return arrays.unique(np.concatenate([*seen, np.asarray(declared, np.int64)]).astype(np.int64))


def edge_columns(task: Any, layers: Any) -> dict[str, np.ndarray]:
    """The output columns of the labelled edge types' edges into this trainer's nodes: source,
    destination (and source_type, relation, destination_type on a typed graph), predicted (a class
    name or index; edgeRegression: the number), p_<class> per class, split ('' when unlabelled) and
    label (null when unlabelled)."""
    graph: DistGraph = task.graph
    types = label_types(task.spec, task.edges)
    edges = in_edges(graph, layers.lo, layers.hi, types)
    out = task.scores(layers, edges).numpy()
    names = load_names(graph.config, verify=False)
    orig = load_maps(graph.config, verify=False)["node_map"]
    ids = names.get("node_ids")

    def named(new: np.ndarray) -> np.ndarray:
        return ids[orig[new]] if ids is not None else orig[new]

    cols: dict[str, np.ndarray] = {"source": named(edges[:, 0])}
    if graph.typed:
        cets = graph.canonical_etypes
        ntypes = np.asarray(graph.ntype_names, dtype=object)
        cols["source_type"] = ntypes[graph.node_types(edges[:, 0])].astype(str)
        cols["relation"] = np.asarray([c[1] for c in cets], dtype=object)[edges[:, 1]].astype(str)
        cols["destination_type"] = ntypes[graph.node_types(edges[:, 2])].astype(str)
    cols["destination"] = named(edges[:, 2])
    split, row = label_rows(edges, task.edges, graph.num_nodes, max(1, len(graph.canonical_etypes)))
    labelled = split >= 0
    if task.regression:
        cols["predicted"] = out[:, 0]
        label = np.full(len(edges), None, dtype=object)  # null where unlabelled, as for classes
        for s, name in enumerate(SPLITS):
            at = split == s
            if at.any():
                label[at] = task.values[name].numpy()[task.edges[name][row[at], 3]].astype(np.float64)
    else:
        classes = task.class_names if task.class_names is not None else np.arange(out.shape[1])
        cols["predicted"] = classes[out.argmax(1)] if len(out) else classes[:0]
        cols.update({f"p_{c}": out[:, j] for j, c in enumerate(classes.tolist())})
        index = np.full(len(edges), -1, np.int64)
        for s, name in enumerate(SPLITS):
            at = split == s
            index[at] = task.edges[name][row[at], 3]
        label = np.where(labelled, classes[index.clip(min=0)].astype(object), None)
    cols["split"] = np.asarray([""] + list(SPLITS), dtype=object)[split + 1].astype(str)
    cols["label"] = label
    return cols
