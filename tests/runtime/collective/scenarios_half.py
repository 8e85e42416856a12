"""Spawned ranks' work for half-precision collective tables (ranks.py runs these as "scenarios_half.<fn>"):
fixed or dynamic vocabularies in float16 or bfloat16, trained, checkpointed and restored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.collective import CollectiveEmbedding, write_checkpoint
from graphtrain.runtime.collective.checkpoint import restore
from graphtrain.runtime.optim import SparseOptimizer
from tests.runtime.collective.scenarios import INIT, batch_ids, config, weights
from tests.runtime.collective.scenarios_dynamic import keys_of


def table_of(dtype: str, dynamic: bool, n: int, dim: int) -> CollectiveEmbedding:
    kind = getattr(torch, dtype)
    if dynamic:
        return CollectiveEmbedding(1, dim, "h", INIT, capacity=4 * n, dtype=kind)
    return CollectiveEmbedding(n, dim, "h", INIT, dtype=kind)


def ids_of(dynamic: bool, step: int, rank: int, n: int) -> np.ndarray:
    return keys_of(step, rank, n) if dynamic else batch_ids(step, rank, n)


def train(
    rank: int, world: int, out: Path, dtype: str, dynamic: bool, n: int, dim: int, steps: int, ckdir: str
) -> dict[str, Any]:
    """Adam steps on a half table: the rows each lookup returned (float32 to the model), the whole table
    after every step, the rows' element size; then a checkpoint of it."""
    table = table_of(dtype, dynamic, n, dim)
    opt = SparseOptimizer([table], config("adam", "sum"))
    result: dict[str, Any] = {"element_size": np.array(table.weight.element_size())}
    every = np.unique(np.concatenate([ids_of(dynamic, s, r, n) for s in range(steps) for r in range(world)]))
    for s in range(steps):
        ids = torch.from_numpy(ids_of(dynamic, s, rank, n))
        rows = table(ids)
        assert rows.dtype == torch.float32
        (rows * torch.from_numpy(weights(s, rank, len(ids), dim))).sum().backward()
        result[f"rows{s}"] = rows.detach().numpy()
        opt.step()
        result[f"table{s}"] = table.rows(torch.from_numpy(every)).numpy()
    result["state_dtypes"] = np.array(sorted(str(v.dtype) for v in table.state.values()))
    write_checkpoint([table], Path(ckdir))
    return result


def restore_then(
    rank: int, world: int, out: Path, dtype: str, dynamic: bool, n: int, dim: int, keys: list[int], ckdir: str
) -> dict[str, Any]:
    """Restore into this world size: the rows of `keys`, and the weight's element type."""
    table = table_of(dtype, dynamic, n, dim)
    SparseOptimizer([table], config("adam", "sum"))
    assert restore(table, Path(ckdir))
    rows = table.rows(torch.tensor(keys, dtype=torch.int64)).numpy()
    return {"rows": rows, "dtype": np.array(str(table.weight.dtype)), "steps": np.array(table.steps)}


def wire(rank: int, world: int, out: Path, dtype: str, n: int, dim: int) -> dict[str, Any]:
    """One lookup and one step of a fixed table: the bytes this rank's exchanges moved to and from the
    others (exchange.Exchange's counters)."""
    table = table_of(dtype, False, n, dim)
    opt = SparseOptimizer([table], config("adagrad", "sum"))
    ids = torch.from_numpy(batch_ids(0, rank, n))
    (table(ids) * torch.from_numpy(weights(0, rank, len(ids), dim))).sum().backward()
    opt.step()
    return {"sent": np.array(table.comm.sent_bytes), "received": np.array(table.comm.received_bytes)}


def restore_refused(
    rank: int, world: int, out: Path, dtype: str, dynamic: bool, n: int, dim: int, ckdir: str
) -> dict[str, Any]:
    """Restore into this world size, expecting a refusal: its message."""
    from graphtrain.runtime.errors import DataError

    table = table_of(dtype, dynamic, n, dim)
    SparseOptimizer([table], config("adam", "sum"))
    try:
        restore(table, Path(ckdir))
    except DataError as exc:
        return {"error": np.array(str(exc))}
    return {"error": np.array("")}
