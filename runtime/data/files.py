"""Generic graph files: edge lists (.csv/.tsv, header optional) and numpy archives (.npz).

Edge list: UTF-8 text, one edge per line, `src<sep>dst[<sep>etype]`, lines starting with `#` are comments
(counted in a DataWarning). Node ids (graph.nodeIds) are integers (decimal, within int64), strings (any
text: names), or auto: integers when every id is a decimal integer written canonically (`007` or `+7`
makes them strings, so `007` and `7` stay two nodes and keep their spelling). The first line may be a
header of names only (`src dst`, `source,target,type`); with string ids only a line of known column names
(HEADER_NAMES) is a header, as any other line is an edge between two named nodes. An integer-id line that
is not integers (`0.5 1`, `0x10 1`) is an error naming the line. Edge types are integers or names
(numbered in sorted order).

Node numbering: with `num_nodes`, integer ids are used as they are and must lie in [0, num_nodes); with
a positional node file (row i = node i) the same with its row count; otherwise the ids of the edges and
of the keyed node files are sorted and numbered 0..n-1, their values kept as the graph's node_ids (a
sorted order, so the same file gives the same numbering everywhere). A compaction that drops integer
ids from a numbered range (isolated nodes) is a DataWarning, never silent, and so are the ids of keyed
node files that the edge list lacks (they become isolated nodes: a typo or a stray space shows).

npz: `src`+`dst` (or `indptr`+`indices`), optional `num_nodes` (one integer), `feat` (finite numbers),
`label`, `train_mask`, `val_mask`, `test_mask`, `etype`, `node_ids`; ids and labels integer arrays within
int64; `feat` is read as float32. Loaded with allow_pickle=False: an archive is data, never code. Every
member's .npy header is checked before its data is read, so an archive promising more than it holds or
than fits in memory is refused without allocating it.
"""

from __future__ import annotations

import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np

from graphtrain.runtime import arrays
from graphtrain.runtime.data import nodefiles, text
from graphtrain.runtime.data.cache import reason
from graphtrain.runtime.data.graph import MASKS, Graph
from graphtrain.runtime.data.npz import read_npz
from graphtrain.runtime.errors import DataError, DataWarning


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
    path: str | Path,
    fmt: str = "auto",
    num_nodes: int | None = None,
    name: str | None = None,
    node_ids: str = "auto",
    features: str | Path | None = None,
    labels: str | Path | None = None,
) -> Graph:
    """Load an edge list or npz file into a Graph, with node features and labels from their own files.

    `node_ids` (auto|integer|string) says how an edge list's ids are read; `features` and `labels` are
    files read by nodefiles (.npy/.npz/.csv/.tsv/.parquet). Node ids are sorted into 0..n-1, so the
    numbering is the same on every run and every machine.

    Raises:
        DataError: missing or unreadable file, text that is not UTF-8, bad ids (naming the line),
            arrays of the wrong kind (naming the array), an empty graph, or a graph too big for memory.
    """
    path = regular_file(Path(path))
    name = name or path.stem
    kind = detect_format(path, fmt)
    feats = None if features is None else nodefiles.read_features(regular_file(Path(features), "features"))
    labs = None if labels is None else nodefiles.read_labels(regular_file(Path(labels), "labels"))
    if kind == "npz":
        g = _load_npz(path, num_nodes, name)
        nodefiles.attach(g, path, feats, labs)
        return g
    edges = read_edge_list(path, kind, node_ids)
    return assemble(name, edges, num_nodes, feats, labs)


def resolve(path: str, base_dir: Path | None) -> Path:
    """A spec's path: absolute as it is, relative from `base_dir` (the spec's directory) when given."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def regular_file(path: Path, what: str = "graph") -> Path:
    """`path` if it is a regular file (symlinks followed), else DataError saying what it is instead."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: {reason(exc)}") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{path}: is a directory, not a {what} file")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path}: not a regular file")
    return path


# ------------------------------------------------------------------------------------------ edge lists

_ID = re.compile(r"[+-]?[0-9]+")  # ASCII decimal: not 0x10, 1_000, 0.5 or other scripts' digits
# a first line of these names is a header even when the ids are strings (any names-only line could be
# an edge between two named nodes otherwise)
HEADER_NAMES = frozenset(
    ("src", "dst", "source", "target", "from", "to", "u", "v", "head", "tail", "node1", "node2")
    + ("etype", "type", "relation", "rel", "edge_type", "label")
)


@dataclass(frozen=True)
class EdgeList:
    """An edge list as written: ids int64 or unicode (not yet numbered), edge types numbered."""

    path: Path
    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray | None = None
    relation_names: np.ndarray | None = None  # edge type i is relation_names[i] (named edge types)


def _is_id(token: str) -> bool:
    return _ID.fullmatch(token) is not None


def _is_canonical(token: str) -> bool:
    """An integer written as int() prints it back: `7`, not `007` or `+7` (which name other nodes)."""
    return _is_id(token) and _NON_CANONICAL.match(token) is None


def _is_name(token: str) -> bool:
    """A header field: a name such as `src`, nothing that looks like a number (0.5, -1, 0x10, nan)."""
    if not token or token[0] in "+-.0123456789":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def read_edge_list(path: Path, kind: str, node_ids: str = "auto") -> EdgeList:
    """The edges of a .csv/.tsv edge list, ids as written. `node_ids` integer: every id must be a
    decimal integer; string: ids are text; auto: integer when every id is a decimal integer written as
    Python writes it (`007` and `+7` name other nodes than `7`, so one of them makes every id a string:
    merging distinct texts would lose data). A third column holds edge types: integers, or names
    (numbered in sorted order, kept as relation_names). A file that looks like (head, relation, tail)
    triples is a DataWarning (graph.triples reads those).

    Raises:
        DataError: naming the file, the line and the bad value.
    """
    numbered = text.numbered_lines(path)
    edges = None
    if node_ids != "string":
        edges = _integer_edge_list(path, numbered, "," if kind == "csv" else None, node_ids == "integer")
    if edges is None:
        edges = _text_edge_list(text.split_rows(path, numbered, kind), node_ids)
    _warn_if_triples(edges, numbered, kind)
    return edges


# a field written otherwise than int() would print it back: 007, +7 (`(?<!\S)`: at a field's start)
_NON_CANONICAL = re.compile(r"(?<!\S)(?:\+|0[0-9])")
TRIPLE_HEADERS = ({"head", "tail"}, {"subject", "object"}, {"h", "r", "t"})
TRIPLE_SHARE = 0.5  # more distinct edge types than this share of edges: relations of triples, not types
TRIPLE_MIN_EDGES = 20


def _warn_if_triples(edges: EdgeList, numbered: list[tuple[int, str]], kind: str) -> None:
    first = {f.strip().lower() for f in (numbered[0][1].split("," if kind == "csv" else None))}
    why = ""
    if any(names <= first for names in TRIPLE_HEADERS):
        why = f"its header names {', '.join(sorted(first))}"
    elif edges.etype is not None and len(edges.etype) >= TRIPLE_MIN_EDGES:
        types = int(arrays.unique(edges.etype).size)
        if types > TRIPLE_SHARE * len(edges.etype):
            why = f"{types:,} edge types among {len(edges.etype):,} edges"
    if why:
        warnings.warn(
            f"{edges.path}: looks like (head, relation, tail) triples ({why}), but is read as an edge "
            "list src, dst, etype: a knowledge graph belongs in graph.triples (data info --triples)",
            DataWarning,
            stacklevel=3,
        )


def _integer_edge_list(
    path: Path, numbered: list[tuple[int, str]], sep: str | None, strict: bool
) -> EdgeList | None:
    """The fast path: every field a decimal integer (ids and edge types), parsed by numpy at once.
    None when a field is not an integer, or not written canonically, and `strict` is off (the ids are
    strings then)."""
    if not numbered:
        raise DataError(f"{path}: no edges (an empty graph cannot be partitioned)")
    start = 1 if all(_is_name(f.strip()) for f in numbered[0][1].split(sep)) else 0  # a header: names only
    rows = numbered[start:]
    if not rows and not strict:
        return None  # one line of names: an edge between two named nodes, not a header
    if not rows:
        raise DataError(f"{path}: no edges (an empty graph cannot be partitioned)")
    width = len(rows[0][1].split(sep))
    if width not in (2, 3):
        if not strict:
            return None  # names with spaces, quoted commas: the text reader's
        raise DataError(f"{path}:{rows[0][0]}: expected 2 or 3 columns (src, dst[, etype]), found {width}")
    ragged = _ragged_row(rows, sep, width)
    if ragged is not None:
        if not strict:
            return None  # the text reader names the line
        raise DataError(f"{path}:{ragged[0]}: expected {width} columns, found {ragged[1]}")
    text_ = " ".join(ln.replace(",", " ") if sep == "," else ln for _, ln in rows)
    flat = text_.split()
    try:
        # numpy parses ids as int() does, which also takes 1_000 and other scripts' digits: not ids here
        if len(flat) != width * len(rows) or not text_.isascii() or "_" in text_:
            raise ValueError("ragged or not decimal")
        arr = np.array(flat, dtype=np.int64).reshape(-1, width)
    except (ValueError, OverflowError):
        if not strict and not all(_is_id(f) for f in flat):
            return None
        _raise_bad_line(path, rows, sep, width, numbered[0][0])
    if not strict and _NON_CANONICAL.search(text_):
        return None
    ids = arr[:, :2]
    checks = [((ids < 0).any(axis=1), "negative id")]
    if width == 3:
        checks.append((arr[:, 2] < 0, "negative edge type"))
    for bad, what in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{path}:{rows[i][0]}: {what} in {rows[i][1].strip()!r}")
    return EdgeList(path, arr[:, 0], arr[:, 1], arr[:, 2] if width == 3 else None)


def _ragged_row(rows: list[tuple[int, str]], sep: str | None, width: int) -> tuple[int, int] | None:
    """(line number, field count) of the first row without `width` fields, else None. The fast path
    parses every field as one stream, so a row of 3 fields beside a row of 1 would shift every later
    edge into other nodes without an error; a CSV's empty field (`1,,2`) counts as a field."""
    for lineno, line in rows:
        found = len(line.split(sep))
        if found != width:
            return lineno, found
    return None


def _text_edge_list(rows: text.TextRows, node_ids: str) -> EdgeList:
    """The slow path: ids that are names (or integer ids beside named edge types)."""
    fields = rows.fields
    if not fields:
        raise DataError(f"{rows.path}: no edges (an empty graph cannot be partitioned)")
    first = fields[0]
    names_only = all(_is_name(f) for f in first)
    body = fields[1:] if names_only else fields
    integer = node_ids == "integer" or (
        node_ids == "auto" and bool(body) and all(_is_canonical(f) for row in body for f in row[:2])
    )
    header = names_only and (integer or all(f.lower() in HEADER_NAMES for f in first))
    skip = 1 if header else 0
    if len(fields) == skip:
        raise DataError(f"{rows.path}: no edges (an empty graph cannot be partitioned)")
    width = len(fields[skip])
    if width not in (2, 3):
        raise DataError(f"{rows.where(skip)}: expected 2 or 3 columns (src, dst[, etype]), found {width}")
    for i in range(skip, len(fields)):
        if len(fields[i]) != width:
            raise DataError(f"{rows.where(i)}: expected {width} columns, found {len(fields[i])}")
        if integer:
            for f in fields[i][:2]:
                if not _is_id(f):
                    hint = " (set graph.nodeIds: string for ids that are names)"
                    raise DataError(f"{rows.where(i)}: {f!r} is not an integer id{hint}")
                if not 0 <= int(f) < 2**63:
                    what = "negative id" if int(f) < 0 else f"id {f} does not fit in int64{_BIG}"
                    raise DataError(f"{rows.where(i)}: {what} in {' '.join(fields[i])!r}")
    data = fields[skip:]
    dtype = np.int64 if integer else np.str_
    src = np.array([r[0] for r in data], dtype=dtype)
    dst = np.array([r[1] for r in data], dtype=dtype)
    if width == 2:
        return EdgeList(rows.path, src, dst)
    types = [r[2] for r in data]
    if all(_is_canonical(t) for t in types):
        etype = np.array(types, dtype=np.int64)
        if (etype < 0).any():
            i = int(np.argmax(etype < 0)) + skip
            raise DataError(f"{rows.where(i)}: negative edge type in {' '.join(fields[i])!r}")
        return EdgeList(rows.path, src, dst, etype)
    names, etype = np.unique(np.array(types, dtype=np.str_), return_inverse=True)
    return EdgeList(rows.path, src, dst, etype.astype(np.int64), names)


def assemble(
    name: str,
    edges: EdgeList,
    num_nodes: int | None,
    feats: nodefiles.NodeTable | None = None,
    labels: nodefiles.NodeTable | None = None,
) -> Graph:
    """The Graph of an edge list and its node files: which nodes exist and how they are numbered.

    - `num_nodes`: integer ids used as they are, in [0, num_nodes).
    - a positional node file (.npy, or a table without `id`): row i is node i, so ids are integers in
      [0, rows).
    - otherwise the nodes are every id of the edge list and of the keyed node files, sorted: a node that
      only a features or labels file names is an isolated node, kept.
    """
    string_ids = edges.src.dtype.kind == "U"
    feats = None if feats is None else nodefiles.typed(feats, string_ids)
    labels = None if labels is None else nodefiles.typed(labels, string_ids)
    tables = [t for t in (feats, labels) if t is not None]
    positional = [t for t in tables if t.ids is None]
    if string_ids and (num_nodes is not None or positional):
        what = "graph.numNodes" if num_nodes is not None else f"{positional[0].path} (no id column)"
        raise DataError(
            f"{edges.path}: node ids are strings, so {what} cannot number them: give the node files "
            "an `id` column (.csv/.parquet) naming each node"
        )
    for t in positional:
        if num_nodes is not None and t.rows != num_nodes:
            raise DataError(
                f"{t.path}: {t.rows:,} rows but graph.numNodes is {num_nodes:,} (row i is node i)"
            )
        num_nodes = t.rows  # every positional file has this many rows (checked against the first)
    src, dst = edges.src, edges.dst
    node_ids = None
    if num_nodes is not None:
        named = [(edges.path, np.concatenate([src, dst]))] + [(t.path, t.ids) for t in tables]
        for where, ids in named:
            if ids is not None and ids.size and int(ids.max()) >= num_nodes:
                why = "graph.numNodes" if not positional else f"the rows of {positional[0].path}"
                raise DataError(f"{where}: id {int(ids.max())} is outside [0, {num_nodes:,}) ({why})")
    else:
        keyed = [t.ids for t in tables if t.ids is not None]
        node_ids, inverse = np.unique(np.concatenate([src, dst, *keyed]), return_inverse=True)
        src, dst = inverse[: len(src)], inverse[len(src) : 2 * len(src)]
        num_nodes = len(node_ids)
        if keyed:
            _warn_unknown_ids(edges, tables)
        if not keyed and not string_ids:
            missing = dropped_ids(node_ids)
            if missing:
                warnings.warn(
                    f"{edges.path}: {missing:,} ids between {int(node_ids[0])} and {int(node_ids[-1])} "
                    "have no edge and are left out (the others are renumbered 0..n-1): set graph.numNodes "
                    "(or give a features/labels file) to keep them",
                    DataWarning,
                    stacklevel=3,
                )
    g = Graph.from_edges(
        name, num_nodes, src, dst, etype=edges.etype, node_ids=node_ids, relation_names=edges.relation_names
    )
    nodefiles.attach(g, edges.path, feats, labels)
    return g


def _warn_unknown_ids(edges: EdgeList, tables: list[nodefiles.NodeTable]) -> None:
    """A DataWarning per keyed node file naming ids the edge list lacks: they become isolated nodes."""
    edge_nodes = arrays.unique(np.concatenate([edges.src, edges.dst]))
    for t in tables:
        if t.ids is None:
            continue
        _, found = nodefiles.positions(edge_nodes, t.ids)
        if not found.all():
            extra = t.ids[~found]
            shown = ", ".join(repr(v.item()) for v in extra[:5]) + (", ..." if len(extra) > 5 else "")
            warnings.warn(
                f"{t.path}: {len(extra):,} ids are not in {edges.path} ({shown}): they become nodes "
                "without edges",
                DataWarning,
                stacklevel=4,
            )


_BIG = " (set graph.nodeIds: string for ids beyond int64)"


def _raise_bad_line(
    path: Path, rows: list[tuple[int, str]], sep: str | None, width: int, first: int
) -> NoReturn:
    for lineno, line in rows:
        fields = [f.strip() for f in line.split(sep)]
        if len(fields) != width:
            raise DataError(f"{path}:{lineno}: expected {width} columns, found {len(fields)}")
        for f in fields:
            if not _is_id(f):
                hint = " (set graph.nodeIds: string for ids that are names)"
                if lineno == first:
                    hint = " (a header line may hold only names, such as src and dst)"
                raise DataError(f"{path}:{lineno}: {f!r} is not an integer id{hint}")
            if not -(2**63) <= int(f) < 2**63:
                raise DataError(f"{path}:{lineno}: id {f} does not fit in int64{_BIG}")
    raise DataError(f"{path}: could not parse the edge list")


def dropped_ids(node_ids: np.ndarray) -> int:
    """How many integers between the smallest and the largest id are missing, when they look like
    isolated nodes of a numbered range (at most as many as the ids present); 0 for sparse keys such
    as database ids, whose gaps mean nothing."""
    if node_ids.size == 0 or node_ids.dtype.kind == "U":
        return 0
    missing = int(node_ids[-1]) - int(node_ids[0]) + 1 - len(node_ids)
    return missing if 0 < missing <= len(node_ids) else 0


# ------------------------------------------------------------------------------------------------ npz

_FEATURE_CHUNK = 1 << 16  # rows checked for NaN/inf at a time


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
    nodefiles.no_columns(path, feat.shape)
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


def _check_rows_reached(path: Path, reached: int, **arrays: np.ndarray | None) -> None:
    """Without num_nodes an archive's node count is the largest edge id + 1: per-node arrays with more
    rows mean the last nodes have no edge, which only num_nodes can say."""
    for key, arr in arrays.items():
        if arr is not None and arr.ndim >= 1 and arr.shape[0] > reached:
            extra = arr.shape[0] - reached
            raise DataError(
                f"{path}: {key} has {arr.shape[0]:,} rows but the edges reach only {reached:,} nodes: the "
                f"last {extra:,} nodes have no edge: add num_nodes to the archive "
                f"(np.savez(..., num_nodes={arr.shape[0]}))"
            )


def _load_npz(path: Path, num_nodes: int | None, name: str) -> Graph:
    arrays = read_npz(path)
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
            _check_rows_reached(
                path,
                num_nodes,
                feat=feat,
                label=label,
                node_ids=node_ids,
                **{f"{k}_mask": m for k, m in masks.items()},
            )
    else:
        raise DataError(f"{path}: needs arrays src+dst or indptr+indices (found {sorted(arrays) or 'none'})")
    if arrays:
        raise DataError(f"{path}: unknown arrays {sorted(arrays)}")
    if feat is not None:
        _check_feat(path, feat)
        feat = nodefiles.as_float32(path, feat, "feat")
    g = Graph.from_edges(
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
    check_node_arrays(path, g.label, g.masks, g.node_ids)
    return g


def check_node_arrays(
    path: Path, label: np.ndarray | None, masks: dict[str, np.ndarray], node_ids: np.ndarray | None
) -> None:
    """An archive's per-node arrays mean what a labels file's would (shapes already checked): a label is
    a class id or -1 (unlabelled), a split holds labelled nodes only and no node is in two splits (a
    trainer's loss met an unlabelled target as an IndexError after partitioning; a test node also
    trained on inflates the reported accuracy), and node_ids name each node once (exports key rows
    by them).

    Raises:
        DataError: naming the array and the first node at fault.
    """
    if label is not None and label.size and label.min() < -1:
        row = int(np.argmax(label < -1))
        raise DataError(f"{path}: label {int(label[row])} (node {row}) is negative (-1 means unlabelled)")
    keys = sorted(masks)
    for i, key in enumerate(keys):
        if label is not None and (masks[key] & (label < 0)).any():
            row = int(np.argmax(masks[key] & (label < 0)))
            raise DataError(f"{path}: {key}_mask selects node {row}, which is unlabelled (label -1)")
        for other in keys[i + 1 :]:
            both = masks[key] & masks[other]
            if both.any():
                raise DataError(
                    f"{path}: {key}_mask and {other}_mask both select node {int(np.argmax(both))}: "
                    "a node belongs to one split"
                )
    if node_ids is not None:
        order = np.argsort(node_ids, kind="stable")
        same = np.flatnonzero(node_ids[order][1:] == node_ids[order][:-1])
        if same.size:
            a, b = int(order[same[0]]), int(order[same[0] + 1])
            raise DataError(
                f"{path}: node_ids holds {node_ids[a].item()!r} for nodes {a} and {b}: one id per node"
            )
