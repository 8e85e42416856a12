"""What a written partition holds, counted from its own files for `graphtrain inspect`: directedness,
degrees and isolated nodes, features, classes, masks, edge types, a knowledge graph's splits and the
bytes on disk. The counting is pure (`degree_stats`; directedness is data.summary's directed_share);
`summarise` reads the files.

Directedness decides the words: the partitioner's edge cut counts node pairs joined by an edge in
either direction, which for a symmetric edge list are its undirected edges and for a one-direction
list are not ("undirected edges" there read as if the input had been symmetric).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphtrain.runtime.data.summary import directed_share
from graphtrain.runtime.partition.format import PartitionConfig, load_names, load_part
from graphtrain.runtime.partition.stats import DIRECTED_MAX


def degree_stats(degree: np.ndarray) -> dict[str, float]:
    """min, mean, median and max of a degree array (all 0 for an empty one)."""
    if degree.size == 0:
        return {"min": 0.0, "mean": 0.0, "median": 0.0, "max": 0.0}
    return {
        "min": float(degree.min()),
        "mean": float(degree.mean()),
        "median": float(np.median(degree)),
        "max": float(degree.max()),
    }


@dataclass
class PartitionSummary:
    num_nodes: int
    num_edges: int
    directed: float | None  # share of edges without their reverse (None: not measured, too many edges)
    isolated: int
    degree: dict[str, float]  # in + out, as the partitioner weighs nodes
    feat_dims: int | None = None
    feat_sparse: bool = False
    num_classes: int | None = None
    class_names: list[str] | None = None
    labelled: int | None = None
    masks: dict[str, int] = field(default_factory=dict)
    edge_types: dict[str, int] = field(default_factory=dict)  # name (or id) -> edges
    kg: dict[str, int] = field(default_factory=dict)  # split -> triples
    labelled_edges: dict[str, int] = field(default_factory=dict)  # split -> labelled edges
    edge_classes: int = 0
    bytes_total: int = 0
    bytes_per_part: list[int] = field(default_factory=list)


def summarise(cfg: PartitionConfig, verify: bool = False) -> PartitionSummary:
    """Count what the partition holds from its files (memory-mapped; one pass over the edges)."""
    data = cfg.data
    n, k = int(data["num_nodes"]), cfg.num_parts
    in_deg, srcs, dsts, etypes = [], [], [], []
    masks: dict[str, int] = {}
    labelled = 0
    for p in range(k):
        part = load_part(cfg, p, verify=verify)
        lo, hi = part.node_range
        counts = np.diff(part.indptr)
        in_deg.append(counts)
        srcs.append(np.asarray(part.indices))
        dsts.append(np.repeat(np.arange(lo, hi, dtype=np.int64), counts))
        if part.etype is not None:
            etypes.append(np.asarray(part.etype))
        for key, value in part.ndata.items():
            if key.endswith("_mask"):
                masks[key.removesuffix("_mask")] = masks.get(key.removesuffix("_mask"), 0) + int(value.sum())
            elif key == "label":
                labelled += int((np.asarray(value) >= 0).sum())
    src = np.concatenate(srcs) if srcs else np.empty(0, dtype=np.int64)
    dst = np.concatenate(dsts) if dsts else np.empty(0, dtype=np.int64)
    degree = np.concatenate(in_deg) + np.bincount(src, minlength=n)
    names = load_names(cfg, verify=verify)
    feat = data.get("ndata", {}).get("feat")
    summary = PartitionSummary(
        num_nodes=n,
        num_edges=int(data["num_edges"]),
        directed=directed_share(src, dst, n) if len(src) <= DIRECTED_MAX else None,
        isolated=int((degree == 0).sum()),
        degree=degree_stats(degree),
        feat_dims=None if feat is None else int(np.prod(feat["shape"][1:], dtype=np.int64)),
        feat_sparse=feat is not None and feat.get("kind") == "csr",
        num_classes=data.get("num_classes"),
        class_names=names["class_names"].tolist() if "class_names" in names else None,
        labelled=labelled if "label" in data.get("ndata", {}) else None,
        masks=masks,
        kg=dict(data.get("kg", {}).get("triples", {})),
        labelled_edges=dict(data.get("edge_targets", {}).get("labelled", {})),
        edge_classes=int(data.get("edge_targets", {}).get("num_classes", 0)),
    )
    if etypes:
        counts_by_type = np.bincount(np.concatenate(etypes))
        rel = names.get("relation_names")
        cets = data.get("canonical_etypes")
        if cets and rel is None:  # a typed graph's edge types, by name
            rel = [":".join(c) for c in cets]
        elif cets and len(cets) > len(rel):  # a knowledge graph's reverse types (rev_<relation>) follow
            rel = [*rel, *(c[1] for c in cets[len(rel) :])]
        summary.edge_types = {
            (str(rel[t]) if rel is not None and t < len(rel) else str(t)): int(c)
            for t, c in enumerate(counts_by_type.tolist())
            if c
        }
    summary.bytes_total, summary.bytes_per_part = _disk(cfg)
    return summary


def _disk(cfg: PartitionConfig) -> tuple[int, list[int]]:
    """Bytes of every recorded file, and of each partition's directory."""
    sizes: dict[str, int] = {}
    for rel in cfg.data["files"]:
        path = cfg.root / rel
        sizes[rel] = path.stat().st_size if path.is_file() else 0
    per_part = [
        sum(s for rel, s in sizes.items() if rel.startswith(meta["dir"] + "/")) for meta in cfg.data["parts"]
    ]
    return sum(sizes.values()) + cfg.path.stat().st_size, per_part
