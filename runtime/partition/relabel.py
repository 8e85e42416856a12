"""ID relabeling so that each partition owns one contiguous range of node and edge ids (pure).

New node ids are sorted by part, keeping the original order inside a part; the partition book is then
just the num_parts+1 boundaries. Each edge belongs to the partition of its destination (a partition
stores the in-edges of its nodes, which is what neighbour sampling reads); new edge ids are sorted by
new destination, then by original position, so every partition's edges form an in-CSR and a range.

A typed graph's nodes are sorted by (part, node type) first, as DGL's partition_graph keeps them: each
type's nodes form one range inside each part (`type_bounds`), so (type, type id) maps to a part by two
range lookups. Its edges are sorted by (new destination, edge type), so a node's in-edges of one
relation are one run of its in-CSR row, which per-relation sampling reads without a scan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from graphtrain.runtime.data.graph import Graph


@dataclass(frozen=True)
class Relabeling:
    node_map: np.ndarray  # new -> original node id
    node_map_inverse: np.ndarray  # original -> new node id
    node_bounds: np.ndarray  # (num_parts + 1,)
    edge_map: np.ndarray  # new -> original edge id (position in the graph's CSR)
    edge_bounds: np.ndarray  # (num_parts + 1,)
    src: np.ndarray  # new source id of every new edge
    dst: np.ndarray  # new destination id of every new edge
    # typed graphs: (num_parts, num_types + 1) new ids where each type's range starts in each part
    type_bounds: np.ndarray | None = None


def nodes(
    parts: np.ndarray, num_parts: int, ntype: np.ndarray | None = None, num_types: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node_map, node_map_inverse, node_bounds): new ids sorted by part (then by node type, when
    given), original order inside each."""
    # Small integer keys: numpy's stable sort is a radix sort for 16-bit ints.
    if ntype is not None:
        keys = parts.astype(np.int64) * num_types + ntype
        keys = keys.astype(np.int16 if num_parts * num_types < 2**15 else np.int64)
    else:
        keys = parts.astype(np.int16 if num_parts < 2**15 else np.int32)
    node_map = np.argsort(keys, kind="stable").astype(np.int64)
    inverse = np.empty_like(node_map)
    inverse[node_map] = np.arange(len(parts), dtype=np.int64)
    node_bounds = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(parts, minlength=num_parts), out=node_bounds[1:])
    return node_map, inverse, node_bounds


def type_bounds_of(
    parts: np.ndarray, ntype: np.ndarray, num_parts: int, num_types: int, node_bounds: np.ndarray
) -> np.ndarray:
    """(num_parts, num_types + 1): the new id where each node type's range starts in each part, and the
    part's end (new ids sorted by (part, node type), as nodes() sorts them with `ntype`)."""
    counts = np.zeros((num_parts, num_types), dtype=np.int64)
    np.add.at(counts, (parts, ntype), 1)
    return node_bounds[:-1, None] + np.concatenate(
        [np.zeros((num_parts, 1), np.int64), np.cumsum(counts, axis=1)], axis=1
    )


def relabel(graph: Graph, parts: np.ndarray, num_parts: int) -> Relabeling:
    typed = graph.typed and graph.ntype is not None and graph.ntype_names is not None
    num_types = len(graph.ntype_names) if typed and graph.ntype_names is not None else 1
    node_map, inverse, node_bounds = nodes(parts, num_parts, graph.ntype if typed else None, num_types)
    edge_map = _edges_by_destination(graph, node_map)
    src, dst = graph.edges()
    new_dst = inverse[dst[edge_map]]
    if typed and graph.etype is not None:  # each destination's in-edges by edge type, stably
        edge_map = edge_map[np.lexsort((graph.etype[edge_map], new_dst))]
        new_dst = inverse[dst[edge_map]]
    new_src = inverse[src[edge_map]]
    edge_bounds = np.searchsorted(new_dst, node_bounds, side="left").astype(np.int64)
    type_bounds = None
    if typed:
        assert graph.ntype is not None
        type_bounds = type_bounds_of(parts, graph.ntype, num_parts, num_types, node_bounds)
    return Relabeling(node_map, inverse, node_bounds, edge_map, edge_bounds, new_src, new_dst, type_bounds)


def _edges_by_destination(graph: Graph, order: np.ndarray) -> np.ndarray:
    """Edge ids grouped by destination, destinations in `order`, ascending edge id inside a group.

    A counting sort: scipy's CSR->CSC conversion (C, O(m)) lists each column's entries in row order,
    and edge ids follow the CSR's row-major order, so each column holds its edges' ids ascending. That is
    5x faster than a stable argsort of the 3.6M destination ids of gene–PubMed.
    """
    n, m = graph.num_nodes, graph.num_edges
    ids = np.arange(1, m + 1, dtype=np.int64)  # +1: no explicit zeros for scipy to drop
    csc = sp.csr_matrix((ids, graph.indices, graph.indptr), shape=(n, n)).tocsc()
    counts = np.diff(csc.indptr)[order]
    starts = csc.indptr[:-1][order]
    offsets = np.cumsum(counts) - counts
    gather = np.repeat(starts - offsets, counts) + np.arange(m, dtype=np.int64)
    return csc.data[gather] - 1


def local_in_csr(rl: Relabeling, part: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr over the part's nodes, global new source ids) of partition `part`'s in-edges."""
    lo, hi = rl.node_bounds[part], rl.node_bounds[part + 1]
    elo, ehi = rl.edge_bounds[part], rl.edge_bounds[part + 1]
    dst = rl.dst[elo:ehi] - lo
    indptr = np.zeros(hi - lo + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=hi - lo), out=indptr[1:])
    return indptr, rl.src[elo:ehi]


def owner_of(node_bounds: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Partition owning each (new) node id: a range lookup in the partition book."""
    return np.searchsorted(node_bounds, ids, side="right") - 1
