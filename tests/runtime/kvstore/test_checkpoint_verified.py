"""`infer` hashes its checkpoint once: the launcher's check before start records each file that checked
out (checkpoint/verified.py), and a shard server restoring from it does not hash a file again whose
signature is unchanged; a file rewritten since (even to its old size and mtime) is hashed and refused.
The checkpoints here are written just before their check, inside verified.RACY_NS: the tests that use
the record set it to 0 (the one about that window keeps it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.checkpoint import verified
from graphtrain.runtime.data import cache
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.launch.inference import check_intact
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding

ROWS, DIM = 3000, 8


@pytest.fixture(autouse=True)
def no_racy_window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "racy" not in request.node.name:
        monkeypatch.setattr(verified, "RACY_NS", 0)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    client = kvstore.standalone(2, checkpoint_root=tmp_path)
    emb = DistEmbedding(ROWS, DIM, "emb", client=client)
    opt = SparseOptimizer([emb], OptimConfig("adagrad", 0.1))
    emb(torch.arange(0, ROWS, 7)).sum().backward()
    opt.step()
    client.checkpoint("ck", root=tmp_path)
    return tmp_path / "ck"


def tables() -> list:
    client = kvstore.standalone(2)
    DistEmbedding(ROWS, DIM, "emb", client=client, init={"kind": "zeros"})
    return [state.tensors["emb"] for state in client.transport.states]


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file hashed from here on."""
    seen: list[Path] = []
    real = cache.sha256_files

    def counting(paths: list[Path]) -> list[str]:
        seen.extend(paths)
        return real(paths)

    monkeypatch.setattr(cache, "sha256_files", counting)
    return seen


def test_the_servers_do_not_hash_what_the_launcher_hashed(checkpoint: Path, hashed: list[Path]) -> None:
    """Each file was hashed twice: by `infer` before start and by the server restoring it."""
    record = checkpoint.parent / "verified.json"
    check_intact(checkpoint, record)
    pieces = sorted(p for p in checkpoint.rglob("*.npy"))
    assert set(pieces) <= set(hashed)  # the launcher's check: every piece file
    trusted = verified.read(record)
    assert set(trusted) >= {os.path.realpath(p) for p in pieces}
    hashed.clear()
    restored = tables()
    assert all(ckpt.restore_into(checkpoint, t, trusted=trusted) for t in restored)
    assert hashed == []  # nothing hashed twice
    again = tables()
    assert all(ckpt.restore_into(checkpoint, t) for t in again)  # no record: every piece file hashed
    assert {p for p in hashed if p.suffix == ".npy"} == set(pieces)
    for a, b in zip(restored, again, strict=True):
        assert torch.equal(a.data, b.data)


def test_a_file_rewritten_after_the_check_is_hashed_and_refused(checkpoint: Path, hashed: list[Path]) -> None:
    """Rewritten in place to its old size and mtime: the ctime, which no call sets back, tells."""
    record = checkpoint.parent / "verified.json"
    check_intact(checkpoint, record)
    trusted = verified.read(record)
    data = sorted(checkpoint.rglob("data.npy"))[0]
    st = data.stat()
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    with open(data, "r+b") as f:
        f.write(bytes(raw))
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    hashed.clear()
    with pytest.raises(DataError, match="does not match the recorded"):
        for t in tables():
            ckpt.restore_into(checkpoint, t, trusted=trusted)
    assert data in hashed


@pytest.mark.parametrize("text", ["{not json", '{"files": {"/x": [1, 2]}}', '{"files": []}', "[]"])
def test_a_record_that_is_not_one_hashes_everything(tmp_path: Path, text: str) -> None:
    (tmp_path / "r.json").write_text(text)
    assert verified.read(tmp_path / "r.json") == {} and verified.read(None) == {}
    assert verified.read(tmp_path / "absent.json") == {}


def test_a_failed_check_leaves_no_record(checkpoint: Path) -> None:
    record = checkpoint.parent / "verified.json"
    record.write_text(json.dumps({"files": {}}))  # an earlier run's
    data = sorted(checkpoint.rglob("data.npy"))[0]
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(DataError, match="does not check out"):
        check_intact(checkpoint, record)
    assert not record.exists()
    assert np.load(sorted(checkpoint.rglob("state.sum.npy"))[0]).size  # the rest left as it was


def test_a_manifest_edited_after_the_check_is_not_trusted_for_its_files(
    checkpoint: Path, hashed: list[Path]
) -> None:
    """The record held only each file's stat: a piece manifest that records other bytes for an unchanged
    file (edited or swapped after the check) had that file trusted, never compared with its new sha256."""
    record = checkpoint.parent / "verified.json"
    check_intact(checkpoint, record)
    trusted = verified.read(record)
    data = sorted(checkpoint.rglob("data.npy"))[0]
    manifest = next(p for p in data.parent.glob("*.json") if "data.npy" in p.read_text())
    doc = json.loads(manifest.read_text())
    doc["files"]["data.npy"] = "0" * 64
    manifest.write_text(json.dumps(doc))
    hashed.clear()
    with pytest.raises(DataError, match="does not match the recorded"):
        for t in tables():
            ckpt.restore_into(checkpoint, t, trusted=trusted)
    assert data in hashed


def test_a_record_that_is_a_device_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    """read_bytes() followed a record symlinked to /dev/zero without end and blocked on a FIFO."""
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.json")
    assert verified.read(tmp_path / "zero.json") == {}
    assert verified.read(tmp_path / "fifo.json") == {}
    assert verified.read(tmp_path) == {}  # a directory


def test_files_changed_just_before_the_check_are_not_recorded_racy(
    checkpoint: Path, hashed: list[Path]
) -> None:
    """Where timestamps are coarse (a clock tick; 2 s on FAT), a rewrite within the tick of a file's last
    change keeps its signature: a file changed within RACY_NS of the check is hashed again on restore."""
    record = checkpoint.parent / "verified.json"
    check_intact(checkpoint, record)  # the checkpoint was written a moment ago
    assert verified.read(record) == {}
    pieces = sorted(checkpoint.rglob("*.npy"))
    hashed.clear()
    for t in tables():
        ckpt.restore_into(checkpoint, t, trusted=verified.read(record))
    assert {p for p in hashed if p.suffix == ".npy"} == set(pieces)


def test_settled_keeps_a_file_by_its_later_of_mtime_and_ctime_racy() -> None:
    started = 10 * verified.RACY_NS
    old, edge = started - verified.RACY_NS - 1, started - verified.RACY_NS
    seen = {
        "/a": (1, 1, 8, old, old, "x"),
        "/b": (1, 2, 8, old, edge, "x"),  # rewritten, mtime put back: ctime tells
        "/c": (1, 3, 8, edge, old, "x"),
    }
    assert verified.settled(seen, started) == {"/a": seen["/a"]}
