"""What a restore refuses in a checkpoint whose hashes check out, verify_checkpoint refuses in the same
words, so resuming (latest_verified) falls back to the checkpoint before it: a dynamic table's key twice
or in another shard's piece (keyed.piece_keys, storage/keyspace.py), a piece of another row shape or
with a state its optimizer does not keep (checkpoint/layout.py, a manifest no hash covers). Each was a
KeyError, numpy's "could not broadcast" or a restore's refusal after the checkpoint had been chosen.
The choice imports no torch."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.data.cache import read_json, sha256_file, write_json
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.storage import keyed as kd
from graphtrain.runtime.tensor import DistEmbedding, DynamicVocabulary
from tests.runtime.kvstore.test_keyed import CONFIGS, DIM, INIT, batch

OLDER, NEWER = "step-000000010", "step-000000020"
Tamper = Callable[[Path], None]  # of a piece directory, its manifest's hashes recorded again after


def two_checkpoints(root: Path, config: OptimConfig = CONFIGS[0], dynamic: bool = True) -> None:
    """OLDER and NEWER (LATEST) of table "t" over 2 in-process shards, a step apart."""
    client = kvstore.standalone(2, checkpoint_root=root)
    vocabulary = DynamicVocabulary(64) if dynamic else None
    emb = DistEmbedding(1000, DIM, "t", INIT, client=client, vocabulary=vocabulary)
    opt = SparseOptimizer([emb], config)
    for step, tag in enumerate((OLDER, NEWER)):
        keys, weights = batch(step)
        (emb(keys if dynamic else keys.remainder(1000)) * weights).sum().backward()
        opt.step()
        client.checkpoint(tag, root=root)
        ckpt.mark_latest(root, tag)


def tampered(root: Path, tamper: Tamper, piece: int = 0) -> Path:
    """NEWER's piece `piece` of "t" changed by `tamper`, every file's sha256 recorded again."""
    d = sorted((root / NEWER / "t").glob("rows-*"))[piece]
    tamper(d)
    manifest = read_json(d / ckpt.MANIFEST)
    manifest["files"] = {name: sha256_file(d / name) for name in manifest["files"]}
    write_json(d / ckpt.MANIFEST, manifest)
    return d


def keys_set(change: Callable[[np.ndarray], None]) -> Tamper:
    def tamper(d: Path) -> None:
        keys = np.load(d / kd.KEYS)
        change(keys)
        np.save(d / kd.KEYS, keys)

    return tamper


def manifest_set(change: Callable[[dict, Path], None]) -> Tamper:
    def tamper(d: Path) -> None:
        manifest = read_json(d / ckpt.MANIFEST)
        change(manifest, d)
        write_json(d / ckpt.MANIFEST, manifest)

    return tamper


def narrower_state(manifest: dict, d: Path) -> None:
    """state.sum.npy of half the row's width, its manifest saying so (the file checks out)."""
    rows = np.load(d / "state.sum.npy")
    np.save(d / "state.sum.npy", np.ascontiguousarray(rows[:, : DIM // 2]))
    manifest["state"]["sum"]["shape"] = [len(rows), DIM // 2]


def another_row_shape(manifest: dict, d: Path) -> None:
    """Piece 1 of rows of twice the width, its state too: each file as its manifest says."""
    for name in ("data.npy", "state.sum.npy"):
        rows = np.load(d / name)
        np.save(d / name, np.concatenate([rows, rows], axis=1))
    manifest["row_shape"] = [2 * DIM]
    manifest["state"]["sum"]["shape"] = [manifest["state"]["sum"]["shape"][0], 2 * DIM]


def no_keys(d: Path) -> None:
    (d / kd.KEYS).unlink()
    manifest = read_json(d / ckpt.MANIFEST)
    manifest["files"].pop(kd.KEYS)
    write_json(d / ckpt.MANIFEST, manifest)


NARROW = (
    "lists optimizer state sum float32 (n, 2), where optimizer adagrad over rows of [4] keeps sum float32"
)
ADAM = "lists optimizer state sum float32 (n, 4), where optimizer adam over rows of [4] keeps exp_avg float32"
CASES = [  # (tamper, piece, dynamic table, what verify and a restore say)
    (
        keys_set(lambda k: k.__setitem__(1, k[0])),
        0,
        True,
        "rows-000000000000-000000000032: a key appears twice",
    ),
    (keys_set(lambda k: k.__setitem__(1, 1001)), 0, True, "key 1001 does not belong to piece 0 of 2"),
    (no_keys, 1, True, "no keys.npy: the checkpoint's table is not a dynamic vocabulary's"),
    (manifest_set(narrower_state), 0, False, NARROW),
    (manifest_set(lambda m, _: m["optimizer"].update(kind="adam")), 0, True, ADAM),
    (manifest_set(another_row_shape), 1, False, "row_shape [8], where the first piece of 't' says [4]"),
]
IDS = [
    "duplicate-key",
    "key-of-another-shard",
    "piece-without-keys",
    "narrow-state",
    "other-optimizer",
    "row-shape",
]


@pytest.mark.parametrize(("tamper", "piece", "dynamic", "said"), CASES, ids=IDS)
def test_verify_refuses_what_a_restore_refuses_in_its_words_and_resuming_falls_back(
    tmp_path: Path, tamper: Tamper, piece: int, dynamic: bool, said: str
) -> None:
    root = tmp_path / "ck"
    two_checkpoints(root, dynamic=dynamic)
    tampered(root, tamper, piece)
    with pytest.raises(DataError) as verified:
        ckpt.verify_checkpoint(root / NEWER)
    assert said in str(verified.value), verified.value
    again = kvstore.standalone(2)
    for state in again.transport.states:  # type: ignore[attr-defined]
        state.restore_from = root / NEWER
    vocabulary = DynamicVocabulary(64) if dynamic else None
    with pytest.raises(Exception) as restored:
        DistEmbedding(1000, DIM, "t", INIT, client=again, vocabulary=vocabulary)
    assert str(verified.value) in str(restored.value), (verified.value, restored.value)
    path, skipped = ckpt.latest_verified(root)
    assert path == root / OLDER and len(skipped) == 1, skipped
    assert skipped[0].startswith(f"checkpoint {NEWER} skipped: ") and said in skipped[0], skipped


@pytest.mark.parametrize("config", CONFIGS, ids=[f"{c.kind}-{c.step_count}" for c in CONFIGS])
@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "fixed"])
def test_every_optimizers_checkpoint_verifies(tmp_path: Path, config: OptimConfig, dynamic: bool) -> None:
    """No refusal of what training writes: each optimizer's state, per-row and global Adam steps."""
    two_checkpoints(tmp_path, config, dynamic)
    ckpt.verify_checkpoint(tmp_path / NEWER)
    assert ckpt.latest_verified(tmp_path) == (tmp_path / NEWER, [])


def test_choosing_a_dynamic_tables_checkpoint_imports_no_torch(tmp_path: Path) -> None:
    """latest_verified over a dynamic table's checkpoints, one with a key twice: in a process that never
    imports torch (the launcher's choice, before any trainer starts)."""
    two_checkpoints(tmp_path)
    tampered(tmp_path, keys_set(lambda k: k.__setitem__(1, k[0])))
    code = (
        "import sys; from pathlib import Path; from graphtrain.runtime import checkpoint as ckpt\n"
        f"path, skipped = ckpt.latest_verified(Path({str(tmp_path)!r}))\n"
        "print(path.name, len(skipped), 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == [OLDER, "1", "False"], done.stdout + done.stderr
