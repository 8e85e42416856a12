"""Type-local ids of a typed partition and the stored ids they stand for (pure).

A typed graph is stored as one homogeneous graph (partition/relabel.py): nodes sorted by (part, node
type), so each type is one range of new ids in each part (`type_bounds`, parts x (types + 1)), and
edges sorted by (destination, edge type), so an edge type is not a range anywhere. DGL's DistGraph
numbers each type's nodes and edges from 0 (`g.nodes[ntype]`, `g.edges[etype]`); the same numbering
here, in stored order:

- node type t's type-local id i is the i-th node of type t counting part 0's range of t, then
  part 1's, ...: two range lookups each way, no array (`node_offsets`, `nodes_to_global`,
  `global_to_nodes`);
- edge type r's type-local id j is the j-th edge of type r in global edge id order: an array of its
  global ids (`edge_ids_of_type`, one int64 per edge of the type), since its edges are interleaved
  with the other types' in every in-CSR row.

A learnable table over some node types (spec.embeddings[].nodeTypes) has one row per node of those
types, ordered by (part, type id, position), so each shard server holds its own nodes' rows as a node
embedding does (`rows_bounds`, `rows_of`; `NodeRows` for a spec's table). For one type, a node's row
is its type-local id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphtrain.runtime.errors import GraphtrainError


def node_offsets(type_bounds: np.ndarray) -> np.ndarray:
    """(types, parts + 1): offsets[t, p] is the type-local id of type t's first node in part p."""
    counts = np.diff(np.asarray(type_bounds, dtype=np.int64), axis=1)  # (parts, types)
    out = np.zeros((counts.shape[1], counts.shape[0] + 1), dtype=np.int64)
    np.cumsum(counts.T, axis=1, out=out[:, 1:])
    return out


def type_counts(type_bounds: np.ndarray) -> np.ndarray:
    """The node count of each type over all parts."""
    return node_offsets(type_bounds)[:, -1]


def nodes_to_global(type_bounds: np.ndarray, ntype: int, local: np.ndarray) -> np.ndarray:
    """The stored (new, global) ids of type `ntype`'s type-local ids `local`.

    Raises:
        IndexError: an id outside [0, the type's count).
    """
    bounds = np.asarray(type_bounds, dtype=np.int64)
    offsets = node_offsets(bounds)[ntype]
    local = np.asarray(local, dtype=np.int64)
    _check(local, int(offsets[-1]), "node", ntype)
    part = np.searchsorted(offsets, local, side="right") - 1
    return bounds[part, ntype] + (local - offsets[part])


def global_to_nodes(
    type_bounds: np.ndarray, node_bounds: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(type, type-local id) of each stored node id: nodes_to_global's inverse."""
    bounds = np.asarray(type_bounds, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    part = np.searchsorted(np.asarray(node_bounds, dtype=np.int64), ids, side="right") - 1
    ntype = (ids[:, None] >= bounds[part, 1:-1]).sum(axis=1).astype(np.int64)
    offsets = node_offsets(bounds)
    return ntype, offsets[ntype, part] + (ids - bounds[part, ntype])


def edge_ids_of_type(etypes: Sequence[np.ndarray], edge_bounds: np.ndarray, etype: int) -> np.ndarray:
    """The global ids of edge type `etype`'s edges, ascending: entry j is its type-local edge j.
    `etypes[p]`: part p's edge type per in-edge (its in-CSR order, global ids edge_bounds[p] + i)."""
    pieces = [int(edge_bounds[p]) + np.flatnonzero(np.asarray(e) == etype) for p, e in enumerate(etypes)]
    return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)


def rows_bounds(type_bounds: np.ndarray, ntypes: Sequence[int]) -> np.ndarray:
    """(parts + 1,): the partition book of a table over node types `ntypes`: part p's nodes of those
    types hold rows [bounds[p], bounds[p + 1])."""
    counts = np.diff(np.asarray(type_bounds, dtype=np.int64), axis=1)[:, sorted(set(ntypes))]
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts.sum(axis=1), out=out[1:])
    return out


def rows_of(
    type_bounds: np.ndarray, node_bounds: np.ndarray, ntypes: Sequence[int], ids: np.ndarray
) -> np.ndarray:
    """The row of each stored node id in a table over node types `ntypes`, -1 for a node of another
    type: rows in (part, type id, position) order, as rows_bounds splits them."""
    bounds = np.asarray(type_bounds, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    chosen = np.zeros(bounds.shape[1] - 1, dtype=bool)
    chosen[list(ntypes)] = True
    counts = np.diff(bounds, axis=1) * chosen  # (parts, types): rows each (part, type) holds
    # row of (part, type)'s first node: the rows of earlier parts, then of earlier chosen types
    first = rows_bounds(bounds, ntypes)[:-1, None] + np.cumsum(counts, axis=1) - counts
    part = np.searchsorted(np.asarray(node_bounds, dtype=np.int64), ids, side="right") - 1
    ntype = (ids[:, None] >= bounds[part, 1:-1]).sum(axis=1)
    rows = first[part, ntype] + (ids - bounds[part, ntype])
    return np.where(chosen[ntype], rows, -1).astype(np.int64)


def _check(local: np.ndarray, count: int, what: str, index: int) -> None:
    if local.size and (local.min() < 0 or local.max() >= count):
        bad = int(local[(local < 0) | (local >= count)][0])
        raise IndexError(f"{what} type {index}: id {bad} is outside [0, {count})")


@dataclass(frozen=True)
class NodeRows:
    """Which row of a node table each stored node id reads: its own id (a table over every node), or
    rows_of's row over node types `types` (-1: a node of another type, which has none)."""

    node_bounds: np.ndarray
    type_bounds: np.ndarray | None = None
    types: tuple[int, ...] | None = None

    @classmethod
    def of(cls, data: Mapping[str, Any], table: str, node_types: Sequence[str] | None) -> NodeRows:
        """The rows of table `table` over the node types `node_types` (None: every node) of the partition
        whose config entries are `data`.

        Raises:
            GraphtrainError: types on an untyped partition, a type it lacks, or no node of the types.
        """
        node_bounds = np.asarray(data["node_bounds"], dtype=np.int64)
        if node_types is None:
            return cls(node_bounds)
        field = f"embeddings[{table}].nodeTypes"
        names = list(data.get("ntype_names") or [])
        if not names or "type_bounds" not in data:
            raise GraphtrainError(f"{field}: the partition has no node types (graph.typed, graph.nodes)")
        missing = [t for t in node_types if t not in names]
        if missing:
            raise GraphtrainError(f"{field}: no node type {missing[0]!r} (node types: {', '.join(names)})")
        rows = cls(
            node_bounds, np.asarray(data["type_bounds"], dtype=np.int64), tuple(map(names.index, node_types))
        )
        if rows.num_rows == 0:
            raise GraphtrainError(f"{field}: the graph has no node of type {', '.join(node_types)}")
        return rows

    @property
    def bounds(self) -> np.ndarray:
        """The table's partition book: shard p holds the rows of partition p's nodes."""
        if self.types is None or self.type_bounds is None:
            return self.node_bounds
        return rows_bounds(self.type_bounds, self.types)

    @property
    def num_rows(self) -> int:
        return int(self.bounds[-1])

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The row of each stored node id, -1 where it has none."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.types is None or self.type_bounds is None:
            return ids
        return rows_of(self.type_bounds, self.node_bounds, self.types, ids)
