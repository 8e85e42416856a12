"""Incremental checkpoints, in one process: the pure rules (when a piece is a delta, what retention
keeps, where rows sit in a delta) and a shard's tables written as deltas by the background writer (the
rows changed since the last checkpoint, copy-on-write like a full piece), read back through their chain.
The shard servers' own tests: test_checkpoint_incremental.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.checkpoint import chain, increment
from graphtrain.runtime.checkpoint import snapshot as snap
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.storage.shard import before_write

ROWS, DIM = 5000, 8


@pytest.mark.parametrize(
    ("depth", "full_every", "changed", "complete", "delta"),
    [
        (0, 5, 10, True, True),  # a full base, few rows changed
        (3, 5, 10, True, True),  # the 4th delta: the chain is 5 long
        (4, 5, 10, True, False),  # a 5th delta would make it 6: full
        (0, 1, 10, True, False),  # full every checkpoint: never a delta
        (0, 5, 10, False, False),  # the base never completed (a shard failed it)
        (0, 5, 2500, True, True),  # half the rows changed: still a delta
        (0, 5, 2501, True, False),  # more: as big as a full piece, which also ends the chain
    ],
)
def test_when_a_piece_is_incremental(
    depth: int, full_every: int, changed: int, complete: bool, delta: bool
) -> None:
    assert increment.incremental(depth, full_every, changed, ROWS, complete) is delta


def test_retention_keeps_every_base_a_kept_checkpoint_reads() -> None:
    based_on = {"c": {"b"}, "b": {"a"}, "a": set(), "e": {"d"}, "f": set()}
    assert chain.keep_with_bases({"c", "f"}, based_on) == {"a", "b", "c", "f"}
    assert chain.keep_with_bases({"e"}, based_on) == {"d", "e"}
    assert chain.keep_with_bases(set(), based_on) == set()


def test_positions_of_rows_in_a_delta() -> None:
    held = np.array([2, 5, 9, 40], dtype=np.int64)
    local = np.array([0, 5, 40, 41, 9, 3], dtype=np.int64)
    assert increment.positions(held, local).tolist() == [1, 3, 2]
    assert increment.positions(np.empty(0, np.int64), local).tolist() == []


def test_before_write_reads_rows_back_only_when_something_tracks_them() -> None:
    """A GPU table's pushes pass their rows as a device tensor: nothing tracks a GPU table (its pieces are
    written whole), so they are never copied back (a tensor on the meta device cannot be); a host table
    being checkpointed takes tensors and arrays alike (gene-kg on a GPU shard server failed its first
    push during a checkpoint: its rows were converted with .numpy() before anything looked)."""
    st = shard()
    t = st.get("emb")
    assert t.snapshot is None and t.changed is None
    before_write(t, torch.arange(3, device="meta"))
    increment.plan(t, Path("/nonexistent/ck-1"), 5)  # from now on the table counts its changed rows
    assert t.changed is not None
    before_write(t, torch.tensor([1, 4]))
    before_write(t, np.array([7], dtype=np.int64))
    assert np.flatnonzero(t.changed.mask).tolist() == [1, 4, 7]


def shard(rows: int = ROWS) -> ShardTensors:
    st = ShardTensors(0)
    st.create("emb", rows, (DIM,), "float32", 0, rows, {"kind": "uniform", "low": -1, "high": 1})
    st.set_optimizer("emb", {"kind": "adam", "lr": 0.01, "step_count": "global"})
    return st


def grad(st: ShardTensors, ids: np.ndarray, seed: int, step: int) -> None:
    rng = np.random.default_rng(seed)
    st.push_grad(
        "emb", [(ids.astype(np.int64), rng.standard_normal((len(ids), DIM)).astype(np.float32))], step
    )


def take(st: ShardTensors, root: Path, name: str, full_every: int = 5, **kw: object) -> Path:
    """A background checkpoint of the shard, completed (checkpoint.json, LATEST) as the trainers do."""
    t = st.get("emb")
    bg = snap.BackgroundCheckpoint(name, root / name, [t], [], full_every=full_every, **kw)  # type: ignore[arg-type]
    assert bg.wait(60) and bg.status.state == "done", bg.status
    ckpt.write_top(root / name, bg.status.pieces, 1)
    ckpt.mark_latest(root, name)
    return root / name


def table(st: ShardTensors) -> dict[str, np.ndarray]:
    t = st.get("emb")
    return {"data": t.data.numpy().copy(), **{k: v.numpy().copy() for k, v in t.state.items()}}


def same(path: Path, expect: dict[str, np.ndarray]) -> None:
    assert np.array_equal(ckpt.export_table(path, "emb"), expect["data"])
    state = ckpt.export_state(path, "emb")
    assert state.keys() == {k for k in expect if k != "data"}
    for key, value in state.items():
        assert np.array_equal(value, expect[key]), key


def manifest(path: Path) -> dict:
    return json.loads(next((path / "emb").glob("rows-*/manifest.json")).read_text())


def row_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in (path / "emb").rglob("*.npy"))


def test_a_delta_holds_the_changed_rows_and_reads_back_whole(tmp_path: Path) -> None:
    st = shard()
    grad(st, np.arange(ROWS), 0, 1)
    full = take(st, tmp_path, "step-1")
    at1 = table(st)
    grad(st, np.array([3, 17, 4000, 17]), 1, 2)
    d1 = take(st, tmp_path, "step-2")
    at2 = table(st)
    grad(st, np.arange(100, 160), 2, 3)
    d2 = take(st, tmp_path, "step-3")
    at3 = table(st)

    assert "delta" not in manifest(full)
    assert manifest(d1)["delta"]["base"] == "step-1" and manifest(d1)["delta"]["depth"] == 1
    assert manifest(d2)["delta"]["base"] == "step-2" and manifest(d2)["delta"]["depth"] == 2
    assert np.load(next((d1 / "emb").glob("rows-*")) / chain.ROWS).tolist() == [3, 17, 4000]
    assert row_bytes(d1) < row_bytes(full) / 100
    assert ckpt.read_top(d2)["tensors"]["emb"][0]["base"] == "step-2"
    for path, expect in ((full, at1), (d1, at2), (d2, at3)):
        ckpt.verify_checkpoint(path)
        same(path, expect)  # the global Adam step included

    for lo, hi in ((0, 2000), (2000, ROWS)):  # into two shards: each its rows, through the chain
        other = ShardTensors(1)
        t = other.create("emb", ROWS, (DIM,), "float32", lo, hi)
        other.set_optimizer("emb", {"kind": "adam", "lr": 0.01, "step_count": "global"})
        assert ckpt.restore_into(d2, t)
        assert np.array_equal(t.data.numpy(), at3["data"][lo:hi])
        assert np.array_equal(t.state["exp_avg"].numpy(), at3["exp_avg"][lo:hi])
        assert int(t.state["step"][0]) == int(at3["step"][0]) == 3
        other.close()
    st.close()


def test_a_chain_is_bounded_and_a_restore_or_failure_starts_it_again(tmp_path: Path) -> None:
    st = shard()
    kinds = []
    for i in range(5):
        grad(st, np.arange(i, 50 + i), i, i + 1)
        kinds.append("delta" in manifest(take(st, tmp_path, f"step-{i}", full_every=3)))
    assert kinds == [False, True, True, False, True]

    st.restore(tmp_path / "step-3")  # its rows are a checkpoint's, not the last one armed
    grad(st, np.arange(5), 9, 10)
    assert "delta" not in manifest(take(st, tmp_path, "step-5"))

    grad(st, np.arange(5), 10, 11)
    failed = snap.BackgroundCheckpoint("step-6", tmp_path / "step-6", [st.get("emb")], [])
    assert failed.wait(60)  # written, but never completed: no checkpoint.json
    grad(st, np.arange(5), 11, 12)
    assert "delta" not in manifest(take(st, tmp_path, "step-7"))  # its base would be step-6
    grad(st, np.arange(5000), 12, 13)  # every row
    assert "delta" not in manifest(take(st, tmp_path, "step-8"))
    st.close()


def test_a_push_during_a_delta_write_is_in_the_next_checkpoint_only(tmp_path: Path) -> None:
    rows, chunk = 40_000, 16 << 10  # 96 bytes a row (the Adam step is one): the delta is 30 chunks
    st = shard(rows)
    grad(st, np.arange(rows), 0, 1)
    take(st, tmp_path, "step-1")
    changed = np.arange(0, rows, 8)
    grad(st, changed, 1, 2)
    at2 = table(st)
    t = st.get("emb")
    bg = snap.BackgroundCheckpoint(
        "step-2", tmp_path / "step-2", [t], [], 4 * chunk, rate=8 * chunk, chunk_bytes=chunk
    )
    held = t.snapshot
    grad(st, np.arange(rows), 2, 3)  # every row: the delta's chunks are staged or written through first
    assert bg.running, "the write ended before the push: nothing tested"
    assert bg.wait(60) and bg.status.state == "done", bg.status
    assert held.preserved[snap.STAGED] > 0 and held.preserved[snap.WRITTEN] > 0, held.preserved
    assert bg.status.incremental == 1 and bg.status.row_bytes == len(changed) * 96
    ckpt.write_top(tmp_path / "step-2", bg.status.pieces, 1)
    same(tmp_path / "step-2", at2)
    st.close()


def test_a_delta_whose_base_is_gone_or_changed_is_refused_and_restore_falls_back(tmp_path: Path) -> None:
    st = shard()
    for i in range(3):
        grad(st, np.arange(10 * i, 10 * i + 20), i, i + 1)
        take(st, tmp_path, f"step-{i}")
    assert [("delta" in manifest(tmp_path / f"step-{i}")) for i in range(3)] == [False, True, True]

    top = tmp_path / "step-1" / ckpt.TOP
    top.write_text(top.read_text().replace('"num_shards": 1', '"num_shards": 1 '))  # another checkpoint now
    latest, skipped = ckpt.latest_verified(tmp_path)
    assert latest == tmp_path / "step-1"  # itself whole; the delta on what it was is not
    assert skipped[0] == (
        "checkpoint step-2 skipped: checkpoint step-2: its piece of 'emb' rows [0, 5000) is a delta on "
        f"step-1, which changed since (its {ckpt.TOP} is not the one the delta was taken on)"
    )
    shutil.rmtree(tmp_path / "step-1")
    with pytest.raises(DataError, match=r"is a delta on step-1, which is missing or incomplete"):
        ckpt.export_table(tmp_path / "step-2", "emb")
    assert ckpt.latest_verified(tmp_path)[0] == tmp_path / "step-0"
    st.close()


def test_prune_keeps_the_bases_of_the_checkpoints_it_keeps(tmp_path: Path) -> None:
    st = shard()
    for i in range(4):
        grad(st, np.arange(10 * i, 10 * i + 20), i, i + 1)
        take(st, tmp_path, f"step-{i}", full_every=3)  # full, delta, delta, full
    ckpt.mark_best(tmp_path, "step-2")
    assert ckpt.prune(tmp_path, 1) == []  # BEST (step-2) reads step-1 and step-0
    (tmp_path / ckpt.BEST).unlink()
    assert ckpt.prune(tmp_path, 1) == ["step-0", "step-1", "step-2"]
    st.close()
