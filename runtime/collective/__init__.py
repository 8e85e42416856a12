"""Collective embedding tables: rows sharded across the trainer ranks, looked up all-to-all (SOK-style).

    table = CollectiveEmbedding(n, 128, "entity", init={"kind": "uniform", "low": -1, "high": 1})
    opt = SparseAdam([table], lr=0.01)
    loss = model(table(ids)).sum(); loss.backward(); opt.step()   # on every rank, in step

docs/collective.md gives the semantics (SOK's and DeepRec's) and how they differ from server tables.
"""

from graphtrain.runtime.collective.checkpoint import restore, save, write_checkpoint
from graphtrain.runtime.collective.embedding import CollectiveEmbedding
from graphtrain.runtime.collective.exchange import CollectiveError
from graphtrain.runtime.collective.layers import (
    bag,
    group_lookup,
    slot_bag,
    slots,
    split_embedding_parameters,
)

__all__ = [
    "CollectiveEmbedding",
    "CollectiveError",
    "bag",
    "group_lookup",
    "restore",
    "save",
    "slot_bag",
    "slots",
    "split_embedding_parameters",
    "write_checkpoint",
]
