"""A damaged latest checkpoint (a flipped byte, a missing piece, a changed trainer file, rows of NaN a
restore refuses under hashes made to match) is skipped for the newest one that checks out, with one line
naming it and the reason; a shard server started with --restore latest restores that one."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.data.cache import read_json, sha256_file, write_json
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding, PartitionBook
from tests.runtime.conftest import TOKEN, servers

ROWS, DIM = 3000, 8
CONFIG = OptimConfig("adagrad", 0.1)
OLDER, NEWER = "step-000000010", "step-000000020"


def all_rows(client) -> np.ndarray:
    return client.pull("emb", np.arange(ROWS), PartitionBook.even(ROWS, 1).bounds, (DIM,), np.float32)


def two_checkpoints(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """Checkpoints OLDER and NEWER (LATEST) of one table, as the trainers write them (a trainer file
    beside the pieces, its sha256 in checkpoint.json); returns the table's rows at each."""
    alone = kvstore.standalone(1, checkpoint_root=root)
    emb = DistEmbedding(ROWS, DIM, "emb", client=alone)
    opt = SparseOptimizer([emb], CONFIG)
    rows = []
    for tag in (OLDER, NEWER):
        ids = torch.arange(0, ROWS, 7)
        emb(ids).sum().backward()
        opt.step()
        (root / tag).mkdir()
        (root / tag / "trainer.json").write_text('{"epoch": 1, "step": 10}\n')
        files = {"trainer.json": sha256_file(root / tag / "trainer.json")}
        alone.checkpoint(tag, extra={"files": files}, root=root)
        ckpt.mark_latest(root, tag)
        rows.append(all_rows(alone))
    assert not np.array_equal(rows[0], rows[1])
    return rows[0], rows[1]


def data_file(root: Path, tag: str) -> Path:
    return next((root / tag / "emb").glob("rows-*")) / "data.npy"


def flip_a_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))


def rehashed(piece: Path, change) -> None:
    """`change(manifest)` applied to a piece's manifest, each of its files' sha256 recorded again: a
    hand edit the hashes no longer show."""
    manifest = read_json(piece / ckpt.MANIFEST)
    change(manifest)
    manifest["files"] = {name: sha256_file(piece / name) for name in manifest["files"]}
    write_json(piece / ckpt.MANIFEST, manifest)


def plant_nan(root: Path, tag: str, row: int = 7) -> None:
    """Row `row` of checkpoint `tag`'s table made NaN, its hash recorded again."""
    path = data_file(root, tag)
    rows = np.load(path)
    rows[row, 3] = np.nan
    np.save(path, rows)
    rehashed(path.parent, lambda manifest: None)


def bad_round_steps(root: Path, tag: str) -> None:
    rehashed(data_file(root, tag).parent, lambda manifest: manifest.update(round_steps=-1))


def test_an_intact_latest_is_taken(ckroot: Path) -> None:
    two_checkpoints(ckroot)
    path, skipped = ckpt.latest_verified(ckroot)
    assert path is not None and path.name == NEWER and skipped == []


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda root: flip_a_byte(data_file(root, NEWER)), "does not match the recorded"),
        (lambda root: shutil.rmtree(data_file(root, NEWER).parent), "not found"),
        (lambda root: flip_a_byte(root / NEWER / "trainer.json"), "trainer.json"),
        (lambda root: (root / NEWER / ckpt.TOP).unlink(), "not a complete checkpoint"),
        (lambda root: plant_nan(root, NEWER), "1 row(s) hold NaN or infinity (first: row 7)"),
        (lambda root: bad_round_steps(root, NEWER), "round_steps must be a whole number"),
    ],
    ids=["flipped-byte", "missing-piece", "trainer-file", "no-marker", "nan-row-rehashed", "round-steps"],
)
def test_a_damaged_latest_falls_back_to_the_previous_one(ckroot: Path, damage, reason: str) -> None:
    two_checkpoints(ckroot)
    damage(ckroot)
    path, skipped = ckpt.latest_verified(ckroot)
    assert path is not None and path.name == OLDER
    assert len(skipped) == 1 and NEWER in skipped[0] and reason in skipped[0], skipped
    assert "\n" not in skipped[0]


def test_no_intact_checkpoint_is_an_error_not_a_fresh_start(ckroot: Path) -> None:
    two_checkpoints(ckroot)
    flip_a_byte(data_file(ckroot, NEWER))
    flip_a_byte(data_file(ckroot, OLDER))
    with pytest.raises(DataError, match=f"{OLDER}.*does not match"):
        ckpt.latest_verified(ckroot)


def test_rows_of_nan_in_every_checkpoint_are_an_error_naming_each(ckroot: Path) -> None:
    """The only checkpoints both refused for their rows: one line naming both, nothing deleted."""
    two_checkpoints(ckroot)
    plant_nan(ckroot, NEWER)
    plant_nan(ckroot, OLDER, row=11)
    before = {p: p.read_bytes() for p in ckroot.rglob("*") if p.is_file()}
    with pytest.raises(DataError) as refused:
        ckpt.latest_verified(ckroot)
    said = str(refused.value)
    assert "\n" not in said and "no checkpoint at or before LATEST checks out" in said, said
    assert f"checkpoint {NEWER} skipped" in said and "(first: row 7)" in said, said
    assert f"checkpoint {OLDER} skipped" in said and "(first: row 11)" in said, said
    assert {p: p.read_bytes() for p in ckroot.rglob("*") if p.is_file()} == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda root: flip_a_byte(data_file(root, NEWER)), "does not match the recorded"),
        (lambda root: plant_nan(root, NEWER), "hold NaN or infinity"),
    ],
    ids=["flipped-byte", "nan-row-rehashed"],
)
def test_a_server_restores_the_newest_intact_checkpoint(ckroot: Path, damage, reason: str) -> None:
    older, _ = two_checkpoints(ckroot)
    damage(ckroot)
    with servers(1, ckroot, "--restore", "latest") as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=20)
        DistEmbedding(ROWS, DIM, "emb", client=client, init={"kind": "zeros"})
        rows = all_rows(client)
        client.close()
    assert np.array_equal(rows, older)
    log = srv[0].log_text()
    said = [line for line in log.splitlines() if NEWER in line]
    assert len(said) == 1 and reason in said[0], log[-2000:]
