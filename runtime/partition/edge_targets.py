"""A partition's labelled edges (task edgeClassification), kept beside the graph as a knowledge
graph's splits are (format.py's kg/):

    edges/<split>.npy        int64 (n, 4) (source, edge type, destination, class) in ORIGINAL node ids,
                             split train/valid/test
    edges/<split>.values.npy float32 (n,), the labels as numbers (task edgeRegression), when every label
                             is one
    edge_class_names.npy     unicode, edge class i is edge_class_names[i] (class-name labels)

and the config's `edge_targets` entry: {num_classes, labelled {split: count}, has_class_names,
has_values}. Every
labelled edge is also an edge of the graph; the trainers map its ends with node_map_inverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.partition.npyfiles import Recorded, load_files

SPLITS = ("train", "valid", "test")


def write_edge_targets(tmp: Path, graph: Graph) -> None:
    """The labelled edges and their class names under the partition being written at `tmp`."""
    if not graph.edge_targets:
        return
    (tmp / "edges").mkdir()
    for split, rows in graph.edge_targets.items():
        np.save(tmp / "edges" / f"{split}.npy", np.ascontiguousarray(rows, dtype=np.int64))
    for split, values in graph.edge_values.items():
        np.save(tmp / "edges" / f"{split}.values.npy", values)
    if graph.edge_class_names is not None:
        np.save(tmp / "edge_class_names.npy", graph.edge_class_names)


def edge_targets_meta(graph: Graph) -> dict[str, Any] | None:
    """The config's `edge_targets` entry (None: no labelled edges)."""
    if not graph.edge_targets:
        return None
    return {
        "num_classes": graph.edge_classes,
        "labelled": {s: int(len(graph.edge_targets[s])) for s in SPLITS if s in graph.edge_targets},
        "has_class_names": graph.edge_class_names is not None,
        "has_values": bool(graph.edge_values),
    }


@dataclass
class EdgeTargets:
    """A partition's labelled edges: rows per split in ORIGINAL node ids, the class count and names, and
    the labels as numbers (empty when one is not a number)."""

    rows: dict[str, np.ndarray]
    num_classes: int
    class_names: np.ndarray | None
    values: dict[str, np.ndarray]


def load_edge_targets(cfg: Recorded, verify: bool = True) -> EdgeTargets:
    """The partition's labelled edges.

    Raises:
        DataError: the partition holds no labelled edges, or a file is not what the config says."""
    meta = cfg.data.get("edge_targets")
    if not meta:
        raise DataError(
            f"{cfg.path}: the partition holds no labelled edges (no graph.edges entry has a label, or it "
            "was made by an older graphtrain): partition the spec's graph again"
        )
    splits = [s for s in SPLITS if s in meta["labelled"]]
    numeric = [s for s in splits if meta.get("has_values")]
    rels = [f"edges/{s}.npy" for s in splits] + [f"edges/{s}.values.npy" for s in numeric]
    rels += ["edge_class_names.npy"] if meta["has_class_names"] else []
    loaded = load_files(cfg, rels, verify)
    out = {s: loaded[f"edges/{s}.npy"] for s in splits}
    values = {s: loaded[f"edges/{s}.values.npy"] for s in numeric}
    for split, rows in out.items():
        if rows.dtype != np.int64 or rows.ndim != 2 or rows.shape[1] != 4:
            raise DataError(f"{cfg.root / 'edges' / split}.npy: not an int64 (n, 4) labelled-edge array")
        v = values.get(split)
        if v is not None and (v.dtype != np.float32 or v.shape != (len(rows),)):
            raise DataError(f"{cfg.root / 'edges' / split}.values.npy: not one float32 per labelled edge")
    return EdgeTargets(out, int(meta["num_classes"]), loaded.get("edge_class_names.npy"), values)
