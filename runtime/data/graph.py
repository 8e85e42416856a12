"""The in-memory graph types every loader returns and the partitioner consumes.

`Graph` is a directed multigraph in CSR form (int64, rows = source nodes) with optional node features
(dense array or scipy CSR: WordNet's bag-of-words would be 8.5 GB dense), labels, split masks, an edge
type per edge and the external id of each node.

A typed graph (DGL's heterograph, as its distributed training stores one) is the same homogeneous graph
with a node type per node (`ntype`, named by `ntype_names`) and a canonical edge type per edge (`etype`
indexes `canonical_etypes`, rows (source type, relation, destination type)); every edge's endpoints are
of its type's node types. Node data stays one array over all nodes: a type without features has zero
rows, and types whose feature widths differ each own a block of columns (`feature_blocks`), so a model
reads a type's features through weights of its own. Edge features (`efeat`) are one row per edge.

`KnowledgeGraph` is (head, relation, tail) triples with their standard or seeded splits. Both check
their own consistency on construction, so a loader bug or a bad file surfaces as a DataError naming the
field instead of a wrong partition later. A node count whose arrays could never fit in this machine's
memory is refused before anything is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from graphtrain.runtime import memlimits
from graphtrain.runtime.errors import DataError

Features = np.ndarray | sp.csr_matrix
MASKS = ("train", "val", "test")


@dataclass
class Graph:
    """Directed multigraph, CSR by source: out-neighbours of u are indices[indptr[u]:indptr[u+1]]."""

    name: str
    num_nodes: int
    indptr: np.ndarray
    indices: np.ndarray
    feat: Features | None = None
    label: np.ndarray | None = None
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    etype: np.ndarray | None = None
    # external id of each node (file graphs, datasets with ids): int64, or unicode ('<U') for string ids
    node_ids: np.ndarray | None = None
    ntype: np.ndarray | None = None  # node type per node (e.g. gene / paper), small ints
    num_classes: int | None = None
    class_names: np.ndarray | None = None  # unicode, label i is class_names[i] (string labels)
    relation_names: np.ndarray | None = None  # unicode, edge type i is relation_names[i]
    feature_names: np.ndarray | None = None  # unicode, feature column j is feature_names[j] (words)
    # a knowledge graph's splits, (n, 3) int64 (head, relation, tail) in this graph's node ids:
    # "train", "valid", "test" (the edges are the train triples; KGE evaluation needs the others)
    triples: dict[str, np.ndarray] = field(default_factory=dict)
    ntype_names: np.ndarray | None = None  # unicode, node type i is ntype_names[i] (typed graphs)
    # unicode (k, 3): canonical edge type i = (source type, relation, destination type) (typed graphs)
    canonical_etypes: np.ndarray | None = None
    efeat: np.ndarray | None = None  # (num_edges, d) float32 edge features, one row per edge
    # typed graphs: node type -> (first column, width) of its features in feat (absent: no features)
    feature_blocks: dict[str, tuple[int, int]] = field(default_factory=dict)
    # labelled edges (task edgeClassification), split "train"/"valid"/"test": int64 (n, 4) rows
    # (source, edge type, destination, class) in this graph's node ids; every one is also an edge
    edge_targets: dict[str, np.ndarray] = field(default_factory=dict)
    edge_class_names: np.ndarray | None = None  # unicode, edge class i is edge_class_names[i]
    # the labels as numbers (task edgeRegression), float32, aligned with edge_targets' rows (empty: a
    # label is not a number)
    edge_values: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def validate(self) -> None:
        """Raise DataError naming the first inconsistent field."""
        n = self.num_nodes
        if n < 1:
            raise DataError(f"graph {self.name!r}: empty graph (num_nodes={n})")
        if self.indptr.dtype != np.int64 or self.indices.dtype != np.int64:
            raise DataError(f"graph {self.name!r}: indptr/indices must be int64")
        if self.indptr.shape != (n + 1,) or self.indptr[0] != 0 or self.indptr[-1] != self.indices.shape[0]:
            raise DataError(f"graph {self.name!r}: indptr must have num_nodes+1 entries from 0 to num_edges")
        if n and np.any(np.diff(self.indptr) < 0):
            raise DataError(f"graph {self.name!r}: indptr is not non-decreasing")
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= n):
            bad = int(self.indices[(self.indices < 0) | (self.indices >= n)][0])
            raise DataError(f"graph {self.name!r}: edge endpoint {bad} outside [0, {n})")
        if self.feat is not None and self.feat.shape[0] != n:
            raise DataError(
                f"graph {self.name!r}: feat has {self.feat.shape[0]} rows but the graph has {n} nodes"
            )
        if self.label is not None and self.label.shape != (n,):
            raise DataError(f"graph {self.name!r}: label has shape {self.label.shape}, expected ({n},)")
        for key, mask in self.masks.items():
            if key not in MASKS:
                raise DataError(f"graph {self.name!r}: unknown mask {key!r} (expected one of {MASKS})")
            if mask.shape != (n,) or mask.dtype != np.bool_:
                raise DataError(f"graph {self.name!r}: {key} mask must be bool of shape ({n},)")
        if self.etype is not None and self.etype.shape != self.indices.shape:
            raise DataError(
                f"graph {self.name!r}: etype has {self.etype.shape[0]} entries, edges {self.num_edges}"
            )
        if self.node_ids is not None and (
            self.node_ids.shape != (n,) or self.node_ids.dtype.kind not in "iU"
        ):
            raise DataError(f"graph {self.name!r}: node_ids must have one integer or string entry per node")
        for key, names in (
            ("class_names", self.class_names),
            ("relation_names", self.relation_names),
            ("feature_names", self.feature_names),
        ):
            if names is not None and (names.ndim != 1 or names.dtype.kind != "U"):
                raise DataError(f"graph {self.name!r}: {key} must be a 1-D unicode array")
        columns = None if self.feat is None else self.feat.shape[1]
        if self.feature_names is not None and len(self.feature_names) != columns:
            raise DataError(f"graph {self.name!r}: feature_names must name each feature column once")
        names, label = self.class_names, self.label
        if names is not None and label is not None and label.size and int(label.max()) >= len(names):
            raise DataError(f"graph {self.name!r}: a label is beyond the {len(names)} class names")
        for key, t in self.triples.items():
            if key not in ("train", "valid", "test"):
                raise DataError(f"graph {self.name!r}: unknown triple split {key!r}")
            if t.dtype != np.int64 or t.ndim != 2 or t.shape[1] != 3:
                raise DataError(f"graph {self.name!r}: {key} triples must be an int64 (n, 3) array")
            if t.size and (t[:, [0, 2]].min() < 0 or t[:, [0, 2]].max() >= n):
                raise DataError(f"graph {self.name!r}: {key} triples name an entity outside [0, {n})")
        self._validate_edge_targets()
        if self.ntype is not None and self.ntype.shape != (n,):
            raise DataError(f"graph {self.name!r}: ntype must have one entry per node")
        if self.efeat is not None and (self.efeat.ndim != 2 or self.efeat.shape[0] != self.num_edges):
            raise DataError(
                f"graph {self.name!r}: efeat must be a (num_edges, d) array, one row for each of the "
                f"{self.num_edges} edges"
            )
        self._validate_types()

    def _validate_edge_targets(self) -> None:
        n = self.num_nodes
        for key, t in self.edge_targets.items():
            if key not in ("train", "valid", "test"):
                raise DataError(f"graph {self.name!r}: unknown labelled-edge split {key!r}")
            if t.dtype != np.int64 or t.ndim != 2 or t.shape[1] != 4:
                raise DataError(f"graph {self.name!r}: {key} labelled edges must be an int64 (n, 4) array")
            if t.size and (t[:, [0, 2]].min() < 0 or t[:, [0, 2]].max() >= n or t[:, 3].min() < 0):
                raise DataError(f"graph {self.name!r}: {key} labelled edges name a node or class outside")
        for key, v in self.edge_values.items():
            rows = self.edge_targets.get(key)
            if rows is None or v.dtype != np.float32 or v.shape != (len(rows),) or not np.isfinite(v).all():
                raise DataError(f"graph {self.name!r}: {key} edge values must be finite float32, one per row")
        names = self.edge_class_names
        if names is not None and (names.ndim != 1 or names.dtype.kind != "U"):
            raise DataError(f"graph {self.name!r}: edge_class_names must be a 1-D unicode array")

    @property
    def edge_classes(self) -> int:
        """The number of edge classes (0: no labelled edges)."""
        if self.edge_class_names is not None:
            return len(self.edge_class_names)
        return max((int(t[:, 3].max()) + 1 for t in self.edge_targets.values() if t.size), default=0)

    @property
    def typed(self) -> bool:
        """Node and edge types (ntype_names, canonical_etypes) are known."""
        return self.canonical_etypes is not None

    def _validate_types(self) -> None:
        """A typed graph's types: names unique, every node and edge of a known type, every edge joining
        nodes of its canonical type's source and destination types."""
        names, cets = self.ntype_names, self.canonical_etypes
        if names is None and cets is None:
            return
        if names is None or cets is None or self.ntype is None or self.etype is None:
            raise DataError(
                f"graph {self.name!r}: a typed graph needs ntype, ntype_names, etype and canonical_etypes"
            )
        if names.ndim != 1 or names.dtype.kind != "U" or len(set(names.tolist())) != len(names):
            raise DataError(f"graph {self.name!r}: ntype_names must be distinct unicode names")
        if cets.ndim != 2 or cets.shape[1:] != (3,) or cets.dtype.kind != "U":
            raise DataError(f"graph {self.name!r}: canonical_etypes must be (k, 3) unicode")
        if len({tuple(c) for c in cets.tolist()}) != len(cets):
            raise DataError(f"graph {self.name!r}: canonical_etypes repeat an edge type")
        index = {name: i for i, name in enumerate(names.tolist())}
        for src_t, rel, dst_t in cets.tolist():
            for t in (src_t, dst_t):
                if t not in index:
                    raise DataError(
                        f"graph {self.name!r}: edge type ({src_t}, {rel}, {dst_t}) names node type "
                        f"{t!r}, which is not one of {names.tolist()}"
                    )
        if self.ntype.size and (self.ntype.min() < 0 or self.ntype.max() >= len(names)):
            raise DataError(f"graph {self.name!r}: a node type id is outside the {len(names)} node types")
        if self.etype.size and (self.etype.min() < 0 or self.etype.max() >= len(cets)):
            raise DataError(f"graph {self.name!r}: an edge type id is outside the {len(cets)} edge types")
        ends = np.array([[index[s], index[d]] for s, _, d in cets.tolist()], dtype=np.int64).reshape(-1, 2)
        src, dst = self.edges()
        et = self.etype.astype(np.int64)
        wrong = (self.ntype[src] != ends[et, 0]) | (self.ntype[dst] != ends[et, 1])
        if wrong.any():
            e = int(np.flatnonzero(wrong)[0])
            s_t, rel, d_t = cets[et[e]].tolist()
            raise DataError(
                f"graph {self.name!r}: edge {e} of type ({s_t}, {rel}, {d_t}) joins a "
                f"{names[self.ntype[src[e]]]} to a {names[self.ntype[dst[e]]]}"
            )
        for t, (first, width) in self.feature_blocks.items():
            columns = 0 if self.feat is None else self.feat.shape[1]
            if t not in index or first < 0 or width < 1 or first + width > columns:
                raise DataError(f"graph {self.name!r}: feature block of {t!r} is outside the features")

    def ntype_of(self, name: str) -> int:
        """The id of node type `name`."""
        assert self.ntype_names is not None
        return int(np.flatnonzero(self.ntype_names == name)[0])

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) arrays in CSR order."""
        src = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))
        return src, self.indices

    def degree(self) -> np.ndarray:
        """Undirected degree (out + in, self-loops counted twice) of every node, int64."""
        out_deg = np.diff(self.indptr)
        in_deg = np.bincount(self.indices, minlength=self.num_nodes)
        return out_deg + in_deg

    def with_reverse_edges(self) -> Graph:
        """The graph plus the reverse of every non-loop edge, as stored undirected graphs need: a
        partition keeps the in-edges of its nodes, so without reverses a node's out-neighbours would be
        invisible to sampling. Untyped, a reverse keeps its edge's type; typed, edge type (s, r, d) gets
        its reverse type (d, rev_r, s) (DGL's and GraphStorm's convention: a model tells the directions
        apart), and a reverse edge carries its edge's features."""
        src, dst = self.edges()
        keep = src != dst
        etype, cets = self.etype, self.canonical_etypes
        if etype is not None:
            back = etype[keep]
            if cets is not None:
                back = back + len(cets)
                cets = np.concatenate(
                    [
                        cets,
                        np.array([[d, f"rev_{r}", s] for s, r, d in cets.tolist()], dtype=str).reshape(-1, 3),
                    ]
                )
            etype = np.concatenate([etype, back])
        return Graph.from_edges(
            self.name,
            self.num_nodes,
            np.concatenate([src, dst[keep]]),
            np.concatenate([dst, src[keep]]),
            etype=etype,
            efeat=None if self.efeat is None else np.concatenate([self.efeat, self.efeat[keep]]),
            canonical_etypes=cets,
            ntype_names=self.ntype_names,
            feature_blocks=self.feature_blocks,
            feat=self.feat,
            label=self.label,
            masks=self.masks,
            node_ids=self.node_ids,
            ntype=self.ntype,
            num_classes=self.num_classes,
            class_names=self.class_names,
            relation_names=self.relation_names,
            feature_names=self.feature_names,
            triples=self.triples,
            edge_targets=self.edge_targets,
            edge_class_names=self.edge_class_names,
            edge_values=self.edge_values,
        )

    @classmethod
    def from_edges(
        cls,
        name: str,
        num_nodes: int,
        src: np.ndarray,
        dst: np.ndarray,
        etype: np.ndarray | None = None,
        efeat: np.ndarray | None = None,
        **kwargs: object,
    ) -> Graph:
        """Build a Graph from an edge list, keeping duplicates and the relative order of each row (an
        edge's type and features travel with it).

        Raises:
            DataError: lengths differ, an id is negative or >= num_nodes, or the graph cannot fit in memory.
        """
        check_fits(name, num_nodes, len(src))
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if src.shape != dst.shape or src.ndim != 1:
            raise DataError(f"graph {name!r}: src and dst must be 1-D arrays of equal length")
        if etype is not None and np.shape(etype) != src.shape:
            raise DataError(f"graph {name!r}: etype has {len(etype)} entries, edges {len(src)}")
        for label, ids in (("source", src), ("destination", dst)):
            if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
                bad_at = int(np.flatnonzero((ids < 0) | (ids >= num_nodes))[0])
                bad = int(ids[bad_at])
                msg = f"edge {bad_at} has {label} id {bad} outside [0, {num_nodes})"
                raise DataError(f"graph {name!r}: {msg}")
        order = np.argsort(src, kind="stable")
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
        et = None if etype is None else np.asarray(etype)[order]
        if efeat is not None and len(efeat) != len(src):
            raise DataError(f"graph {name!r}: efeat has {len(efeat)} rows, edges {len(src)}")
        ef = None if efeat is None else np.asarray(efeat)[order]
        return cls(
            name=name, num_nodes=num_nodes, indptr=indptr, indices=dst[order], etype=et, efeat=ef, **kwargs
        )


def check_fits(name: str, num_nodes: int, num_edges: int) -> None:
    """Refuse a graph whose CSR arrays alone (8 bytes per node twice, per edge four times while building)
    would exceed the memory this process may use (memlimits: in a pod, its limit), before allocating them.

    Raises:
        DataError: naming the node count, the estimate and the bound with what sets it.
    """
    need = 8 * (2 * (num_nodes + 1) + 4 * num_edges)
    bound = memlimits.ceiling()
    if need > bound.bytes:
        raise DataError(
            f"graph {name!r}: num_nodes={num_nodes:,}, num_edges={num_edges:,} need at least "
            f"{human(need)}, more than {bound.source} ({human(bound.bytes)})"
        )


def human(nbytes: float) -> str:
    """Bytes in binary units: 1.5 KiB, 72.8 TiB."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    for unit in units[:-1]:
        if abs(nbytes) < 1024:
            return f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} {units[-1]}"


@dataclass
class KnowledgeGraph:
    """(head, relation, tail) triples with train/valid/test splits."""

    name: str
    num_entities: int
    num_relations: int
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    entity_names: list[str] | np.ndarray | None = None  # label of each entity id (strings)
    relation_names: list[str] | np.ndarray | None = None  # label of each relation id

    def __post_init__(self) -> None:
        if self.num_entities < 1:
            raise DataError(f"knowledge graph {self.name!r}: no entities")
        for split in ("train", "valid", "test"):
            t = getattr(self, split)
            if t.dtype != np.int64 or t.ndim != 2 or t.shape[1] != 3:
                raise DataError(f"knowledge graph {self.name!r}: {split} must be an int64 (n, 3) array")
            if t.size == 0:
                continue
            ents = t[:, [0, 2]]
            if ents.min() < 0 or ents.max() >= self.num_entities:
                raise DataError(f"knowledge graph {self.name!r}: {split} has an entity id outside the table")
            if t[:, 1].min() < 0 or t[:, 1].max() >= self.num_relations:
                raise DataError(f"knowledge graph {self.name!r}: {split} has a relation id outside the table")

    def to_graph(self, splits: tuple[str, ...] = ("train",)) -> Graph:
        """The graph head -> tail of the given splits, with the relation as edge type; it carries every
        split (`triples`) and the entity and relation labels, so a partition holds the whole KG."""
        t = np.concatenate([getattr(self, s) for s in splits])
        return Graph.from_edges(
            self.name,
            self.num_entities,
            t[:, 0],
            t[:, 2],
            etype=t[:, 1],
            node_ids=None if self.entity_names is None else np.asarray(self.entity_names, dtype=str),
            relation_names=None
            if self.relation_names is None
            else np.asarray(self.relation_names, dtype=str),
            triples={s: getattr(self, s) for s in ("train", "valid", "test")},
        )

    @property
    def num_triples(self) -> int:
        return len(self.train) + len(self.valid) + len(self.test)


def random_masks(num_nodes: int, train: float, val: float, seed: int) -> dict[str, np.ndarray]:
    """Seeded random train/val/test node masks (rest = test), the split used for datasets without one."""
    perm = np.random.default_rng(seed).permutation(num_nodes)
    n_train = int(round(train * num_nodes))
    n_val = int(round(val * num_nodes))
    masks = {}
    for key, ids in (
        ("train", perm[:n_train]),
        ("val", perm[n_train : n_train + n_val]),
        ("test", perm[n_train + n_val :]),
    ):
        m = np.zeros(num_nodes, dtype=bool)
        m[ids] = True
        masks[key] = m
    return masks


def random_triple_split(
    triples: np.ndarray, train: float, val: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded random split of a triple array into train/valid/test."""
    perm = np.random.default_rng(seed).permutation(len(triples))
    n_train = int(round(train * len(triples)))
    n_val = int(round(val * len(triples)))
    return (
        triples[np.sort(perm[:n_train])],
        triples[np.sort(perm[n_train : n_train + n_val])],
        triples[np.sort(perm[n_train + n_val :])],
    )
