"""The model registry: one module per model, each with its ENTRY, registered here once.

A model is its spec variant (contract/spec/model.py: its fields and the tasks it serves) and its module
here (the torch module it builds and its cost). Everything else finds it by kind: the trainers build it
(train/node_classification.py, train/kge.py), `graphtrain predict` rebuilds it from a checkpoint, and
`graphtrain plan` counts its work (capacity.py, calibrate.py, planning.py). docs/architecture.md says
how to add one.
"""

from __future__ import annotations

from graphtrain.runtime.models import complex, distmult, gat, graphsage, rgat, rgcn, rotate, transe
from graphtrain.runtime.models.entry import BlockWork, GNNEntry, GNNShape, KGEEntry

GNNS: dict[str, GNNEntry] = {m.ENTRY.kind: m.ENTRY for m in (graphsage, gat, rgcn, rgat)}
KGES: dict[str, KGEEntry] = {m.ENTRY.kind: m.ENTRY for m in (transe, distmult, complex, rotate)}


def gnn_entry(kind: str) -> GNNEntry:
    """The registered GNN of `kind` (KeyError names the kinds there are)."""
    try:
        return GNNS[kind]
    except KeyError:
        raise KeyError(f"no GNN model {kind!r} (registered: {', '.join(GNNS)})") from None


def kge_entry(kind: str) -> KGEEntry:
    """The registered knowledge-graph model of `kind`."""
    try:
        return KGES[kind]
    except KeyError:
        raise KeyError(f"no knowledge-graph model {kind!r} (registered: {', '.join(KGES)})") from None


__all__ = ["GNNS", "KGES", "BlockWork", "GNNEntry", "GNNShape", "KGEEntry", "gnn_entry", "kge_entry"]
