"""Generic graph files: edge lists (.csv/.tsv, header optional) and numpy archives (.npz).

Edge list: UTF-8 text, one edge per line, `src<sep>dst[<sep>etype]`, decimal integer ids, `#` comments
allowed. The first line may be a header of names only (`src dst`, `source,target,type`); any other
first line that is not integer ids (`0.5 1`, `0x10 1`) is an error naming the line, like a bad line
anywhere else. Without `num_nodes`, ids may be any non-negative int64 (e.g. database keys) and are
compacted to 0..n-1, their values kept as the graph's node_ids; with `num_nodes`, ids are used as they
are and must lie in [0, num_nodes).

npz: `src`+`dst` (or `indptr`+`indices`), optional `num_nodes` (one integer), `feat` (finite numbers),
`label`, `train_mask`, `val_mask`, `test_mask`, `etype`, `node_ids`; ids and labels integer arrays within
int64. Loaded with allow_pickle=False: an archive is data, never code. Every member's .npy header is
checked before its data is read, so an archive promising more than it holds or than fits in memory is
refused without allocating it.
"""

from __future__ import annotations

import math
import re
import stat
import zipfile
from pathlib import Path
from typing import NoReturn

import numpy as np
import psutil

from graphtrain.runtime.data.cache import read_text, reason
from graphtrain.runtime.data.graph import MASKS, Graph, human
from graphtrain.runtime.errors import DataError


def detect_format(path: Path, fmt: str = "auto") -> str:
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return "npz"
    if suffix == ".csv":
        return "csv"
    if suffix in (".tsv", ".txt", ".edges", ".el"):
        return "tsv"
    raise DataError(f"{path}: cannot tell the format from the extension; pass --format csv|tsv|npz")


def load_file(
    path: str | Path, fmt: str = "auto", num_nodes: int | None = None, name: str | None = None
) -> Graph:
    """Load an edge list or npz file into a Graph.

    Raises:
        DataError: missing or unreadable file, text that is not UTF-8, bad ids (naming the line),
            arrays of the wrong kind (naming the array), an empty graph, or a graph too big for memory.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: {reason(exc)}") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{path}: is a directory, not a graph file")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path}: not a regular file")
    name = name or path.stem
    kind = detect_format(path, fmt)
    if kind == "npz":
        return _load_npz(path, num_nodes, name)
    return _load_edge_list(path, "," if kind == "csv" else None, num_nodes, name)


# ------------------------------------------------------------------------------------------ edge lists

_ID = re.compile(r"[+-]?[0-9]+")  # ASCII decimal: not 0x10, 1_000, 0.5 or other scripts' digits


def _is_id(token: str) -> bool:
    return _ID.fullmatch(token) is not None


def _is_name(token: str) -> bool:
    """A header field: a name such as `src`, nothing that looks like a number (0.5, -1, 0x10, nan)."""
    if not token or token[0] in "+-.0123456789":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _is_row(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _load_edge_list(path: Path, sep: str | None, num_nodes: int | None, name: str) -> Graph:
    lines = read_text(path).split("\n")
    start = next((i for i, ln in enumerate(lines) if _is_row(ln)), len(lines))
    if start < len(lines) and all(_is_name(f.strip()) for f in lines[start].split(sep)):
        start += 1  # a header: names only
    rows = [ln for ln in lines[start:] if ln.strip() and not ln.lstrip().startswith("#")]  # _is_row, inline
    if not rows:
        raise DataError(f"{path}: no edges (an empty graph cannot be partitioned)")
    width = len(rows[0].split(sep))
    if width not in (2, 3):
        line = _line_of(lines, start, 0)
        raise DataError(f"{path}:{line}: expected 2 or 3 columns (src, dst[, etype]), found {width}")
    text = " ".join(ln.replace(",", " ") if sep == "," else ln for ln in rows)
    flat = text.split()
    try:
        # numpy parses ids as int() does, which also takes 1_000 and other scripts' digits: not ids here
        if len(flat) != width * len(rows) or not text.isascii() or "_" in text:
            raise ValueError("ragged or not decimal")
        arr = np.array(flat, dtype=np.int64).reshape(-1, width)
    except (ValueError, OverflowError):
        _raise_bad_line(path, lines, start, sep, width)
    ids = arr[:, :2]
    checks = [((ids < 0).any(axis=1), "negative id")]
    if num_nodes is not None:
        checks.append(((ids >= num_nodes).any(axis=1), f"id outside [0, {num_nodes})"))
    if width == 3:
        checks.append((arr[:, 2] < 0, "negative edge type"))
    for bad, what in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{path}:{_line_of(lines, start, i)}: {what} in {rows[i].strip()!r}")
    src, dst = arr[:, 0], arr[:, 1]
    etype = arr[:, 2] if width == 3 else None
    if num_nodes is None:
        node_ids, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
        src, dst = inverse[: len(src)], inverse[len(src) :]
        return Graph.from_edges(name, len(node_ids), src, dst, etype=etype, node_ids=node_ids)
    return Graph.from_edges(name, num_nodes, src, dst, etype=etype)


def _line_of(lines: list[str], start: int, row: int) -> int:
    """1-based line number of data row `row` (counting from lines[start], skipping comments and blanks)."""
    seen = -1
    for lineno, line in enumerate(lines[start:], start + 1):
        seen += _is_row(line)
        if seen == row:
            return lineno
    return len(lines)


def _raise_bad_line(path: Path, lines: list[str], start: int, sep: str | None, width: int) -> NoReturn:
    first = next(i for i, ln in enumerate(lines) if _is_row(ln)) + 1
    for lineno, line in enumerate(lines[start:], start + 1):
        if not _is_row(line):
            continue
        fields = [f.strip() for f in line.split(sep)]
        if len(fields) != width:
            raise DataError(f"{path}:{lineno}: expected {width} columns, found {len(fields)}")
        for f in fields:
            if not _is_id(f):
                hint = " (a header line may hold only names, such as src and dst)" if lineno == first else ""
                raise DataError(f"{path}:{lineno}: {f!r} is not an integer id{hint}")
            if not -(2**63) <= int(f) < 2**63:
                raise DataError(f"{path}:{lineno}: id {f} does not fit in int64")
    raise DataError(f"{path}: could not parse the edge list")


# ------------------------------------------------------------------------------------------------ npz

_FEATURE_CHUNK = 1 << 16  # rows checked for NaN/inf at a time


def _read_npz(path: Path) -> dict[str, np.ndarray]:
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


def _describe(arr: np.ndarray) -> str:
    return f"shape {arr.shape} {arr.dtype}"


def _integers(path: Path, key: str, arr: np.ndarray) -> np.ndarray:
    """`arr` as int64 if it is a 1-D integer array whose values fit, else DataError naming `key`."""
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise DataError(f"{path}: {key} must be a 1-D integer array, got {_describe(arr)}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise DataError(f"{path}: {key} holds {int(arr.max())}, beyond the int64 range of ids")
    return arr.astype(np.int64, copy=False)


def _num_nodes(path: Path, stored: np.ndarray, given: int | None) -> int:
    if stored.size != 1 or stored.ndim > 1 or stored.dtype.kind not in "iu":
        raise DataError(f"{path}: num_nodes must be one integer, got {_describe(stored)}")
    value = int(stored.reshape(()))
    if value < 1:
        raise DataError(f"{path}: num_nodes must be at least 1, got {value}")
    if given is not None and given != value:
        raise DataError(f"{path}: num_nodes is {value} in the file but {given} was given")
    return value


def _check_feat(path: Path, feat: np.ndarray) -> None:
    if feat.ndim != 2:
        raise DataError(f"{path}: feat must be 2-D (nodes x dims), got shape {feat.shape}")
    if feat.dtype.kind not in "biuf":
        raise DataError(f"{path}: feat must hold numbers, got {feat.dtype}")
    if feat.dtype.kind != "f":
        return
    for lo in range(0, feat.shape[0], _FEATURE_CHUNK):
        finite = np.isfinite(feat[lo : lo + _FEATURE_CHUNK])
        if not finite.all():
            row, col = (int(v) for v in np.argwhere(~finite)[0])
            row += lo
            raise DataError(f"{path}: feat[{row}, {col}] is {feat[row, col]} (features must be finite)")


def _load_npz(path: Path, num_nodes: int | None, name: str) -> Graph:
    arrays = _read_npz(path)
    if "num_nodes" in arrays:
        num_nodes = _num_nodes(path, arrays.pop("num_nodes"), num_nodes)
    feat = arrays.pop("feat", None)
    label = arrays.pop("label", None)
    node_ids = arrays.pop("node_ids", None)
    masks = {}
    for key in MASKS:
        if f"{key}_mask" in arrays:
            mask = arrays.pop(f"{key}_mask")
            if mask.dtype.kind not in "biu":
                raise DataError(f"{path}: {key}_mask must be bool (or 0/1 integers), got {mask.dtype}")
            masks[key] = mask.astype(bool)
    etype = arrays.pop("etype", None)
    if etype is not None:
        etype = _integers(path, "etype", etype)
        if etype.size and etype.min() < 0:
            raise DataError(f"{path}: etype holds a negative edge type {int(etype.min())}")
    if "indptr" in arrays and "indices" in arrays:
        indptr = _integers(path, "indptr", arrays.pop("indptr"))
        indices = _integers(path, "indices", arrays.pop("indices"))
        n = len(indptr) - 1
        if n < 1:
            raise DataError(f"{path}: indptr must have num_nodes + 1 entries, got {len(indptr)}")
        if num_nodes is not None and num_nodes != n:
            raise DataError(f"{path}: indptr describes {n} nodes but num_nodes is {num_nodes}")
        g = Graph(name=name, num_nodes=n, indptr=indptr, indices=indices)
        src, dst = g.edges()
        num_nodes = n
    elif "src" in arrays and "dst" in arrays:
        src = _integers(path, "src", arrays.pop("src"))
        dst = _integers(path, "dst", arrays.pop("dst"))
        if src.shape != dst.shape:
            raise DataError(f"{path}: src and dst must be of equal length, got {len(src)} and {len(dst)}")
        if num_nodes is None:
            num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    else:
        raise DataError(f"{path}: needs arrays src+dst or indptr+indices (found {sorted(arrays) or 'none'})")
    if arrays:
        raise DataError(f"{path}: unknown arrays {sorted(arrays)}")
    if feat is not None:
        _check_feat(path, feat)
    return Graph.from_edges(
        name,
        num_nodes,
        src,
        dst,
        etype=etype,
        feat=feat,
        label=None if label is None else _integers(path, "label", label),
        masks=masks,
        node_ids=None if node_ids is None else _integers(path, "node_ids", node_ids),
    )
