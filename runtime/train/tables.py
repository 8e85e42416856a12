"""A spec's embedding table as the trainers hold it: rows on the shard servers (DistEmbedding) or
sharded across the trainers themselves (CollectiveEmbedding, `sharding: collective`). Both take part
in autograd and in the sparse optimizers alike, so the tasks build tables here and use them blind;
checkpoints write and restore the collective ones beside the servers' (checkpoints.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.contract.spec import Sharding, VocabularyKind
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.kvstore.client.kvclient import KVClient
from graphtrain.runtime.models import KGES
from graphtrain.runtime.storage.inits import init_keyed
from graphtrain.runtime.tensor import DistEmbedding, DynamicVocabulary, PartitionBook
from graphtrain.runtime.train.task import init_spec

Table = DistEmbedding | CollectiveEmbedding


def embedding_table(
    spec_table: Any,
    num_rows: int,
    init: dict[str, Any],
    book: PartitionBook,
    client: KVClient,
    device: torch.device,
) -> Table:
    """The table `spec_table` (contract/spec/tables.py) with `num_rows` rows: a collective one lives on
    the trainer's device, its rows owned by rank key mod world size; with a dynamic vocabulary its keys
    (the same ids) get rows on first sight, up to the vocabulary's capacity, on the trainers or (server
    tables) on the shard servers, key mod their count."""
    vocab = spec_table.vocabulary
    dynamic = vocab.kind == VocabularyKind.dynamic
    if spec_table.sharding == Sharding.collective:
        return CollectiveEmbedding(
            num_rows,
            spec_table.dim,
            spec_table.name,
            init,
            device=device,
            capacity=vocab.capacity if dynamic else None,
            on_full=str(vocab.on_full),
            dtype=getattr(torch, str(spec_table.dtype)),
        )
    keys = DynamicVocabulary(int(vocab.capacity), str(vocab.on_full) == "evict") if dynamic else None
    return DistEmbedding(
        num_rows,
        spec_table.dim,
        spec_table.name,
        init,
        None if keys else book,
        client,
        keys,
        dtype=getattr(torch, str(spec_table.dtype)),
    )


def table_init(spec: Any, name: str) -> dict[str, Any]:
    """The init description (with its seed) the trainers give table `name` of `spec`: a KGE model's entity
    table is seeded by training.seed and its relation table by training.seed + 1, a feature bag's table
    by 1, a node embedding by 0.
    predict.py reads it too: an unseen key of a dynamic table has this init's value."""
    table = next(t for t in spec.embeddings if t.name == name)
    m, seed = spec.model, spec.training.seed
    # a KGE table's rows start on the unit sphere where its model keeps them there: a fixed one's are put
    # there at start (normalise_rows), a dynamic vocabulary's as its keys take rows
    unit = m.kind in KGES and KGES[m.kind].unit_rows
    norm = {"norm": 1.0} if unit and table.vocabulary.kind == VocabularyKind.dynamic else {}
    if name == m.entity_embedding:
        return {**init_spec(table, seed), **norm}
    if name == m.relation_embedding:
        return {**init_spec(table, seed + 1), **norm}
    if m.feature_bag is not None and name == m.feature_bag.embedding:
        return init_spec(table, 1)
    return init_spec(table)


def checkpoint_rows(root: Path, spec: Any, name: str, num_rows: int) -> np.ndarray:
    """Table `name` of a checkpoint as `num_rows` float32 rows in row (key) order: a dynamic vocabulary's
    keys in [0, num_rows) get their rows, the others the initial value an evaluation lookup reads for
    them (a half table's rounded to nearest, as its shards and trainers store it)."""
    keyed = ckpt.export_keyed(root, name)
    if keyed is None:
        return ckpt.export_table(root, name)
    keys, values = keyed
    table = next(t for t in spec.embeddings if t.name == name)
    out = init_keyed(table_init(spec, name), np.arange(num_rows), table.dim)  # KGE rows: on the unit sphere
    if str(table.dtype) != "float32":  # as a half table's evaluation pull reads an unseen key: rounded
        out = torch.from_numpy(out).to(getattr(torch, str(table.dtype))).float().numpy()
    inside = (keys >= 0) & (keys < num_rows)
    out[keys[inside]] = values[inside]
    return out


def collective(tables: list[Table | None]) -> list[CollectiveEmbedding]:
    return [t for t in tables if isinstance(t, CollectiveEmbedding)]


def unit_rows(rows: torch.Tensor) -> torch.Tensor:
    return rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)


def normalise_rows(
    table: Table, rank: int, chunk: int, project: Callable[[torch.Tensor], torch.Tensor] = unit_rows
) -> None:
    """Put every row of `table` where its model keeps it, by `project` (unit L2 norm: KGE rows start
    on the sphere; optim.functional.unit_complex: RotatE's relations). Server tables: rank 0 rewrites
    them in chunks (the caller then waits at a barrier); collective ones: each rank its own."""
    if isinstance(table, CollectiveEmbedding):
        # in chunks of rows: a half table's are projected in float32 and rounded back, and its float32
        # temporaries of the whole table (about 5x its own bytes) might not fit beside it on a GPU
        with torch.no_grad():
            w = table.weight
            for lo in range(0, len(w), chunk):
                w[lo : lo + chunk].copy_(project(w[lo : lo + chunk].float()))
        return
    if rank != 0 or table.table.keyed:  # a dynamic table's rows start there (table_init's norm)
        return
    for lo in range(0, table.num_embeddings, chunk):
        ids = torch.arange(lo, min(lo + chunk, table.num_embeddings))
        table.table[ids] = project(table.rows(ids))
