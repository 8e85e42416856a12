"""Checkpoints written in the background (checkpoint/snapshot.py): a push that arrives while a checkpoint is
being written is not in it but in the next; the staging memory stays within its bound (pushes write
chunks through past it); a shard killed mid-write leaves no piece of it and comes back with the previous
complete checkpoint; a byte changed in a background-written file is refused on load.

The writers are slowed (--checkpoint-rate-mb) so that the pushes land inside the write: each test
asserts that the write was still going on after them, so none can pass without exercising it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.checkpoint import snapshot as snap
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding, PartitionBook
from tests.runtime.conftest import TOKEN, servers, start_server

ROWS, DIM = 100_000, 16  # ~10 MB of rows and Adam state per shard of 2: 3 chunks of 4 MiB each
CONFIG = OptimConfig("adam", 0.01, eps=1e-8, step_count="row")
MIB = 1 << 20


def train(emb: DistEmbedding, opt: SparseOptimizer, steps: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ids = torch.randint(0, ROWS, (2000,), generator=g)
        (emb(ids) * torch.randn(2000, DIM, generator=g)).sum().backward()
        opt.step()


def all_rows(client: kvstore.KVClient, book: PartitionBook) -> np.ndarray:
    return client.pull("emb", np.arange(ROWS), book.bounds, (DIM,), np.float32)


def written(client: kvstore.KVClient, path: str, timeout: float = 120.0) -> list[dict]:
    """The pieces of the background checkpoint `path`, once every shard has written it."""
    deadline = time.monotonic() + timeout
    while (pieces := client.checkpoint_done(path)) is None:
        assert time.monotonic() < deadline, f"checkpoint {path} not written in {timeout} s"
        time.sleep(0.05)
    return pieces


def complete(client: kvstore.KVClient, root: Path, path: str) -> Path:
    ckpt.write_top(root / path, written(client, path), client.num_shards)
    ckpt.verify_checkpoint(root / path)
    return root / path


def same_tables(a: Path, b: Path) -> None:
    assert np.array_equal(ckpt.export_table(a, "emb"), ckpt.export_table(b, "emb"))
    sa, sb = ckpt.export_state(a, "emb"), ckpt.export_state(b, "emb")
    assert sa.keys() == sb.keys()
    for key in sa:
        assert np.array_equal(sa[key], sb[key]), key


@pytest.mark.timeout(300)
def test_a_push_during_a_background_write_is_in_the_next_checkpoint_only(ckroot: Path) -> None:
    # 9 MiB of staging: the writer's 4 MiB chunk and one staged chunk; a push's other chunks go through
    slow = ("--checkpoint-rate-mb", "1", "--checkpoint-staging-mb", "9")
    with servers(2, ckroot, *slow) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=30)
        emb = DistEmbedding(ROWS, DIM, "emb", client=client)
        opt = SparseOptimizer([emb], CONFIG)
        train(emb, opt, 3, seed=1)
        client.checkpoint("ref", root=ckroot)  # written before it answers: the tables at step 3
        at3 = all_rows(client, emb.table.book)
        client.checkpoint_begin("bg3")
        train(emb, opt, 2, seed=2)  # pushes while bg3 is written
        assert client.checkpoint_done("bg3") is None, "the write ended before the pushes: nothing tested"
        at5 = all_rows(client, emb.table.book)
        assert not np.array_equal(at5, at3)
        same_tables(complete(client, ckroot, "bg3"), ckroot / "ref")  # the pushes are not in it

        statuses = [a.result for a in client.each("checkpoint_status", None, {"path": "bg3"})]
        for s in statuses:
            assert s["state"] == "done" and 0 < s["staged_peak"] <= 9 * MIB, s

        client.checkpoint_begin("bg5")
        bg5 = complete(client, ckroot, "bg5")
        assert np.array_equal(ckpt.export_table(bg5, "emb"), at5)  # they are in the next one
        client.checkpoint("ref5", root=ckroot)
        same_tables(bg5, ckroot / "ref5")
        client.close()


@pytest.mark.timeout(120)
def test_staging_stays_within_its_bound_and_the_snapshot_is_the_armed_step(tmp_path: Path) -> None:
    rows, chunk = 20_000, 64 << 10  # 200 bytes a row (data, m, v, step): 61 chunks of 64 KiB
    st = ShardTensors(0)
    t = st.create("emb", rows, (DIM,), "float32", 0, rows, {"kind": "uniform", "low": -1, "high": 1})
    st.set_optimizer("emb", {"kind": "adam", "lr": 0.01, "step_count": "row"})
    rng = np.random.default_rng(0)
    ids = np.arange(rows, dtype=np.int64)
    st.push_grad("emb", [(ids, rng.standard_normal((rows, DIM)).astype(np.float32))])
    before = {"data": t.data.clone(), **{k: v.clone() for k, v in t.state.items()}}

    budget = 8 * chunk
    # slow enough that the push below comes while most chunks are still to be written
    bg = snap.BackgroundCheckpoint("ck", tmp_path / "ck", [t], [], budget, rate=16 * chunk, chunk_bytes=chunk)
    table = t.snapshot
    st.push_grad("emb", [(ids, rng.standard_normal((rows, DIM)).astype(np.float32))])  # every chunk
    after = t.data.clone()
    assert bg.running, "the write ended before the push: nothing tested"
    assert bg.wait(60) and bg.status.state == "done", bg.status
    assert table.preserved[snap.STAGED] > 0 and table.preserved[snap.WRITTEN] > 0, table.preserved
    assert bg.budget.peak <= budget and bg.status.staged_peak == bg.budget.peak
    assert bg.budget.used == 0 and t.snapshot is None  # all given back; pushes preserve no more

    ckpt.write_top(tmp_path / "ck", bg.status.pieces, 1)
    ckpt.verify_checkpoint(tmp_path / "ck")
    assert np.array_equal(ckpt.export_table(tmp_path / "ck", "emb"), before["data"].numpy())
    state = ckpt.export_state(tmp_path / "ck", "emb")
    for key in t.state:
        assert np.array_equal(state[key], before[key].numpy()), key
    assert not torch.equal(after, before["data"])
    st.close()


@pytest.mark.timeout(300)
def test_a_shard_killed_mid_write_restores_the_previous_complete_checkpoint(ckroot: Path) -> None:
    slow = ("--restore", "latest", "--checkpoint-rate-mb", "1")
    with servers(2, ckroot, *slow) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=10, retries=1)
        emb = DistEmbedding(ROWS, DIM, "emb", client=client)
        opt = SparseOptimizer([emb], CONFIG)
        train(emb, opt, 3, seed=3)
        client.checkpoint_begin("step3")
        complete(client, ckroot, "step3")
        ckpt.mark_latest(ckroot, "step3")
        saved = all_rows(client, emb.table.book)
        train(emb, opt, 2, seed=4)

        client.checkpoint_begin("step5")
        train(emb, opt, 1, seed=5)  # a push during the write
        assert client.checkpoint_done("step5") is None, "the write ended before the kill: nothing tested"
        victim = srv[1]
        victim.kill()
        book = emb.table.book
        lo, hi = int(book.bounds[1]), ROWS
        assert not ckpt.piece_dir(ckroot / "step5", "emb", lo, hi).exists()  # absent, not half there
        assert not (ckroot / "step5" / ckpt.TOP).exists()
        assert ckpt.latest_verified(ckroot) == (ckroot / "step3", [])

        srv[1] = start_server(1, ckroot, *slow, port=victim.port)
        with pytest.raises(GraphtrainError, match="writing no checkpoint 'step5'"):
            written(client, "step5")  # the restarted shard lost it: it can never be completed
        DistEmbedding(ROWS, DIM, "emb", client=client)  # re-create (attach) = restore on the new server
        emb.attach(CONFIG)
        rows = all_rows(client, book)
        assert np.array_equal(rows[lo:], saved[lo:]), "the restarted shard has step 3's rows"
        train(emb, opt, 1, seed=6)  # and training goes on
        client.close()


def test_a_changed_byte_in_a_background_checkpoint_is_refused(ckroot: Path) -> None:
    alone = kvstore.standalone(2, checkpoint_root=ckroot)
    emb = DistEmbedding(2000, 8, "emb", client=alone)
    opt = SparseOptimizer([emb], CONFIG)
    g = torch.Generator().manual_seed(7)
    for name in ("step-000000001", "step-000000002"):
        ids = torch.randint(0, 2000, (300,), generator=g)
        (emb(ids) * torch.randn(300, 8, generator=g)).sum().backward()
        opt.step()
        alone.checkpoint_begin(name)
        complete(alone, ckroot, name)
        ckpt.mark_latest(ckroot, name)
    piece = next((ckroot / "step-000000002" / "emb").glob("rows-*"))
    for file in ("data.npy", "state.exp_avg_sq.npy"):
        path = piece / file
        raw = bytearray(path.read_bytes())
        raw[-5] ^= 1
        path.write_bytes(bytes(raw))
        with pytest.raises(GraphtrainError, match="does not match the recorded"):
            alone.restore("step-000000002")
        latest, skipped = ckpt.latest_verified(ckroot)
        assert latest == ckroot / "step-000000001" and "step-000000002 skipped" in skipped[0], skipped
        raw[-5] ^= 1
        path.write_bytes(bytes(raw))
    assert ckpt.latest_verified(ckroot) == (ckroot / "step-000000002", [])


@pytest.mark.timeout(120)
def test_a_half_tables_background_checkpoint_keeps_the_armed_steps_rounding_count(tmp_path: Path) -> None:
    """The count is the rows' (checkpoint/pieces.py: round_steps): a step while the write goes on counts
    on the live table, not in the checkpoint, which a resumed run continues from."""
    import json

    rows, chunk = 20_000, 64 << 10
    st = ShardTensors(0)
    t = st.create("emb", rows, (DIM,), "bfloat16", 0, rows, {"kind": "uniform", "low": -1, "high": 1})
    st.set_optimizer("emb", {"kind": "adagrad", "lr": 0.01})
    rng = np.random.default_rng(0)
    ids = np.arange(rows, dtype=np.int64)
    st.push_grad("emb", [(ids, rng.standard_normal((rows, DIM)).astype(np.float32))])
    bg = snap.BackgroundCheckpoint(
        "ck", tmp_path / "ck", [t], [], 8 * chunk, rate=16 * chunk, chunk_bytes=chunk
    )
    st.push_grad("emb", [(ids, rng.standard_normal((rows, DIM)).astype(np.float32))])
    assert bg.running, "the write ended before the push: nothing tested"
    assert bg.wait(60) and bg.status.state == "done", bg.status
    manifest = json.loads(next((tmp_path / "ck" / "emb").glob("*/manifest.json")).read_text())
    assert (manifest["round_steps"], t.steps) == (1, 2)
    st.close()
