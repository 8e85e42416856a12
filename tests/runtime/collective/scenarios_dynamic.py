"""Spawned ranks' work for collective tables with a dynamic vocabulary (ranks.py runs these as
"scenarios_dynamic.<fn>"). Keys are arbitrary int64 (negative and beyond 2**32), derived from the
fixed-table batches of scenarios.py so the references can rebuild them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.collective import CollectiveEmbedding, bag, write_checkpoint
from graphtrain.runtime.collective.checkpoint import restore
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.optim import SparseOptimizer
from tests.runtime.collective.scenarios import INIT, batch_ids, config, weights

SCALE, SHIFT = 1_000_003_007, -4_000_000_000_000


def keys_of(step: int, rank: int, n: int) -> np.ndarray:
    return batch_ids(step, rank, n).astype(np.int64) * SCALE + SHIFT


def _table(capacity: int, on_full: str = "error", name: str = "d") -> CollectiveEmbedding:
    return CollectiveEmbedding(1, 4, name, INIT, capacity=capacity, on_full=on_full)


def train(
    rank: int,
    world: int,
    out: Path,
    kind: str,
    duplicate: str,
    capacity: int,
    n: int,
    steps: int,
    probe: list[int],
) -> dict[str, Any]:
    """Lookups (inserting) and steps; then the rows of every key seen (via an evaluation lookup) and of
    `probe` keys never seen (their initial values, not inserted)."""
    table = _table(capacity)
    opt = SparseOptimizer([table], config(kind, duplicate))
    result: dict[str, Any] = {}
    for s in range(steps):
        keys = torch.from_numpy(keys_of(s, rank, n))
        rows = table(keys)
        (rows * torch.from_numpy(weights(s, rank, len(keys), 4))).sum().backward()
        result[f"rows{s}"] = rows.detach().numpy()
        opt.step()
    seen = np.unique(np.concatenate([keys_of(s, r, n) for s in range(steps) for r in range(world)]))
    held = len(table.keys)
    result["seen"] = table.rows(torch.from_numpy(seen)).numpy()
    result["probe"] = table.rows(torch.tensor(probe, dtype=torch.int64)).numpy()
    result["held_before_after"] = np.array([held, len(table.keys)])
    pooled = bag(table, torch.from_numpy(seen[:5]), torch.tensor([0, 2, 2, 5]), "mean")
    result["bag"] = pooled.detach().numpy()
    table.clear()
    return result


def full(rank: int, world: int, out: Path, on_full: str) -> dict[str, Any]:
    """A shard of 3 rows per rank: rank 0 asks for more new keys than it holds. With onFull error every
    rank raises (the full shard's rank names table, shard and capacity) and nothing is inserted; with
    evict the oldest rows give way and start again from the new keys' initial values."""
    table = _table(3 * world, on_full)
    opt = SparseOptimizer([table], config("adagrad"))
    owned = [world * j + rank for j in range(3)]  # keys this rank owns: its shard's three rows
    rows = table(torch.tensor(owned))
    rows.sum().backward()
    opt.step()
    messages = []
    fresh = [world * (10 + j) for j in range(2)] if rank == 1 else []  # two new keys for rank 0's shard
    try:
        table(torch.tensor([owned[2], *fresh], dtype=torch.int64))
    except SparseInputError as exc:
        messages.append(f"{type(exc).__name__}: {exc}")
    after = table.rows(torch.tensor(owned + [world * 10, world * 11])).numpy()
    table.clear()
    again = table(torch.tensor(owned[:1])).detach().numpy()  # still in step with the other ranks
    return {"messages": np.array(messages or [""]), "after": after, "again": again, "held": len(table.keys)}


def save_then(rank: int, world: int, out: Path, ckdir: str, capacity: int, n: int) -> dict[str, Any]:
    table = _table(capacity)
    opt = SparseOptimizer([table], config("adam"))
    for s in range(2):
        keys = torch.from_numpy(keys_of(s, rank, n))
        (table(keys) * torch.from_numpy(weights(s, rank, len(keys), 4))).sum().backward()
        opt.step()
    write_checkpoint([table], Path(ckdir))
    seen = np.unique(np.concatenate([keys_of(s, r, n) for s in range(2) for r in range(world)]))
    return {"seen": table.rows(torch.from_numpy(seen)).numpy(), "keys": seen}


def restore_then(
    rank: int, world: int, out: Path, ckdir: str, capacity: int, n: int, keys: list[int]
) -> dict[str, Any]:
    table = _table(capacity)
    SparseOptimizer([table], config("adam"))
    assert restore(table, Path(ckdir))
    return {"seen": table.rows(torch.tensor(keys, dtype=torch.int64)).numpy(), "held": len(table.keys)}


def group_vs_separate(rank: int, world: int, out: Path, n: int, steps: int) -> dict[str, Any]:
    """A dynamic and a fixed table looked up together (one exchange) and, as a twin pair, separately:
    the same rows, the same updates."""
    from graphtrain.runtime.collective import group_lookup

    pairs = []
    for _ in range(2):
        d, f = _table(64), CollectiveEmbedding(n, 4, "f", INIT)
        pairs.append((d, f, SparseOptimizer([d, f], config("adam"))))
    result: dict[str, Any] = {}
    for s in range(steps):
        keys, ids = torch.from_numpy(keys_of(s, rank, n)), torch.from_numpy(batch_ids(s + 5, rank, n))
        wk, wi = (
            torch.from_numpy(weights(s, rank, len(keys), 4)),
            torch.from_numpy(weights(s, rank, len(ids), 4, 1)),
        )
        for k, (d, f, opt) in enumerate(pairs):
            rd, rf = group_lookup([d, f], [keys, ids]) if k == 0 else (d(keys), f(ids))
            ((rd * wk).sum() + (rf * wi).sum()).backward()
            result[f"rows{k}_{s}"] = torch.cat([rd, rf]).detach().numpy()
            opt.step()
    seen = np.unique(np.concatenate([keys_of(s, r, n) for s in range(steps) for r in range(world)]))
    for k, (d, f, _) in enumerate(pairs):
        result[f"d{k}"] = d.rows(torch.from_numpy(seen)).numpy()
        result[f"f{k}"] = f.rows(torch.arange(n)).numpy()
    return result
