"""Per-type views of a typed DistGraph's node and edge data, as DGL's DistGraph has them:
`g.nodes["user"].data["feat"][ids]` and `g.edges[("item", "rated", "user")].data["efeat"][ids]` read
by type-local ids (0..count of the type - 1, typed_ids.py's numbering) the same rows the flat
`g.ndata[key][global ids]` and `g.edata[key][global ids]` read: a view maps the ids and reads the flat
tensor, so nothing is stored twice and the shard servers know nothing of it.

Why beside the flat dicts and not instead of them: `ndata`/`edata` keyed by data name are what every
trainer, the loaders and predict read (one array over all nodes, each type a block of rows), and the
key spaces of the two forms would clash (`ndata["user"]` against `ndata["feat"]`); DGL keeps the same
two spellings for the same reason. A view's rows are the flat tensor's whole rows: a typed graph's
node features hold each type's columns in a block of their own (DistGraph.feature_blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cached_property

import numpy as np
import torch

from graphtrain.runtime.partition import typed_ids
from graphtrain.runtime.tensor import DistTensor

IdMap = Callable[[np.ndarray], np.ndarray]


class TypedTensor:
    """One data tensor read by a type's local ids: `view[local ids]` is `flat[global ids]`."""

    def __init__(self, flat: DistTensor, count: int, to_global: IdMap):
        self.flat, self.count, self._to_global = flat, count, to_global

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.count, *self.flat.shape[1:])

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, ids: np.ndarray | torch.Tensor | slice) -> torch.Tensor:
        if isinstance(ids, slice):
            ids = np.arange(self.count)[ids]
        local = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        return self.flat[self._to_global(local.astype(np.int64))]


class TypedData(Mapping[str, TypedTensor]):
    """The data of one node or edge type by key: a TypedTensor per flat tensor."""

    def __init__(self, flat: Mapping[str, DistTensor], count: int, to_global: IdMap):
        self._flat, self._count, self._to_global = flat, count, to_global

    def __getitem__(self, key: str) -> TypedTensor:
        return TypedTensor(self._flat[key], self._count, self._to_global)

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat)

    def __len__(self) -> int:
        return len(self._flat)


class TypeView:
    """A node or edge type: its count, its ids mapped to stored ids (`to_global`) and its `data`."""

    def __init__(self, name: str | tuple[str, str, str], count: int, to_global: IdMap, data: TypedData):
        self.name, self.count, self.to_global, self.data = name, count, to_global, data

    def __len__(self) -> int:
        return self.count


class NodeTypeViews:
    """`g.nodes[ntype]`: a node type by name."""

    def __init__(self, names: list[str], type_bounds: np.ndarray, ndata: Mapping[str, DistTensor]):
        self.names, self.type_bounds, self.ndata = names, type_bounds, ndata
        self.counts = typed_ids.type_counts(type_bounds) if names else np.zeros(0, dtype=np.int64)

    def __getitem__(self, name: str) -> TypeView:
        if name not in self.names:
            raise KeyError(f"no node type {name!r} (node types: {', '.join(self.names) or 'none'})")
        t = self.names.index(name)

        def to_global(local: np.ndarray) -> np.ndarray:
            return typed_ids.nodes_to_global(self.type_bounds, t, local)

        count = int(self.counts[t])
        return TypeView(name, count, to_global, TypedData(self.ndata, count, to_global))


class EdgeTypeViews:
    """`g.edges[etype]`: an edge type by its canonical (source, relation, destination) triple, or by its
    relation where one edge type has it. A type's ids are read from the partition's etype files once,
    on first use (one int64 per edge of the type)."""

    def __init__(
        self,
        canonical: list[tuple[str, str, str]],
        etypes: Callable[[], list[np.ndarray]],
        edge_bounds: np.ndarray,
        edata: Mapping[str, DistTensor],
    ):
        self.canonical, self._etypes, self.edge_bounds, self.edata = canonical, etypes, edge_bounds, edata
        self._ids: dict[int, np.ndarray] = {}

    @cached_property
    def _parts(self) -> list[np.ndarray]:
        return self._etypes()

    def index(self, etype: str | tuple[str, str, str]) -> int:
        """The edge type id of `etype`.

        Raises:
            KeyError: no such edge type, or a relation that several edge types have."""
        if isinstance(etype, str):
            found = [i for i, c in enumerate(self.canonical) if c[1] == etype]
            if len(found) != 1:
                why = "no edge type has relation" if not found else "several edge types have relation"
                raise KeyError(f"{why} {etype!r}: name it (source, relation, destination)")
            return found[0]
        key = tuple(etype)
        if key not in self.canonical:
            raise KeyError(f"no edge type {key!r}")
        return self.canonical.index(key)  # type: ignore[arg-type]

    def ids(self, r: int) -> np.ndarray:
        """The global ids of edge type r's edges, by type-local id."""
        if r not in self._ids:
            self._ids[r] = typed_ids.edge_ids_of_type(self._parts, self.edge_bounds, r)
        return self._ids[r]

    def __getitem__(self, etype: str | tuple[str, str, str]) -> TypeView:
        r = self.index(etype)
        ids = self.ids(r)

        def to_global(local: np.ndarray) -> np.ndarray:
            if local.size and (local.min() < 0 or local.max() >= len(ids)):
                raise IndexError(f"edge type {self.canonical[r]}: an id is outside [0, {len(ids)})")
            return ids[local]

        return TypeView(self.canonical[r], len(ids), to_global, TypedData(self.edata, len(ids), to_global))
