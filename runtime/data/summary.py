"""What an input holds, in numbers: the facts `graphtrain data info` prints and the requirements check
(requirements.py) reads.

`summarise` is pure and reads only the in-memory graph, so the same facts serve a bundled dataset, a file
and triples. `directedness` is the share of edges whose reverse edge is absent: 0 for an undirected
graph stored with both directions, 1 for a one-direction edge list, which GraphSAGE's neighbour sampling
(a node sees its in-neighbours) would read very differently from what the user meant.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from graphtrain.runtime import arrays
from graphtrain.runtime.data.graph import MASKS, Graph, KnowledgeGraph


@dataclass(frozen=True)
class Summary:
    """The facts of one input. Counts of absent things are 0 or None (no features: feature_dims None)."""

    name: str
    num_nodes: int
    num_edges: int
    isolated: int  # nodes with no edge in either direction
    directed: float  # share of edges whose reverse is absent (0 = stored undirected)
    degree_min: int
    degree_mean: float
    degree_median: float
    degree_max: int
    node_ids: str | None = None  # "integer" | "string" | None (0..n-1)
    feature_dims: int | None = None
    sparse_features: bool = False
    num_classes: int | None = None
    class_names: list[str] | None = None
    labelled: int = 0
    masks: dict[str, int] = field(default_factory=dict)  # train/val/test -> nodes
    num_edge_types: int = 0
    relation_names: list[str] | None = None
    triples: dict[str, int] = field(default_factory=dict)  # KG split -> triples
    relation_triples: dict[str, list[int]] = field(default_factory=dict)  # KG split -> triples per relation
    node_types: list[str] | None = None  # a typed graph's node types
    type_masks: dict[str, dict[str, int]] = field(default_factory=dict)  # node type -> split -> nodes
    canonical_etypes: list[tuple[str, str, str]] | None = None  # its edge types
    edge_feature_dims: int | None = None
    edge_targets: dict[str, int] = field(default_factory=dict)  # labelled edges per split
    edge_classes: int = 0  # classes of the labelled edges
    edge_class_names: bool = False  # their labels are class names (else integer class ids)
    edge_values: bool = False  # every edge label is a number (task edgeRegression)

    @property
    def has_labels(self) -> bool:
        return self.num_classes is not None

    def lines(self) -> list[str]:
        """The summary for people, one fact per line."""
        out = [f"{self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges"]
        if self.node_ids:
            out.append(f"node ids: {self.node_ids}")
        if self.num_edges:
            share = f"{self.directed:.0%} of edges have no reverse edge"
            kind = "undirected (every edge has its reverse)" if self.directed == 0 else f"directed: {share}"
            out.append(f"direction: {kind}")
        out.append(
            f"degree (in + out): min {self.degree_min:,}, mean {self.degree_mean:.2f}, "
            f"median {self.degree_median:g}, max {self.degree_max:,}"
        )
        out.append(f"isolated nodes: {self.isolated:,}")
        if self.feature_dims is None:
            out.append("features: none")
        else:
            out.append(
                f"features: {self.feature_dims:,} dims" + (" (sparse)" if self.sparse_features else "")
            )
        if self.num_classes is None:
            out.append("labels: none")
        else:
            names = f" ({_names(self.class_names)})" if self.class_names else ""
            out.append(f"classes: {self.num_classes}{names}; labelled nodes: {self.labelled:,}")
        if self.masks:
            out.append("masks: " + ", ".join(f"{k} {v:,}" for k, v in self.masks.items()))
        if self.num_edge_types:
            names = f" ({_names(self.relation_names)})" if self.relation_names else ""
            out.append(f"edge types: {self.num_edge_types}{names}")
        if self.node_types:
            out.append(f"node types: {len(self.node_types)} ({_names(self.node_types)})")
        if self.canonical_etypes:
            shown = [":".join(c) for c in self.canonical_etypes]
            out.append(f"edge types: {len(shown)} ({_names(shown)})")
        if self.edge_feature_dims:
            out.append(f"edge features: {self.edge_feature_dims:,} dims")
        if self.triples:
            out.append("triples: " + ", ".join(f"{k} {v:,}" for k, v in self.triples.items()))
        if self.edge_targets:
            counts = ", ".join(f"{k} {v:,}" for k, v in self.edge_targets.items())
            out.append(f"labelled edges: {counts} ({self.edge_classes} classes)")
        return out


def _names(names: list[str] | None, most: int = 8) -> str:
    names = names or []
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names) - most} more)" if len(names) > most else "")


def _type_masks(g: Graph) -> dict[str, dict[str, int]]:
    """A typed graph's split sizes per node type (task.targetNodeTypes trains only those types' nodes)."""
    if g.ntype is None or g.ntype_names is None or not g.masks:
        return {}
    return {
        str(name): {k: int(g.masks[k][g.ntype == t].sum()) for k in MASKS if k in g.masks}
        for t, name in enumerate(g.ntype_names)
    }


def _per_relation(triples: np.ndarray, relations: int) -> list[int]:
    """How many of `triples` (n, 3) each relation id has (task.targetRelations' splits are checked)."""
    rel = np.asarray(triples)[:, 1].astype(np.int64) if len(triples) else np.empty(0, np.int64)
    return np.bincount(rel, minlength=relations).tolist()


def directed_share(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> float:
    """Share of edges (src[i], dst[i]) with no edge (dst[i], src[i]) (self-loops are their own reverse,
    edge types aside): 0 for an edge list stored both ways, 1 for a one-direction list."""
    if src.size == 0:
        return 0.0
    n = np.int64(num_nodes)
    # Both sides sorted: the searches then walk memory in order (26x faster than unique() and a search
    # of each reversed key at random, 12.5 s on 6M edges, which was most of a large partition step).
    # The share is over the same multiset of reversed keys, and duplicates do not change a search.
    keys = np.sort(src.astype(np.int64) * n + dst)
    reverse = np.sort(dst.astype(np.int64) * n + src)
    at = np.searchsorted(keys, reverse).clip(0, len(keys) - 1)
    return float(np.mean(keys[at] != reverse))


def directedness(graph: Graph) -> float:
    """directed_share of `graph`'s edges, counted once per edge list: the data check and the partition's
    statistics both ask, and each count sorts every edge twice. Kept on the graph beside weak references
    to the arrays it was counted from, so edges replaced since (reverse edges added) are counted again."""
    memo = graph.__dict__.get("_directedness")
    if memo is not None and memo[0]() is graph.indptr and memo[1]() is graph.indices:
        return float(memo[2])
    share = directed_share(*graph.edges(), graph.num_nodes)
    graph.__dict__["_directedness"] = (weakref.ref(graph.indptr), weakref.ref(graph.indices), share)
    return share


def summarise(graph: Graph | KnowledgeGraph) -> Summary:
    """The facts of `graph`; a knowledge graph is summarised as its training graph plus its splits."""
    g = graph.to_graph(("train",)) if isinstance(graph, KnowledgeGraph) else graph
    degree = g.degree()
    label = g.label
    num_classes = None
    if label is not None:
        named = len(g.class_names) if g.class_names is not None else None
        num_classes = g.num_classes or named or int(label.max(initial=-1)) + 1
    num_edge_types = 0
    if g.relation_names is not None:
        num_edge_types = len(g.relation_names)
    elif g.etype is not None and g.etype.size:
        num_edge_types = int(arrays.unique(g.etype).size)
    return Summary(
        name=g.name,
        num_nodes=g.num_nodes,
        num_edges=g.num_edges,
        isolated=int((degree == 0).sum()),
        directed=directedness(g),
        degree_min=int(degree.min()),
        degree_mean=float(degree.mean()),
        degree_median=float(np.median(degree)),
        degree_max=int(degree.max()),
        node_ids=None if g.node_ids is None else ("string" if g.node_ids.dtype.kind == "U" else "integer"),
        feature_dims=None if g.feat is None else int(g.feat.shape[1]),
        sparse_features=g.feat is not None and hasattr(g.feat, "nnz"),
        num_classes=num_classes,
        class_names=None if g.class_names is None else [str(c) for c in g.class_names],
        labelled=0 if label is None else int((label >= 0).sum()),
        masks={k: int(g.masks[k].sum()) for k in MASKS if k in g.masks},
        num_edge_types=num_edge_types,
        relation_names=None if g.relation_names is None else [str(r) for r in g.relation_names],
        triples={k: len(v) for k, v in g.triples.items()},
        relation_triples={k: _per_relation(v, num_edge_types) for k, v in g.triples.items()},
        node_types=None if g.ntype_names is None else [str(t) for t in g.ntype_names],
        type_masks=_type_masks(g),
        canonical_etypes=None
        if g.canonical_etypes is None
        else [(str(s), str(r), str(d)) for s, r, d in g.canonical_etypes.tolist()],
        edge_feature_dims=None if g.efeat is None else int(g.efeat.shape[1]),
        edge_targets={k: len(v) for k, v in g.edge_targets.items()},
        edge_classes=g.edge_classes,
        edge_class_names=g.edge_class_names is not None,
        edge_values=bool(g.edge_values),
    )
