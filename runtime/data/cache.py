"""The data directory, checksummed files and atomic directory writes.

Every file graphtrain writes for later (processed datasets, partitions) is recorded with its sha256 in a
manifest and checked on load, and every output directory is built under a temporary name and renamed
into place at the end: a crash or a bad input never leaves a half-written dataset behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graphtrain.runtime.errors import ChecksumError, DataError

ENV_DATA = "GRAPHTRAIN_DATA"


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: `override`, else $GRAPHTRAIN_DATA, else ~/.cache/graphtrain."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get(ENV_DATA)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "graphtrain"


def sha256_file(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_tree(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every regular file under `root`, keyed by POSIX path relative to it."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel not in exclude:
            out[rel] = sha256_file(path)
    return out


def verify_files(root: Path, files: dict[str, str]) -> None:
    """Check that every recorded file exists and has its recorded sha256.

    Raises:
        ChecksumError: a file is missing or its content changed, naming the file.
    """
    for rel, expected in files.items():
        path = root / rel
        if not path.is_file():
            raise ChecksumError(f"{path}: missing (recorded in the manifest)")
        actual = sha256_file(path)
        if actual != expected:
            raise ChecksumError(f"{path}: sha256 {actual[:12]}… does not match the recorded {expected[:12]}…")


def write_json(path: Path, obj: Any) -> None:
    """Write JSON and fsync it, so a manifest is never visible half-written."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """Read a JSON file, turning absence and syntax errors into DataError naming the file."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise DataError(f"{path}: not found") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None


@contextlib.contextmanager
def atomic_dir(final: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces `final` only if the block succeeds.

    Raises:
        DataError: `final` exists and `overwrite` is False.
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise DataError(f"{final}: already exists (pass --overwrite to replace it)")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        for path in tmp.rglob("*"):
            if path.is_file():
                with open(path, "rb+") as f:
                    os.fsync(f.fileno())
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
