"""Incremental checkpoints of real shard servers: after a full checkpoint, one taken when training touched
a few rows writes those rows alone (a small fraction of the bytes) and restores bit for bit, into the
same shards or into another number of them; a flipped byte in a delta, or a base gone, is refused with
one line and --restore latest falls back to the newest checkpoint that reads whole; a shard killed while
a delta is written leaves no piece of it, the previous complete checkpoint restores, and the chain
starts again with a full piece."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.checkpoint import chain
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding, PartitionBook
from tests.runtime.conftest import TOKEN, servers, start_server
from tests.runtime.kvstore.test_checkpoint_background import all_rows, complete, same_tables

ROWS, DIM = 100_000, 16
CONFIG = OptimConfig("adam", 0.01, eps=1e-8, step_count="row")


def step(emb: DistEmbedding, opt: SparseOptimizer, ids: torch.Tensor, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    (emb(ids) * torch.randn(len(ids), DIM, generator=g)).sum().backward()
    opt.step()


def trained(srv: list, **kw: float) -> tuple[kvstore.KVClient, DistEmbedding, SparseOptimizer]:
    """A client of the servers `srv`, the table on them, and its optimizer after one step on every row."""
    client = kvstore.connect([s.address for s in srv], TOKEN, **kw)
    emb = DistEmbedding(ROWS, DIM, "emb", client=client)
    opt = SparseOptimizer([emb], CONFIG)
    step(emb, opt, torch.arange(ROWS), seed=1)
    return client, emb, opt


def restarted(root: Path, name: str) -> tuple[np.ndarray, list[str]]:
    """The rows a shard server started with --restore latest comes back with, and its lines about
    checkpoint `name`."""
    with servers(1, root, "--restore", "latest") as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=30)
        DistEmbedding(ROWS, DIM, "emb", client=client).attach(CONFIG)
        rows = all_rows(client, PartitionBook.even(ROWS, 1))
        client.close()
    return rows, [line for line in srv[0].log_text().splitlines() if f"checkpoint {name} skipped" in line]


def take(client: kvstore.KVClient, root: Path, name: str) -> Path:
    """A background checkpoint, completed and made LATEST as rank 0 does."""
    client.checkpoint_begin(name)
    path = complete(client, root, name)
    ckpt.mark_latest(root, name)
    return path


def deltas(path: Path) -> list[bool]:
    """Whether each piece of the table is incremental, in row order."""
    return ["delta" in m for m, _ in ckpt.pieces_of(path, "emb")]


def npy_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in (path / "emb").rglob("*.npy"))


def flip_a_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 1
    path.write_bytes(bytes(raw))


@pytest.mark.timeout(300)
def test_a_delta_writes_the_rows_touched_and_restores_bit_for_bit_into_2_or_3_shards(ckroot: Path) -> None:
    with servers(2, ckroot) as srv:
        client, emb, opt = trained(srv, timeout=30)
        full = take(client, ckroot, "step-000000001")
        step(emb, opt, torch.tensor([5, 17, 60_000, 99_999, 17]), seed=2)  # a few rows, on both shards
        client.checkpoint("ref", root=ckroot)  # written in full before it answers: the same step
        saved = all_rows(client, emb.table.book)
        inc = take(client, ckroot, "step-000000002")
        assert deltas(full) == [False, False] and deltas(inc) == [True, True]
        assert npy_bytes(inc) < npy_bytes(full) / 1000, (npy_bytes(inc), npy_bytes(full))
        same_tables(inc, ckroot / "ref")  # rows and every optimizer state, bit for bit

        step(emb, opt, torch.arange(0, ROWS, 3), seed=3)  # moves on, then comes back
        client.restore(inc.name)
        assert np.array_equal(all_rows(client, emb.table.book), saved)
        client.close()

    with servers(3, ckroot, "--restore", "latest") as srv:  # another shard count, from the chain
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=30)
        emb = DistEmbedding(ROWS, DIM, "emb", client=client)
        emb.attach(CONFIG)
        assert np.array_equal(all_rows(client, emb.table.book), saved)
        client.checkpoint("ref3", root=ckroot)
        same_tables(ckroot / "ref3", ckroot / "ref")
        client.close()


@pytest.mark.timeout(300)
def test_a_damaged_delta_or_a_missing_base_falls_back_with_one_line(ckroot: Path) -> None:
    names = [f"step-00000000{i}" for i in (1, 2, 3)]
    rows = []
    with servers(1, ckroot) as srv:
        client, emb, opt = trained(srv, timeout=30)
        for i, name in enumerate(names):
            if i:
                step(emb, opt, torch.arange(i, ROWS, 500), seed=i)
            take(client, ckroot, name)
            rows.append(all_rows(client, emb.table.book))
        client.close()
    assert [deltas(ckroot / n) for n in names] == [[False], [True], [True]]

    newest = next((ckroot / names[2] / "emb").glob("rows-*")) / "data.npy"
    flip_a_byte(newest)
    back, said = restarted(ckroot, names[2])
    assert np.array_equal(back, rows[1])
    assert len(said) == 1 and "does not match the recorded" in said[0], said

    flip_a_byte(newest)  # whole again; now its base goes
    shutil.rmtree(ckroot / names[1])
    back, said = restarted(ckroot, names[2])
    assert np.array_equal(back, rows[0])
    assert len(said) == 1, said
    assert said[0].endswith(
        f"checkpoint {names[2]} skipped: checkpoint {names[2]}: its piece of 'emb' rows [0, {ROWS}) is a "
        f"delta on {names[1]}, which is missing or incomplete (no {chain.TOP})"
    ), said[0]


@pytest.mark.timeout(300)
def test_a_shard_killed_mid_delta_restores_the_previous_checkpoint_and_the_next_is_full(ckroot: Path) -> None:
    slow = ("--restore", "latest", "--checkpoint-rate-mb", "1")
    with servers(2, ckroot, *slow) as srv:
        client, emb, opt = trained(srv, timeout=10, retries=1)
        take(client, ckroot, "step-000000001")
        saved = all_rows(client, emb.table.book)
        step(emb, opt, torch.arange(0, ROWS, 4), seed=2)  # a quarter of the rows: ~2.4 MB a shard

        client.checkpoint_begin("step-000000002")
        assert client.checkpoint_done("step-000000002") is None, "written before the kill: nothing tested"
        victim = srv[1]
        victim.kill()
        lo = int(emb.table.book.bounds[1])
        assert not ckpt.piece_dir(ckroot / "step-000000002", "emb", lo, ROWS).exists()
        assert ckpt.latest_verified(ckroot) == (ckroot / "step-000000001", [])

        srv[1] = start_server(1, ckroot, *slow, port=victim.port)
        DistEmbedding(ROWS, DIM, "emb", client=client)  # re-create = restore on the new server
        emb.attach(CONFIG)
        assert np.array_equal(all_rows(client, emb.table.book)[lo:], saved[lo:])
        client.restore("step-000000001")  # the survivor too: the trainers resume from there
        step(emb, opt, torch.arange(0, ROWS, 50), seed=3)
        after = take(client, ckroot, "step-000000003")
        assert deltas(after) == [False, False]  # the base armed last never completed
        client.checkpoint("ref", root=ckroot)
        same_tables(after, ckroot / "ref")
        client.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bad", ["past-the-piece", "negative", "float", "descending"])
def test_a_delta_whose_rows_are_not_the_pieces_is_refused_in_one_line(ckroot: Path, bad: str) -> None:
    """rows.npy's sha256 proves it is the file written, not that it holds the piece's rows: rows past
    the piece were skipped (the base's stale values exported with exit 0), a float array ended in an
    IndexError from numpy."""
    from graphtrain.runtime.data.cache import read_json, sha256_file, write_json
    from graphtrain.runtime.errors import DataError

    names = ["step-000000001", "step-000000002"]
    with servers(1, ckroot) as srv:
        client, emb, opt = trained(srv, timeout=30)
        take(client, ckroot, names[0])
        step(emb, opt, torch.arange(1, ROWS, 500), seed=1)
        take(client, ckroot, names[1])
        client.close()
    piece = next((ckroot / names[1] / "emb").glob("rows-*"))
    rows = np.load(piece / chain.ROWS)
    changed = {
        "past-the-piece": rows + ROWS,
        "negative": rows - ROWS,
        "float": rows.astype(np.float64),
        "descending": rows[::-1].copy(),
    }[bad]
    np.save(piece / chain.ROWS, changed)
    manifest = read_json(piece / "manifest.json")
    files = {**manifest["files"], chain.ROWS: sha256_file(piece / chain.ROWS)}
    write_json(piece / "manifest.json", {**manifest, "files": files})
    for check in (ckpt.verify_checkpoint, lambda r: ckpt.export_table(r, "emb", verify=False)):
        with pytest.raises(DataError, match=r"rows.npy: (holds float64|not ascending rows within)"):
            check(ckroot / names[1])
