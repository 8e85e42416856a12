"""`graphtrain run --resume` past a checkpoint whose hashes check out but whose rows a restore refuses.

A row made NaN in the latest checkpoint, its sha256 recorded again (a hand edit, or a bad write whose
hash was taken after it), is refused by every restore (NaN is never trained into a table). The launcher,
the trainers and the shard servers each pick the checkpoint to resume from with one decision
(checkpoint.latest_verified), which skipped a changed byte for the checkpoint before it but passed these
rows (and a dynamic vocabulary's key twice), so the shard servers failed the run on them. Now such a
checkpoint is skipped as a damaged one, with one line naming it and the row (or the piece), for
server-held and collective tables alike; it is kept (set aside under checkpoints/.replaced/ when the
resumed run writes its step again). With no checkpoint left that checks out, the resume fails in one
line, changing nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.data.cache import read_json, sha256_file, write_json
from graphtrain.runtime.storage.keyspace import KEYS
from graphtrain.runtime.train.checkpoints import REPLACED
from tests.runtime.launch.test_run import (
    complete,
    graph_file,
    launch,
    nations,
    sage_spec,
    status,
    tree_hashes,
    write_spec,
)

__all__ = ["graph_file"]  # test_run's fixture, used here


def plant_nan(checkpoint: Path, table: str, row: int = 0) -> Path:
    """Row `row` of the first piece of `table` in `checkpoint` made NaN, the piece's sha256 of it
    recorded again: the hashes check out. Returns the piece's data file."""
    piece = sorted((checkpoint / table).glob("rows-*"))[0]
    rows = np.load(piece / "data.npy")
    rows[row, 0] = np.nan
    np.save(piece / "data.npy", rows)
    manifest = read_json(piece / ckpt.MANIFEST)
    manifest["files"]["data.npy"] = sha256_file(piece / "data.npy")
    write_json(piece / ckpt.MANIFEST, manifest)
    return piece / "data.npy"


def two_newest(root: Path) -> tuple[Path, Path]:
    """The latest checkpoint and the complete one before it."""
    latest = ckpt.resolve_latest(root)
    assert latest is not None
    older = max(p.name for p in root.iterdir() if p.is_dir() and p.name < latest.name)
    return latest, root / older


def plant_duplicate_key(checkpoint: Path, table: str) -> Path:
    """A dynamic table's first piece in `checkpoint` given its first key twice (the piece's own: shard
    0's), keys.npy's sha256 recorded again: a restore refuses it (storage/keyspace.py piece_keys)."""
    piece = sorted((checkpoint / table).glob("rows-*"))[0]
    keys = np.load(piece / KEYS)
    keys[1] = keys[0]
    np.save(piece / KEYS, keys)
    manifest = read_json(piece / ckpt.MANIFEST)
    manifest["files"][KEYS] = sha256_file(piece / KEYS)
    write_json(piece / ckpt.MANIFEST, manifest)
    return piece


def resumed_past(
    run_dir: Path,
    doc: dict,
    table: str,
    epochs: int,
    plant: Callable[[Path, str], Path] = plant_nan,
    said: str = "1 row(s) hold NaN or infinity",
) -> None:
    """`plant` (a NaN) in `run_dir`'s latest checkpoint of `table`, resume `doc` to `epochs` epochs with
    `graphtrain run --resume`: it trains on from the checkpoint before, saying why (`said`) in one line,
    and the refused checkpoint is kept, byte for byte."""
    root = run_dir / "checkpoints"
    refused, older = two_newest(root)
    plant(refused, table)
    kept = tree_hashes(refused)
    doc["spec"]["training"]["epochs"] = epochs
    write_spec(doc, run_dir)
    done = complete(run_dir, "--resume", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if refused.name in line]  # [run] lines: stderr
    assert len(lines) == 1, done.stderr
    assert f"checkpoint {refused.name} skipped" in lines[0] and said in lines[0], lines
    assert re.search(rf"resuming from step \d+ \(epoch \d+, checkpoint {older.name}\)", done.stderr)
    st = status(run_dir)
    assert st["phase"] == "Succeeded" and st["progress"]["epoch"] == epochs, st
    # the resumed run wrote the refused one's step again: the refused one is kept aside, unchanged
    assert (refused / ckpt.TOP).exists() and ckpt.read_top(refused)["trainer"]["step"] > 0
    assert tree_hashes(root / REPLACED / refused.name) == kept
    ckpt.verify_checkpoint(refused)  # the one written again is whole


@pytest.mark.timeout(600)
def test_resume_skips_a_latest_checkpoint_of_nan_rows_under_valid_hashes(
    graph_file: Path, tmp_path: Path
) -> None:
    """2 shard servers x 2 trainers, a server-held node embedding."""
    run_dir = tmp_path / "run"
    doc = sage_spec(graph_file, epochs=2)
    launch(doc, run_dir).run()
    resumed_past(run_dir, doc, "node", epochs=3)


@pytest.mark.timeout(600)
def test_resume_skips_a_collective_tables_nan_rows_under_valid_hashes(tmp_path: Path) -> None:
    """TransE on Nations, its tables on the 2 trainers (sharding: collective)."""
    doc = nations(epochs=2)
    for t in doc["spec"]["embeddings"]:
        t["sharding"] = "collective"
    run_dir = tmp_path / "run"
    launch(doc, run_dir).run()
    resumed_past(run_dir, doc, "entity", epochs=3)


@pytest.mark.timeout(600)
def test_resume_skips_a_dynamic_tables_key_twice_under_valid_hashes(tmp_path: Path) -> None:
    """TransE on Nations, a dynamic entity vocabulary on the 2 shard servers: the latest checkpoint's
    first piece holds a key twice, which a shard server's restore refuses (it failed the run): skipped."""
    doc = nations(epochs=2)
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 16}
    run_dir = tmp_path / "run"
    launch(doc, run_dir).run()
    resumed_past(
        run_dir, doc, "entity", 3, plant_duplicate_key, "rows-000000000000-000000000008: a key appears twice"
    )


@pytest.mark.timeout(400)
def test_no_checkpoint_left_to_resume_is_one_line_and_changes_nothing(
    graph_file: Path, tmp_path: Path
) -> None:
    """Both checkpoints refused (the latest for a flipped byte, the one before for a NaN row): exit 1,
    one line naming each and why, no traceback, every file of the run as it was."""
    run_dir = tmp_path / "run"
    doc = sage_spec(graph_file, epochs=2)
    doc["spec"]["trainers"]["replicas"] = 1
    launch(doc, run_dir, standalone=True).run()
    root = run_dir / "checkpoints"
    latest, older = two_newest(root)
    piece = sorted((latest / "node").glob("rows-*"))[0] / "data.npy"
    raw = bytearray(piece.read_bytes())
    raw[-1] ^= 1
    piece.write_bytes(bytes(raw))
    plant_nan(older, "node", row=5)
    before = tree_hashes(root)
    done = complete(run_dir, "--resume", "--standalone", timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert f"{latest.name} skipped" in lines[0] and "does not match the recorded" in lines[0], lines
    assert f"{older.name} skipped" in lines[0] and "hold NaN or infinity (first: row 5)" in lines[0], lines
    assert tree_hashes(root) == before
