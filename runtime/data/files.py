"""Generic graph files: edge lists (.csv/.tsv, header optional) and numpy archives (.npz).

Edge list: one edge per line, `src<sep>dst[<sep>etype]`, integer ids, `#` comments allowed; a first
line whose ids are not integers is taken as a header. Without `num_nodes`, ids may be any non-negative
int64 (e.g. database keys) and are compacted to 0..n-1, their values kept as the graph's node_ids;
with `num_nodes`, ids are used as they are and must lie in [0, num_nodes).

npz: `src`+`dst` (or `indptr`+`indices`), optional `num_nodes`, `feat`, `label`, `train_mask`,
`val_mask`, `test_mask`, `etype`, `node_ids`. Loaded with allow_pickle=False: an archive is data, never code.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from graphtrain.runtime.data.graph import MASKS, Graph
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
        DataError: missing file, unreadable content, negative or out-of-range ids, empty graph,
            or arrays whose lengths do not match the node count.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    name = name or path.stem
    kind = detect_format(path, fmt)
    if kind == "npz":
        return _load_npz(path, num_nodes, name)
    return _load_edge_list(path, "," if kind == "csv" else None, num_nodes, name)


def _is_int(token: str) -> bool:
    try:
        int(token)
        return True
    except ValueError:
        return False


def _load_edge_list(path: Path, sep: str | None, num_nodes: int | None, name: str) -> Graph:
    text = path.read_text()
    lines = text.splitlines()
    body_start = 0
    while body_start < len(lines) and (
        not lines[body_start].strip() or lines[body_start].lstrip().startswith("#")
    ):
        body_start += 1
    if body_start < len(lines):
        first = lines[body_start].split(sep)
        if len(first) >= 2 and not (_is_int(first[0].strip()) and _is_int(first[1].strip())):
            body_start += 1  # header
    rows = [ln for ln in lines[body_start:] if ln.strip() and not ln.lstrip().startswith("#")]
    if not rows:
        raise DataError(f"{path}: no edges (an empty graph cannot be partitioned)")
    width = len(rows[0].split(sep))
    if width not in (2, 3):
        raise DataError(f"{path}: expected 2 or 3 columns (src, dst[, etype]), found {width}")
    flat = " ".join(ln.replace(",", " ") if sep == "," else ln for ln in rows).split()
    try:
        if len(flat) != width * len(rows):
            raise ValueError("ragged")
        arr = np.array(flat, dtype=np.int64).reshape(-1, width)
    except (ValueError, OverflowError):
        _raise_bad_line(path, lines, body_start, sep, width)
    src, dst = arr[:, 0], arr[:, 1]
    etype = arr[:, 2] if width == 3 else None
    negative = np.flatnonzero((src < 0) | (dst < 0))
    if negative.size:
        i = int(negative[0])
        raise DataError(f"{path}: edge {i + 1} has a negative id ({int(src[i])}, {int(dst[i])})")
    if etype is not None and etype.min() < 0:
        raise DataError(f"{path}: negative edge type {int(etype.min())}")
    if num_nodes is None:
        node_ids, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
        src, dst = inverse[: len(src)], inverse[len(src) :]
        return Graph.from_edges(name, len(node_ids), src, dst, etype=etype, node_ids=node_ids)
    return Graph.from_edges(name, num_nodes, src, dst, etype=etype)


def _raise_bad_line(path: Path, lines: list[str], start: int, sep: str | None, width: int) -> None:
    for lineno, line in enumerate(lines[start:], start + 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(sep)]
        if len(fields) != width:
            raise DataError(f"{path}:{lineno}: expected {width} columns, found {len(fields)}")
        for f in fields:
            if not _is_int(f):
                raise DataError(f"{path}:{lineno}: {f!r} is not an integer id")
            if not -(2**63) <= int(f) < 2**63:
                raise DataError(f"{path}:{lineno}: id {f} does not fit in int64")
    raise DataError(f"{path}: could not parse the edge list")


def _load_npz(path: Path, num_nodes: int | None, name: str) -> Graph:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from None
    if "num_nodes" in arrays:
        stored = int(arrays.pop("num_nodes"))
        if num_nodes is not None and num_nodes != stored:
            raise DataError(f"{path}: num_nodes is {stored} in the file but {num_nodes} was given")
        num_nodes = stored
    feat = arrays.pop("feat", None)
    label = arrays.pop("label", None)
    node_ids = arrays.pop("node_ids", None)
    masks = {k: arrays.pop(f"{k}_mask").astype(bool) for k in MASKS if f"{k}_mask" in arrays}
    etype = arrays.pop("etype", None)
    if "indptr" in arrays and "indices" in arrays:
        indptr = arrays.pop("indptr").astype(np.int64)
        n = len(indptr) - 1
        if num_nodes is not None and num_nodes != n:
            raise DataError(f"{path}: indptr describes {n} nodes but num_nodes is {num_nodes}")
        g = Graph(name=name, num_nodes=n, indptr=indptr, indices=arrays.pop("indices").astype(np.int64))
        src, dst = g.edges()
        num_nodes = n
    elif "src" in arrays and "dst" in arrays:
        src, dst = arrays.pop("src"), arrays.pop("dst")
        if src.shape != dst.shape or src.ndim != 1:
            raise DataError(f"{path}: src and dst must be 1-D and of equal length")
        if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
            raise DataError(f"{path}: src and dst must be integer arrays, got {src.dtype}/{dst.dtype}")
        if num_nodes is None:
            num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    else:
        raise DataError(f"{path}: needs arrays src+dst or indptr+indices (found {sorted(arrays) or 'none'})")
    if arrays:
        raise DataError(f"{path}: unknown arrays {sorted(arrays)}")
    if feat is not None and feat.ndim != 2:
        raise DataError(f"{path}: feat must be 2-D (nodes x dims), got shape {feat.shape}")
    if label is not None and not np.issubdtype(label.dtype, np.integer):
        raise DataError(f"{path}: label must be integer class ids, got {label.dtype}")
    return Graph.from_edges(
        name,
        num_nodes,
        src,
        dst,
        etype=None if etype is None else etype.astype(np.int64),
        feat=feat,
        label=None if label is None else label.astype(np.int64),
        masks=masks,
        node_ids=node_ids,
    )
