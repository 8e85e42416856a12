"""The data directory, checksummed files, reading text, and atomic file and directory writes.

Every file graphtrain writes for later (processed datasets, partitions) is recorded with its sha256 in a
manifest and checked on load, and every output file or directory is built under a temporary name and
renamed into place at the end: a crash, a full disk or a bad input never leaves a half-written dataset
behind. A file that cannot be read or written is a DataError naming it, never an OSError traceback.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from graphtrain.runtime.data import leftovers
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


# files hashed at once: hashlib and reads release the GIL (461 MB in 3 files: 0.30 -> 0.15 s on 2 cores)
HASH_THREADS = 4


def sha256_files(paths: list[Path]) -> list[str]:
    """sha256 of each file, several at once (a checkpoint's table and state files are each hundreds of MB)."""
    workers = min(len(paths), HASH_THREADS, os.cpu_count() or 1)
    if workers <= 1:
        return [sha256_file(p) for p in paths]
    with ThreadPoolExecutor(workers, thread_name_prefix="sha256") as pool:
        return list(pool.map(sha256_file, paths))


def hash_tree(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every regular file under `root`, keyed by POSIX path relative to it."""
    paths = [
        p
        for p in sorted(p for p in root.rglob("*") if p.is_file())
        if p.relative_to(root).as_posix() not in exclude
    ]
    return {
        p.relative_to(root).as_posix(): digest for p, digest in zip(paths, sha256_files(paths), strict=True)
    }


Stat = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns
Signature = tuple[int, int, int, int, int, str]  # Stat and the sha256 the file was checked against


def signature(path: Path) -> Stat:
    """What changes with any write to, or replacement of, the file at `path` (st_ctime: set by the kernel
    on every change, no call sets it back)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def verify_files(
    root: Path,
    files: dict[str, str],
    seen: dict[str, Signature] | None = None,
    trusted: Mapping[str, Signature] | None = None,
) -> None:
    """Check that every recorded file exists and has its recorded sha256. `seen`: gets the signature
    (taken before its hash) of each file that checked out, by real path; `trusted`: such a record, whose
    files still of that signature were hashed already and are not hashed again (checkpoint/verified.py).

    Raises:
        ChecksumError: a file is missing or its content changed, naming the file.
    """
    for rel in files:
        if not (root / rel).is_file():
            raise ChecksumError(f"{root / rel}: missing (recorded in the manifest)")
    # the sha256 is part of the mark: a file checked against one manifest is not trusted for another
    # that records other bytes for it (a manifest edited or swapped after the check)
    marks = (
        {rel: (*signature(root / rel), sha) for rel, sha in files.items()}
        if seen is not None or trusted
        else {}
    )
    real = {rel: os.path.realpath(root / rel) for rel in marks}
    todo = {rel: sha for rel, sha in files.items() if not trusted or trusted.get(real[rel]) != marks[rel]}
    actual = sha256_files([root / rel for rel in todo])
    for (rel, expected), got in zip(todo.items(), actual, strict=True):
        if got != expected:
            raise ChecksumError(
                f"{root / rel}: sha256 {got[:12]}… does not match the recorded {expected[:12]}…"
            )
    if seen is not None:
        seen.update({real[rel]: marks[rel] for rel in files})


def files_problem(files: object) -> str | None:
    """What is wrong with a manifest's `files` ({relative name: sha256}: a checkpoint's, a partition
    config's), or None: verify_files hashed a name with ../ or an absolute one outside the directory, and
    a list or a number there was an AttributeError or TypeError (a traceback from `infer`'s first check)."""
    if not isinstance(files, dict):
        return "is not a map of file names to sha256"
    for name, digest in files.items():
        if os.path.isabs(name) or ".." in Path(name).parts or not name.strip("/."):
            return f"name {name!r} is outside its directory"
        if not isinstance(digest, str):
            return f"{name!r}: its sha256 is not a string"
    return None


def first_unlisted(root: Path, listed: set[str]) -> str | None:
    """The first entry under `root` (POSIX path relative to it) that is neither a `listed` file nor a
    directory (empty ones included: deleting them loses nothing), else None; a symlink is an entry,
    never followed. What replacing `root` whole would delete that its manifest does not account for."""
    for top, subdirs, files in os.walk(root):
        links = [d for d in subdirs if os.path.islink(os.path.join(top, d))]
        for name in sorted(files + links):
            rel = (Path(top) / name).relative_to(root).as_posix()
            if rel not in listed:
                return rel
    return None


def reason(exc: OSError) -> str:
    """What went wrong, as the operating system says it ("No space left on device"). numpy's writes
    (np.save, ndarray.tofile) drop the system's word: a short write is only "N requested and M written",
    which a full disk (or quota) is, nearly always, and is now said."""
    if exc.strerror:
        return exc.strerror
    text = str(exc)
    if exc.errno is None and _SHORT_WRITE.fullmatch(text):
        return f"a short write ({text}): no space left on the device?"
    return text


_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def refusal(exc: OSError) -> str:
    """Why a file or directory could not be made, in words (reason): ENOENT from a create in a directory
    that is there (/proc, /sys: file systems that make no files) reads 'No such file or directory',
    which it is not."""
    if exc.errno == errno.ENOENT:
        return "the file system there makes no new files"
    return reason(exc)


def read_text(path: Path) -> str:
    """The UTF-8 text of a file, without a leading byte order mark (Excel's "CSV UTF-8" and Notepad write
    one; left in, it would glue itself to the first field and turn a header into data).

    Raises:
        DataError: the file cannot be read (naming why) or is not UTF-8 text (naming the line).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: {reason(exc)}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    return text.removeprefix("\ufeff")


def check_creatable(directory: Path) -> None:
    """Raise DataError if `directory` could not be created because a file stands where a directory must."""
    full = Path(os.path.abspath(directory))
    for path in (full, *full.parents):
        if path.exists():
            if path == full and not path.is_dir():
                raise DataError(f"{directory}: exists and is not a directory")
            if not path.is_dir():
                raise DataError(f"{directory}: cannot create the directory ({path} is not a directory)")
            return


def make_dirs(directory: Path) -> None:
    """Create `directory` and its parents.

    Raises:
        DataError: a file is in the way, or the system refuses (permission, read-only file system).
    """
    check_creatable(directory)
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{directory}: cannot create the directory ({refusal(exc)})") from None


@contextlib.contextmanager
def atomic_file(final: Path, mode: int = 0o666) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `final` (fsynced) only if the block succeeds; on failure the
    temporary file is removed and `final` is left as it was. `mode` (before the umask) is the file's
    from its creation: a secret is never readable by others, not even for a moment.

    Raises:
        DataError: `final` is a directory or another non-regular file, or writing fails (full disk, ...).
    """
    final = Path(final)
    if final.exists() and not final.is_file():
        raise DataError(f"{final}: exists and is not a regular file")
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DataError(f"{final}: cannot write ({reason(exc)})") from None
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically and fsync it, so a manifest is never visible half-written."""
    with atomic_file(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


JSON_MAX_BYTES = 1 << 28
"""More than any JSON file graphtrain writes (a checkpoint.json of 1,000 shards is ~2 MB): a bigger one
is refused before it is read, not read whole into memory."""


def read_json(path: Path) -> Any:
    """Read a JSON file, turning absence, unreadable text and syntax errors into DataError naming it. A
    FIFO or device at its name is refused (reading one waited forever for a writer), and so is a file
    over JSON_MAX_BYTES."""
    if not Path(path).exists():
        raise DataError(f"{path}: not found")
    if not Path(path).is_file():
        raise DataError(f"{path}: not a regular file")
    if (size := Path(path).stat().st_size) > JSON_MAX_BYTES:
        raise DataError(f"{path}: {size:,} bytes, more than a JSON file of graphtrain's holds")
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise DataError(f"{path}: not valid JSON (nested too deeply)") from None


@contextlib.contextmanager
def atomic_dir(final: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces `final` only if the block succeeds.

    Raises:
        DataError: `final` exists and `overwrite` is False, `final` is not a directory, or it cannot be
            written (a file in the way, no permission, a full disk).
    """
    given, final = final, Path(os.path.abspath(final))  # "." and "x/.." have no name to rename
    if final.exists():
        if not overwrite:
            raise DataError(f"{given}: already exists (pass --overwrite to replace it)")
        if not final.is_dir() or final == final.parent:
            raise DataError(f"{given}: exists and is not a directory that can be replaced")
    make_dirs(final.parent)
    leftovers.sweep(final)  # what writers of it killed before left (leftovers.py)
    with contextlib.ExitStack() as held:
        try:
            tmp = held.enter_context(leftovers.temporary(final))
        except OSError as exc:
            raise DataError(f"{given}: cannot write ({reason(exc)})") from None
        yield from _replacing(given, final, tmp)


def _replacing(given: Path, final: Path, tmp: Path) -> Iterator[Path]:
    """atomic_dir's block around `tmp`: `tmp` replaces `final` if it succeeds, else is removed. An
    existing `final` is exchanged with `tmp` in one step where the file system can (then `tmp` holds
    the previous output, under this writer's lock until removed), else moved aside first."""
    old: Path | None = None
    swapped = False
    try:
        yield tmp
        for path in tmp.rglob("*"):
            if path.is_file():
                with open(path, "rb+") as f:
                    os.fsync(f.fileno())
        if final.exists():
            swapped = leftovers.exchange(tmp, final)
            if not swapped:  # a moment without `final`: a crash here leaves it in .<name>.old-<pid>
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                os.replace(final, old)
        if not swapped:
            os.replace(tmp, final)
    except BaseException as exc:
        if not swapped:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None:
                os.replace(old, final)  # the previous output stays
        if isinstance(exc, OSError):
            raise DataError(f"{given}: cannot write ({reason(exc)})") from None
        raise
    gone = tmp if swapped else old
    if gone is not None:
        shutil.rmtree(gone, ignore_errors=True)
    fsync_dir(final.parent)
