"""The files of a checkpoint `infer` hashed before anything started, so that the shard servers do not
hash them again.

`graphtrain infer` checks every file of its checkpoint before it starts a process (a damaged one is
refused in one line: launch/inference.py check_intact), and each shard server checked the pieces it
restores again (checkpoint/restore.py): every byte hashed twice, ~1.2-3 s a GB more. The launcher now
keeps, for each file that checked out, its signature (cache.signature: device, inode, size, mtime and
ctime, taken before its hash, and the sha256 it matched, so that a manifest edited since does not vouch
for it) in a record in the run directory, and hands the record to its servers
(--verified): a file of the same signature is the one hashed (any write or replacement changes its
ctime, which no call sets back), so it is not hashed again; any other (a checkpoint swapped in after the
check, a file rewritten) is hashed as before and refused if it does not match its manifest.

A file changed shortly before its check is left out of the record (hashed again by the servers): where
the file system's timestamps are coarse (kernels before 6.13 stamp ctime at the clock tick, 1-10 ms;
NFS, FAT: up to 2 s), a rewrite within the same tick as its last change, after the check took its
signature, keeps that signature. Git's index has the same race and the same cure ("racily clean"
entries are hashed again). RACY_NS bounds the tick; it assumes the file system's clock is this host's
to within it.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path

from graphtrain.runtime.data.cache import Signature, atomic_file

log = logging.getLogger(__name__)

MAX_BYTES = 64 << 20  # ~150 bytes a file: 400,000 files; beyond, the record is not one
RACY_NS = 2_000_000_000  # a file changed this close to its check is not recorded: FAT's 2 s tick


def _read_regular(path: Path) -> bytes:
    """The bytes of the regular file at `path`, of at most MAX_BYTES (a record symlinked to /dev/zero or
    a FIFO would be read without end, or block the server's start)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            raise ValueError(f"not a regular file of at most {MAX_BYTES} bytes")
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ValueError(f"more than {MAX_BYTES} bytes")
    return raw


def now() -> int:
    """The clock a check's start is read on (time.time_ns: the one file systems stamp with)."""
    return time.time_ns()


def settled(seen: dict[str, Signature], started: int) -> dict[str, Signature]:
    """The files of `seen` last changed (mtime and ctime) more than RACY_NS before `started`, the time
    the check began: only their signatures tell every later change (module docstring)."""
    cutoff = started - RACY_NS
    return {p: s for p, s in seen.items() if max(s[3], s[4]) < cutoff}


def write(path: Path, checkpoint: Path, seen: dict[str, Signature], started: int) -> None:
    """The record of `checkpoint`'s files `seen` (verify_checkpoint's, a check begun at `started`,
    now()'s nanoseconds), those settled before it, written atomically at `path`."""
    kept = settled(seen, started)
    if len(kept) < len(seen):
        log.info(
            "%d of %d checkpoint files changed within %.0f s of the check: hashed again on restore",
            len(seen) - len(kept),
            len(seen),
            RACY_NS / 1e9,
        )
    doc = {"checkpoint": str(checkpoint), "files": {p: list(s) for p, s in sorted(kept.items())}}
    with atomic_file(path) as f:
        f.write(json.dumps(doc).encode())


def read(path: Path | None) -> dict[str, Signature]:
    """The files a record at `path` names, by real path; {} (every file hashed) without one, or for a
    record that cannot be read or is not one (said once: the restore is only slower)."""
    if path is None:
        return {}
    try:
        files = json.loads(_read_regular(Path(path)))["files"]
        if any(len(s) != 6 or not isinstance(s[5], str) for s in files.values()):
            raise ValueError("a signature is not 5 integers and a sha256")
        out = {str(p): (*(int(v) for v in s[:5]), s[5]) for p, s in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        log.warning("verified-files record %s not used (%s): every file is hashed", path, exc)
        return {}
    return out  # type: ignore[return-value]  # 5 integers and a sha256 each, checked above
