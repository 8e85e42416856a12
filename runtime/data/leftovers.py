"""Temporary directories of an output being written, and what a killed writer leaves of them.

atomic_dir (cache.py) builds an output under `.<name>.tmp-<hex>` beside it and renames it into place;
a streaming partition adds its edge buckets in `.<name>.tmp-<hex>.scratch`. A writer killed with
SIGKILL (the OOM killer's signal, a pod's grace period running out) runs no cleanup, and those
directories stayed: a partition's scratch is several times the graph, and each retry of an OOM-killed
partition pod or shard server's checkpoint added another copy on the shared claim.

So a writer holds an exclusive flock on `.<name>.tmp-<hex>.lock` while it writes; the kernel drops it
when the process dies, however it dies. The next writer of the same output removes every such set whose
lock it can take (its writer is gone). A directory is renamed before it is removed, and a lock held by
a live writer on another host is seen as held where the file system shares locks (local disks, NFS);
where it does not, flock fails or succeeds locally, and the worst case is the other writer's rename
failing (its directory gone), never a half-removed directory published under the output's name.
Directories from before the lock existed are named in a log line, not removed (nothing is deleted that
this code cannot tell is abandoned).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h)
AT_FDCWD = -100
SCRATCH = ".scratch"  # the suffix of a writer's scratch directory, beside its temporary one
LOCK = ".lock"
FRESH_SECONDS = 60.0  # a lock file under its first name this old, and unlocked, was a killed writer's


def _lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on the lock file `path`, or None if it is gone, held by a live
    process, or cannot be locked here (no lock support: then nothing is judged abandoned)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)  # not created: gone means its writer finished
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def temporary(final: Path) -> Iterator[Path]:
    """A new empty directory `.<final's name>.tmp-<hex>` beside `final` (mode 0700), its lock held for
    the block. The directory (and its scratch) is the caller's to rename or remove; on leaving, only
    the lock goes.

    Raises:
        OSError: the directory cannot be made."""
    hexa = secrets.token_hex(6)
    base, lock = final.parent / f".{final.name}.tmp-{hexa}", final.parent / f".{final.name}.tmp-{hexa}{LOCK}"
    # locked under another name, then renamed into place: a sweeper never sees the lock file unlocked
    # (between its creation and its flock it would judge it abandoned and take it)
    fresh = final.parent / f".{final.name}.lock-{hexa}"
    fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with contextlib.suppress(OSError):  # no lock support: written unguarded, never swept
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(fresh, lock)
        os.mkdir(base, 0o700)
        yield base
    finally:
        fresh.unlink(missing_ok=True)  # the rename failed
        lock.unlink(missing_ok=True)  # before its fd closes: a sweeper then holds a lock on no name
        os.close(fd)


def exchange(a: Path, b: Path) -> bool:
    """Swap paths `a` and `b` in one step (renameat2 RENAME_EXCHANGE: Linux 3.15, ext4, xfs, btrfs,
    tmpfs), so an output is replaced with no moment where its name is missing; False where the system
    or file system has no such call (NFS, older libc: the caller renames twice).

    Raises:
        OSError: the exchange failed for another reason."""
    call = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if call is None:
        return False
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a))


@contextlib.contextmanager
def scratch(tmp: Path) -> Iterator[Path]:
    """A scratch directory (mode 0700) for the block, of the writer of temporary directory `tmp`:
    under its lock, so a killed writer's is swept with it; removed on leaving."""
    path = Path(f"{tmp}{SCRATCH}")
    os.mkdir(path, 0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _drop_fresh(path: Path) -> None:
    """Remove lock file `path`, under its first name, if it is FRESH_SECONDS old and unlocked: a live
    writer holds that name for microseconds, locked (or, with no lock support, never swept at all)."""
    fd = _lock(path)
    if fd is None:
        return
    try:
        st = os.fstat(fd)
        if st.st_nlink and time.time() - st.st_mtime >= FRESH_SECONDS:
            path.unlink(missing_ok=True)
    except OSError:
        pass
    finally:
        os.close(fd)


def sweep(final: Path) -> int:
    """Remove what killed writers of `final` left beside it (module docstring); the number of sets
    removed. Never raises: a set it cannot remove stays for the next writer."""
    prefix, dead_prefix, fresh_prefix = (f".{final.name}.{k}-" for k in ("tmp", "dead", "lock"))
    try:
        entries = [e.name for e in os.scandir(final.parent) if e.name.startswith((prefix, dead_prefix))]
        fresh = [e.name for e in os.scandir(final.parent) if e.name.startswith(fresh_prefix)]
    except OSError:
        return 0
    for name in entries:  # renamed by a sweeper killed before it removed them
        if name.startswith(dead_prefix):
            shutil.rmtree(final.parent / name, ignore_errors=True)
    for name in fresh:  # a writer killed between making its lock file and renaming it (empty files)
        _drop_fresh(final.parent / name)
    names = [n for n in entries if n.startswith(prefix)]
    locks = {n.removesuffix(LOCK) for n in names if n.endswith(LOCK)}
    removed = 0
    for base in sorted(locks):
        fd = _lock(final.parent / f"{base}{LOCK}")
        if fd is None:
            continue
        try:
            if os.fstat(fd).st_nlink == 0:  # its writer finished and unlinked it after we opened it
                continue
            for name in (base, f"{base}{SCRATCH}"):
                dead = final.parent / f".{final.name}.dead-{secrets.token_hex(6)}"
                with contextlib.suppress(FileNotFoundError):
                    os.rename(final.parent / name, dead)  # atomic: never half-removed under its name
                    shutil.rmtree(dead, ignore_errors=True)
            (final.parent / f"{base}{LOCK}").unlink(missing_ok=True)
            removed += 1
        except OSError as exc:
            log.warning("%s: cannot remove what a killed writer left (%s)", final.parent / base, exc)
        finally:
            os.close(fd)
    unguarded = sorted(n for n in names if not n.endswith(LOCK) and n.removesuffix(SCRATCH) not in locks)
    if unguarded:
        log.warning(
            "%s: %s left by an earlier writer (no lock to tell whether it is gone): remove when no writer "
            "of it runs",
            final.parent,
            ", ".join(unguarded[:4]) + (f" and {len(unguarded) - 4} more" if len(unguarded) > 4 else ""),
        )
    if removed:
        log.info(
            "%s: removed %d temporary directories of killed writers of %s", final.parent, removed, final.name
        )
    return removed
