"""The checksums of a checkpoint's files, hashed several at once: the same digests as one by one, and a
changed or missing file named as before."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from graphtrain.runtime.data import cache
from graphtrain.runtime.errors import ChecksumError


def _tree(root: Path) -> dict[str, bytes]:
    files = {f"f{i}.npy": bytes([i]) * (100_000 + i) for i in range(6)}
    files["sub/keys.npy"] = b"k" * 10
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@pytest.mark.parametrize("threads", [1, 4])
def test_hash_tree_gives_each_files_sha256(
    tmp_path: Path, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "HASH_THREADS", threads)
    files = _tree(tmp_path)
    got = cache.hash_tree(tmp_path, exclude=("f5.npy",))
    want = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items()) if rel != "f5.npy"}
    assert got == want and list(got) == sorted(want)  # in path order
    cache.verify_files(tmp_path, got)


def test_verify_names_the_first_changed_or_missing_file(tmp_path: Path) -> None:
    _tree(tmp_path)
    recorded = cache.hash_tree(tmp_path)
    (tmp_path / "f4.npy").write_bytes(b"changed")
    (tmp_path / "f2.npy").write_bytes(b"changed too")
    with pytest.raises(ChecksumError, match=r"f2\.npy: sha256 \w+… does not match the recorded"):
        cache.verify_files(tmp_path, recorded)
    (tmp_path / "sub" / "keys.npy").unlink()
    with pytest.raises(ChecksumError, match=r"keys\.npy: missing \(recorded in the manifest\)"):
        cache.verify_files(tmp_path, recorded)


@pytest.mark.timeout(30)
def test_a_fifo_or_a_huge_file_at_a_json_name_is_refused_unread(tmp_path: Path) -> None:
    """A FIFO at a checkpoint's checkpoint.json (or a piece's manifest.json) hung infer, export and
    predict forever; a huge one (sparse: no disk used here) would have been read whole."""
    import os

    from graphtrain.runtime.errors import DataError

    fifo = tmp_path / "checkpoint.json"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="checkpoint.json: not a regular file"):
        cache.read_json(fifo)
    huge = tmp_path / "manifest.json"
    with open(huge, "wb") as f:
        f.truncate(cache.JSON_MAX_BYTES + 1)
    with pytest.raises(DataError, match="bytes, more than a JSON file of graphtrain's holds"):
        cache.read_json(huge)
