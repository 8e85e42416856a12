"""Reading .npy files and .npz archives as data: every array's .npy header is checked before its data is
read, so a file promising more than it holds or than fits in memory, or holding Python objects, is
refused without allocating it (np.load with allow_pickle=False: a file is data, never code). Graph
archives (files.py), sparse feature matrices and .npy features and labels (nodefiles.py) all come
through here: one reader of .npy headers."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from graphtrain.runtime import memlimits
from graphtrain.runtime.data.graph import human
from graphtrain.runtime.errors import DataError


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz. Each member's header is read first: a member that is not a .npy array,
    holds Python objects, or declares more data than it holds or than this process may use is refused
    before anything is allocated for it."""
    try:
        with zipfile.ZipFile(path) as zf:
            declared = 0
            for info in zf.infolist():
                declared += _member_bytes(path, zf, info)
            _fits(path, declared)
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from None


def load_array(path: Path, mmap_mode: str | None = None) -> np.ndarray:
    """A stored array (a checkpoint's piece, a dynamic table's keys), memory-mapped with mmap_mode "r",
    never unpickled. A file numpy cannot read as a plain array (no .npy header, an object dtype, shorter
    than its header says) raises numpy's ValueError (OSError where it cannot be read): both become one
    DataError naming the file, so a command says one line and a resume falls back as for any damaged
    checkpoint.

    Raises:
        DataError: naming `path` and why it cannot be read as an array.
    """
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npy array ({exc})") from None


def read_npy(path: Path) -> np.ndarray:
    """The array of a .npy file, its header checked first (against the file's size and the memory).

    Raises:
        DataError: naming the file: not a .npy, Python objects, or more data declared than held or fits.
    """
    try:
        with open(path, "rb") as f:
            need = _checked(path, f, path.stat().st_size, "its array")
        _fits(path, need)
        return np.asarray(np.load(path, allow_pickle=False))
    except (ValueError, EOFError) as exc:  # object arrays, a bad header: never unpickled
        raise DataError(f"{path}: not a plain .npy array ({exc})") from None
    except OSError as exc:
        raise DataError(f"{path}: not a readable .npy file ({exc})") from None


def _fits(path: Path, need: int) -> None:
    bound = memlimits.ceiling()
    if need > bound.bytes:
        raise DataError(
            f"{path}: its arrays need {human(need)}, more than {bound.source} ({human(bound.bytes)})"
        )


def _checked(path: Path, f: BinaryIO, size: int, member: str) -> int:
    """Bytes the .npy at `f` declares in its header, checked against the `size` it holds."""
    major, _ = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(f)
    header = f.tell()
    if dtype.hasobject:
        raise DataError(f"{path}: {member} holds Python objects; only plain arrays are read")
    need = math.prod(shape) * dtype.itemsize
    if header + need > size:
        raise DataError(
            f"{path}: {member} declares shape {shape} {dtype} ({human(need)}) but holds "
            f"{size - header:,} bytes"
        )
    return need


def _member_bytes(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Bytes the .npy member `info` declares in its header, checked against what it holds."""
    member = info.filename
    if not member.endswith(".npy"):
        raise DataError(f"{path}: member {member!r} is not a .npy array (an .npz holds only .npy files)")
    with zf.open(info) as f:
        return _checked(path, f, info.file_size, member)
