"""Reading .npz archives as data: every member's .npy header is checked before its data is read, so an
archive promising more than it holds or than fits in memory, or holding Python objects, is refused
without allocating it (np.load with allow_pickle=False: an archive is data, never code). Graph archives
(files.py) and sparse feature matrices (nodefiles.py) both come through here."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import psutil

from graphtrain.runtime.data.graph import human
from graphtrain.runtime.errors import DataError


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz. Each member's header is read first: a member that is not a .npy array,
    holds Python objects, or declares more data than it holds or than this machine's memory is refused
    before anything is allocated for it."""
    try:
        with zipfile.ZipFile(path) as zf:
            declared = 0
            for info in zf.infolist():
                declared += _member_bytes(path, zf, info)
            if declared > psutil.virtual_memory().total:
                raise DataError(
                    f"{path}: its arrays need {human(declared)}, more than this machine's memory "
                    f"({human(psutil.virtual_memory().total)})"
                )
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from None


def _member_bytes(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Bytes the .npy member `info` declares in its header, checked against what it holds."""
    member = info.filename
    if not member.endswith(".npy"):
        raise DataError(f"{path}: member {member!r} is not a .npy array (an .npz holds only .npy files)")
    with zf.open(info) as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
        header = f.tell()
    if dtype.hasobject:
        raise DataError(f"{path}: {member} holds Python objects; only plain arrays are read")
    need = math.prod(shape) * dtype.itemsize
    if header + need > info.file_size:
        raise DataError(
            f"{path}: {member} declares shape {shape} {dtype} ({human(need)}) but holds "
            f"{info.file_size - header:,} bytes"
        )
    return need
