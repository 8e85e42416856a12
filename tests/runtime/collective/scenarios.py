"""What each spawned rank does (ranks.py runs these), and the batches both the ranks and the
single-process references draw: pure functions of (step, rank), so the test can rebuild every rank's
input."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.collective import (
    CollectiveEmbedding,
    bag,
    group_lookup,
    restore,
    slot_bag,
    write_checkpoint,
)
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer, make_state, sparse_step
from graphtrain.runtime.storage.inits import init_rows

INIT = {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 7}


def config(kind: str, duplicate: str = "sum", **extra: Any) -> OptimConfig:
    return OptimConfig(kind, lr=0.05, eps=1e-6, duplicate=duplicate, weight_decay=0.01, **extra)  # type: ignore[arg-type]


def batch_ids(step: int, rank: int, n: int) -> np.ndarray:
    """A few ids with repeats (a hot id, a narrow range); rank 1's batch of step 1 is empty."""
    rng = np.random.default_rng(1000 * step + rank)
    if step == 1 and rank == 1:
        return np.zeros(0, dtype=np.int64)
    size = int(rng.integers(4, 14))
    ids = rng.integers(0, n, size)
    ids[: size // 3] = 3  # one hot id on every rank
    return ids.astype(np.int64)


def weights(step: int, rank: int, rows: int, dim: int, salt: int = 0) -> np.ndarray:
    return (
        np.random.default_rng(50_000 + 1000 * step + rank + salt).normal(size=(rows, dim)).astype(np.float32)
    )


def bag_batch(step: int, rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """values, offsets of a few bags: empty bags, repeated members, one bag of a hot id."""
    rng = np.random.default_rng(7000 + 1000 * step + rank)
    lengths = rng.integers(0, 5, int(rng.integers(3, 7)))
    lengths[0] = 0
    values = rng.integers(0, n, int(lengths.sum())).astype(np.int64)
    if len(values) > 2:
        values[1] = values[0]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return values, offsets


def full_table(n: int, dim: int) -> torch.Tensor:
    t = torch.empty((n, dim))
    init_rows(INIT, 0, n, (dim,), t)
    return t


def _all_rows(table: CollectiveEmbedding) -> np.ndarray:
    return table.rows(torch.arange(table.num_embeddings)).numpy()


def lookup_train(
    rank: int, world: int, out: Path, kind: str, duplicate: str, unique: bool, n: int, dim: int, steps: int
) -> dict[str, Any]:
    """Plain lookups and updates: the rows each lookup returned, the gradients captured and the whole
    table after each step."""
    extra = {"step_count": "global"} if kind == "adam_global" else {}
    table = CollectiveEmbedding(n, dim, "t", INIT, unique=unique)
    opt = SparseOptimizer([table], config(kind.removesuffix("_global"), duplicate, **extra))
    result: dict[str, Any] = {}
    for s in range(steps):
        ids = torch.from_numpy(batch_ids(s, rank, n))
        rows = table(ids)
        (rows * torch.from_numpy(weights(s, rank, len(ids), dim))).sum().backward()
        result[f"rows{s}"] = rows.detach().numpy()
        result[f"grad{s}"] = table.pending()[1].numpy()
        opt.step()
        result[f"table{s}"] = _all_rows(table)
    return result


def bag_train(
    rank: int, world: int, out: Path, combiner: str, n: int, dim: int, steps: int
) -> dict[str, Any]:
    table = CollectiveEmbedding(n, dim, "t", INIT)
    opt = SparseOptimizer([table], config("adagrad"))
    result: dict[str, Any] = {}
    for s in range(steps):
        values, offsets = (torch.from_numpy(a) for a in bag_batch(s, rank, n))
        pooled = bag(table, values, offsets, combiner)  # type: ignore[arg-type]
        (pooled * torch.from_numpy(weights(s, rank, len(offsets) - 1, dim))).sum().backward()
        result[f"bags{s}"] = pooled.detach().numpy()
        opt.step()
        result[f"table{s}"] = _all_rows(table)
    # SOK's fixed layout gives what the ragged one gives: 2 samples x 2 slots, max_nnz 3, padded with -1
    padded = torch.tensor([[[1, 4, -1], [-1, -1, -1]], [[2, 2, 5], [0, -1, -1]]])
    result["slots"] = slot_bag(table, padded, combiner).detach().numpy()  # type: ignore[arg-type]
    ragged = bag(table, torch.tensor([1, 4, 2, 2, 5, 0]), torch.tensor([0, 2, 2, 5, 6]), combiner)  # type: ignore[arg-type]
    result["ragged"] = ragged.detach().numpy()
    table.clear()
    return result


def group_train(rank: int, world: int, out: Path, steps: int) -> dict[str, Any]:
    a = CollectiveEmbedding(23, 3, "a", INIT)
    b = CollectiveEmbedding(41, 6, "b", INIT)
    opt = SparseOptimizer([a, b], config("adam"))
    result: dict[str, Any] = {}
    for s in range(steps):
        ia, ib = torch.from_numpy(batch_ids(s, rank, 23)), torch.from_numpy(batch_ids(s + 10, rank, 41))
        ra, rb = group_lookup([a, b], [ia, ib])
        loss = (ra * torch.from_numpy(weights(s, rank, len(ia), 3))).sum()
        loss = loss + (rb * torch.from_numpy(weights(s, rank, len(ib), 6, salt=1))).sum()
        loss.backward()
        result[f"a{s}"], result[f"b{s}"] = ra.detach().numpy(), rb.detach().numpy()
        opt.step()
        result[f"table_a{s}"], result[f"table_b{s}"] = _all_rows(a), _all_rows(b)
    return result


def refusals(rank: int, world: int, out: Path, n: int, dim: int) -> dict[str, Any]:
    """A bad id on rank 1, then a NaN gradient on rank 0: every rank raises, nothing changes, and the
    ranks stay in step (the lookups after each refusal succeed)."""
    table = CollectiveEmbedding(n, dim, "t", INIT)
    opt = SparseOptimizer([table], config("adagrad"))
    messages = []
    ids = torch.tensor([n if rank == 1 else 0, 1])
    try:
        table(ids)
    except SparseInputError as exc:
        messages.append(f"{type(exc).__name__}: {exc}")
    rows = table(torch.tensor([0, rank]))
    grad = torch.ones_like(rows)
    if rank == 0:
        grad[1, 0] = float("nan")
    (rows * grad).sum().backward()
    try:
        opt.step()
    except SparseInputError as exc:
        messages.append(f"{type(exc).__name__}: {exc}")
    skip = CollectiveEmbedding(n, dim, "s", INIT)
    SparseOptimizer([skip], dataclasses.replace(config("sgd"), nonfinite="skip"))
    rows = skip(torch.tensor([0, 1]))
    (rows * grad[: len(rows)]).sum().backward()
    skip.apply_gradients(*skip.pending())
    return {"messages": np.array(messages), "table": _all_rows(table), "skip": _all_rows(skip)}


def save_then(rank: int, world: int, out: Path, ckdir: str, n: int, dim: int, kind: str) -> dict[str, Any]:
    """Two steps, then a checkpoint of the tables (adam with per-row steps and one other kind)."""
    extra = {"step_count": "global"} if kind == "adam_global" else {}
    table = CollectiveEmbedding(n, dim, "t", INIT)
    opt = SparseOptimizer([table], config(kind.removesuffix("_global"), **extra))
    for s in range(2):
        ids = torch.from_numpy(batch_ids(s, rank, n))
        (table(ids) * torch.from_numpy(weights(s, rank, len(ids), dim))).sum().backward()
        opt.step()
    write_checkpoint([table], Path(ckdir))
    return {"table": _all_rows(table)}


def freeze_then(
    rank: int, world: int, out: Path, ckdir: str, n: int, dim: int, kind: str, room: int
) -> dict[str, Any]:
    """Two steps, a checkpoint frozen (in host memory within `room` bytes, else written at once), a third
    step while it is written: the checkpoint must hold the rows of the second."""
    import torch.distributed as tdist

    from graphtrain.runtime import checkpoint as ckpt
    from graphtrain.runtime.collective import checkpoint as cc

    extra = {"step_count": "global"} if kind == "adam_global" else {}
    table = CollectiveEmbedding(n, dim, "t", INIT)
    opt = SparseOptimizer([table], config(kind.removesuffix("_global"), **extra))
    for s in range(3):
        if s == 2:
            rows = _all_rows(table)
            pieces, jobs = cc.freeze([table], Path(ckdir), room)
        ids = torch.from_numpy(batch_ids(s, rank, n))
        (table(ids) * torch.from_numpy(weights(s, rank, len(ids), dim))).sum().backward()
        opt.step()
    assert cc.Writer(Path(ckdir), jobs).join(60)
    tdist.barrier()
    assert cc.written(Path(ckdir), pieces)
    if rank == 0:
        ckpt.write_top(Path(ckdir), pieces, world)
    tdist.barrier()
    return {"table": rows, "frozen": np.array(len(jobs))}


def restore_then(rank: int, world: int, out: Path, ckdir: str, n: int, dim: int, kind: str) -> dict[str, Any]:
    """Restore into this world size, then one more step (its rows show that the state came back too)."""
    extra = {"step_count": "global"} if kind == "adam_global" else {}
    table = CollectiveEmbedding(n, dim, "t", {"kind": "zeros"})
    opt = SparseOptimizer([table], config(kind.removesuffix("_global"), **extra))
    assert restore(table, Path(ckdir))
    restored = _all_rows(table)
    ids = torch.from_numpy(batch_ids(2, rank, n))
    (table(ids) * torch.from_numpy(weights(2, rank, len(ids), dim))).sum().backward()
    opt.step()
    return {"restored": restored, "table": _all_rows(table)}


def reference_steps(
    cfg: OptimConfig, n: int, dim: int, batches: list[tuple[np.ndarray, np.ndarray]]
) -> list[np.ndarray]:
    """A single process holding the whole table: one step per (ids, grads) of all ranks concatenated;
    the table after each."""
    table = full_table(n, dim)
    state = make_state(cfg, n, dim)
    after = []
    for ids, grads in batches:
        sparse_step(cfg, table, state, torch.from_numpy(ids), torch.from_numpy(grads))
        after.append(table.numpy().copy())
    return after
