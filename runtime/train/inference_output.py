"""Where `graphtrain infer` writes, and what it may replace: the output directory, the staging directory
beside it and the lock that keeps a second inference out (train/inference.py writes them). Its own
module, with no torch: the launcher checks the output with it before any process starts
(launch/inference.py), so a refused inference is said in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import shutil
from pathlib import Path

from graphtrain.runtime.data.cache import check_creatable, read_json
from graphtrain.runtime.errors import DataError, GraphtrainError

MANIFEST = "manifest.json"
KIND = "graphtrain-inference"


PART = re.compile(r"(edges-)?part-\d{5}\.parquet")


def output_path(out: Path | str) -> Path:
    """`out` made absolute with its parent directories resolved but not its own name: a symlink planted
    there stays a symlink (check_output refuses it), rather than leading the replacement elsewhere."""
    p = Path(os.path.abspath(out))
    return p.parent.resolve() / p.name


def staging_of(out: Path) -> Path:
    """Where the parts are written before the output is renamed into place: a sibling of `out`."""
    return out.with_name(f".{out.name}.staging")


def clear_staging(staging: Path, remove: bool = True) -> None:
    """Remove a staging directory a failed inference left (its parts and manifest only); anything else
    there (a symlink, a file, a directory holding other files) is refused, not deleted. remove=False
    only checks (the launcher, before any process starts and without the output's lock: the staging
    directory may be a running inference's, which rank 0 then finds locked).

    Raises:
        GraphtrainError: naming the path."""
    if not staging.exists() and not staging.is_symlink():
        return
    if staging.is_symlink() or not staging.is_dir():
        raise GraphtrainError(
            f"inference.output: {staging} exists and is not an inference's staging directory: move it"
        )
    others = sorted(p.name for p in staging.iterdir() if p.name != MANIFEST and not PART.fullmatch(p.name))
    if others:
        raise GraphtrainError(
            f"inference.output: {staging} holds files an inference did not write ({', '.join(others[:3])}): "
            "move them"
        )
    if remove:
        shutil.rmtree(staging)


RENAME_EXCHANGE = 2  # renameat2(2)'s flag: the two names swap their files in one step
AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap directories `a` and `b` atomically (Linux renameat2 RENAME_EXCHANGE); False where the C
    library or the file system has no such call (then nothing changed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        return False
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(staging: Path, out: Path) -> None:
    """Put the finished `staging` directory in `out`'s place. An earlier output there is swapped with it
    in one step, then deleted (it is then at the staging name, which the next inference clears if
    this one is killed first): deleting it first left, for a moment, no output at all, and a kill in
    that moment lost the earlier one with the new one unpublished."""
    if out.exists() and exchange(staging, out):
        shutil.rmtree(staging)
        return
    if out.exists():
        shutil.rmtree(out)  # no atomic swap here: the earlier output (check_output) goes first
    staging.rename(out)


def lock_output(out: Path) -> int:
    """An exclusive lock on `out`'s lock file (a sibling), held by rank 0 from clearing the staging
    directory to the output's rename: a second inference into the same output (from another run
    directory) is refused rather than clearing the first one's staging directory while its trainers
    write there, or publishing a manifest beside the other's parts. The descriptor is the lock: closed
    (or the process gone), it is released.

    Raises:
        GraphtrainError: another inference holds it."""
    path = out.with_name(f".{out.name}.lock")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # a link planted at its name is not followed
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise GraphtrainError(f"inference.output: cannot open {path} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise GraphtrainError(
            f"inference.output: another inference is writing {out} (it holds {path.name}): wait for it, "
            "or give another output"
        ) from None
    return fd


def check_outside(out: Path, checkpoint: Path) -> None:
    """Refuse an output inside the checkpoints directory holding `checkpoint`: training's retention
    (checkpoint.prune) deletes what sorts before LATEST there ("inference" < "step-..."), so a
    resumed training would delete it, and a checkpoint's own directory goes whole when it is pruned.

    Raises:
        GraphtrainError: naming both paths."""
    root = checkpoint.resolve().parent
    if out == root or root in out.parents:
        raise GraphtrainError(
            f"inference.output {out}: inside the checkpoints directory {root}, whose old entries training "
            "deletes: name a directory outside it"
        )


def check_output(out: Path) -> None:
    """Refuse an existing `out` that is not an earlier inference's output (nothing else is replaced).

    Raises:
        GraphtrainError: naming the path and what it holds.
    """
    if not out.exists() and not out.is_symlink():
        try:  # a file above it: said here, not as a trainer's FileExistsError once every process started
            check_creatable(out.parent)
        except DataError as exc:
            raise GraphtrainError(f"inference.output {out}: {exc}") from None
        return
    manifest = out / MANIFEST
    try:  # a FIFO or a huge file at its name is refused unread (read_json), not waited on
        doc = read_json(manifest) if out.is_dir() and not out.is_symlink() else None
        ok = isinstance(doc, dict) and doc.get("kind") == KIND
    except (OSError, ValueError, DataError):
        doc, ok = None, False
    if not ok:
        raise GraphtrainError(
            f"inference.output {out}: exists and is not an earlier inference's output (no {MANIFEST} of "
            "one): name a new directory"
        )
    assert isinstance(doc, dict)
    listed = [*(doc.get("parts") or []), *(doc.get("edge_parts") or [])]
    ours = {MANIFEST, *(n for n in listed if isinstance(n, str) and PART.fullmatch(n))}
    others = sorted(  # a part is a file of its pattern: a manifest naming anything else claims nothing
        p.name for p in out.iterdir() if p.name not in ours or p.is_symlink() or not p.is_file()
    )
    if others:  # the whole directory is replaced: nothing it did not write may go with it
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise GraphtrainError(
            f"inference.output {out}: holds files an inference did not write ({shown}); move them, or "
            "name a new directory"
        )
