"""Node features and labels from their own files (graph.features, graph.labels).

Formats, chosen by extension:
- `.npy`: one row per node, row i = node i (positional). Features: 2-D numbers; labels: 1-D integers
  (-1 = unlabelled) or strings (class names, "" = unlabelled). Its header is checked before its data
  is read (npz.read_npy), and np.load(allow_pickle=False): data only.
- `.npz` (features only): a scipy.sparse matrix saved by `save_npz` (csr, csc or coo), row i = node i;
  its arrays are header-checked and read as data, never unpickled.
- `.csv`, `.tsv`, `.parquet` (pyarrow): a table. With an `id` column, each row names its node by the
  edge list's id (keyed; surrounding spaces stripped, as the edge list's fields are): ids only these
  files name are nodes too (isolated nodes are kept, with a DataWarning counting them and showing the
  first few, so a typo or a stray space is seen). Without one, row i = node i, and a column named as ids
  often are (`node_id`, `ID`) is refused: it would be a feature, or ignored. Features: every other
  column is a numeric feature. Labels: a `label` column (a parquet dictionary column is decoded),
  integers (-1 or empty = unlabelled) or strings (class names); a node without a row is unlabelled.

Features are float32, whatever the file holds (numpy's float64 default, integers): the models compute in
float32, and a value beyond float32's range is an error, as NaN and inf are.

String labels become class ids in sorted order, their names kept as the graph's class_names, so a
prediction can be written as the user's own class name. Ids are read as text and typed once the edge
list says whether its ids are integers or strings (`typed`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graphtrain.runtime.data.graph import Features, Graph
from graphtrain.runtime.data.npz import read_npy, read_npz  # the header-checked readers
from graphtrain.runtime.errors import DataError

ID_COLUMN = "id"
LABEL_COLUMN = "label"
# Names a user's node id column often has (DGL's and PyG's CSVs, pandas' index): without an `id` column a
# table is positional, so such a column would silently be a feature, or be ignored beside `label` while
# the rows label nodes 0..n-1 in file order.
ID_LIKE = frozenset({"id", "node", "nodes", "node_id", "nodeid", "node id", "nid", "index"})
TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq")
_ID = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class NodeTable:
    """The rows of a features or labels file, not yet matched to the graph's nodes."""

    path: Path
    what: str  # "features" | "labels"
    ids: np.ndarray | None  # keyed: one id per row (unicode as read, int64 once typed); None: row i = node i
    values: Features  # features: (rows, dims) dense or CSR; labels: int64 class ids, -1 = unlabelled
    class_names: np.ndarray | None = None  # labels given as strings: class i is class_names[i]

    @property
    def rows(self) -> int:
        return int(self.values.shape[0])


# ------------------------------------------------------------------------------------------- reading


def read_features(path: Path) -> NodeTable:
    """Features from .npy (dense), .npz (scipy sparse) or a table (.csv/.tsv/.parquet).

    Raises:
        DataError: naming the file and the bad column, row or value.
    """
    suffix = path.suffix.lower()
    if suffix == ".npy":
        feat = read_npy(path)
        _check_numbers(path, feat, 2)
        return NodeTable(path, "features", None, as_float32(path, feat))
    if suffix == ".npz":
        return NodeTable(path, "features", None, _load_sparse(path))
    table = _read_table(path)
    ids = _id_column(path, table)
    misnamed_id(path, table.column_names)
    columns = [c for c in table.column_names if c != ID_COLUMN]
    if not columns:
        raise DataError(f"{path}: no feature columns (every column but `{ID_COLUMN}` is a feature)")
    feat = np.empty((table.num_rows, len(columns)), dtype=np.float32)
    for j, column in enumerate(columns):
        feat[:, j] = _numeric_column(path, table, column)
    _check_numbers(path, feat, 2)
    return NodeTable(path, "features", ids, feat)


def read_labels(path: Path) -> NodeTable:
    """Labels from .npy (1-D) or a table with a `label` column (and optionally `id`).

    Raises:
        DataError: naming the file and the bad column, row or value.
    """
    if path.suffix.lower() == ".npy":
        arr = read_npy(path)
        if arr.ndim != 1:
            raise DataError(f"{path}: labels must be 1-D (one per node), got shape {arr.shape}")
        if arr.dtype.kind == "U":
            label, names = encode_names(arr, arr != "")
            return NodeTable(path, "labels", None, label, names)
        return NodeTable(path, "labels", None, _integer_labels(path, arr))
    table = _read_table(path)
    ids = _id_column(path, table)
    misnamed_id(path, table.column_names)
    if LABEL_COLUMN not in table.column_names:
        raise DataError(f"{path}: no `{LABEL_COLUMN}` column (columns: {', '.join(table.column_names)})")
    import pyarrow as pa

    column = table.column(LABEL_COLUMN)
    if pa.types.is_dictionary(column.type):  # pandas' category
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        present = np.asarray(column.is_valid())
        values = np.char.strip(np.array(column.fill_null("").to_pylist(), dtype=np.str_))
        label, names = encode_names(values, present & (values != ""))
        return NodeTable(path, "labels", ids, label, names)
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise DataError(f"{path}: column `{LABEL_COLUMN}` holds {column.type}, not integers or class names")
    values = np.array(column.to_numpy(zero_copy_only=False), dtype=np.float64)  # a copy: written below
    values[np.isnan(values)] = -1  # an empty cell: unlabelled
    return NodeTable(path, "labels", ids, _integer_labels(path, values))


def encode_names(values: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class names -> class ids in sorted name order (-1 where not present), and the names."""
    names, inverse = np.unique(values[present], return_inverse=True)
    label = np.full(len(values), -1, dtype=np.int64)
    label[present] = inverse
    return label, names.astype(np.str_)


def _integer_labels(path: Path, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (np.abs(arr) >= 2.0**63)  # cast: any int64
        if bad.any():
            row = int(np.argmax(bad))
            raise DataError(f"{path}: label {arr[row]} ({_at(path, row)}) is not a class id")
    elif arr.dtype.kind not in "biu":
        raise DataError(f"{path}: labels must be integers or strings, got {arr.dtype}")
    label = arr.astype(np.int64)
    if label.size and label.min() < -1:
        row = int(np.argmax(label < -1))
        raise DataError(f"{path}: label {label[row]} ({_at(path, row)}) is negative (-1 means unlabelled)")
    return label


def _at(path: Path, row: int) -> str:
    """Where value `row` (0-based) of a file is, as its reader counts: an array's index, a CSV file's line
    (its header is line 1, as typed graphs' files say), a Parquet table's row from 1."""
    if path.suffix == ".npy":
        return f"index {row}"
    return f"line {row + 2}" if path.suffix == ".csv" else f"row {row + 1}"


def as_float32(path: Path, feat: np.ndarray, what: str = "feature") -> np.ndarray:
    """`feat` (numbers, finite) as float32, what the models compute in; a value beyond float32's range
    is an error naming it (large integers merely lose precision, as float32 does)."""
    if feat.dtype == np.float32:
        return feat
    with np.errstate(over="ignore"):  # checked just below, naming the value
        out = feat.astype(np.float32)
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        where = tuple(int(v) for v in np.argwhere(~np.isfinite(out))[0])
        raise DataError(f"{path}: {what} {feat[where]} at {list(where)} is beyond float32's range")
    return out


def _load_sparse(path: Path) -> sp.csr_matrix:
    """A scipy.sparse.save_npz archive, read as arrays (header-checked) and rebuilt as CSR."""

    arrays = read_npz(path)
    fmt = arrays.get("format")
    if fmt is None or "shape" not in arrays:
        found = ", ".join(sorted(arrays)) or "none"
        raise DataError(
            f"{path}: not a scipy.sparse matrix (save_npz writes format, shape, data, ...; found {found}); "
            "dense features belong in a .npy"
        )
    kind = bytes(fmt.reshape(())).decode() if fmt.dtype.kind == "S" else str(fmt.reshape(()))
    shape = tuple(int(v) for v in arrays["shape"])
    no_columns(path, shape)
    try:
        if kind in ("csr", "csc"):
            cls = sp.csr_matrix if kind == "csr" else sp.csc_matrix
            mat = cls((arrays["data"], arrays["indices"], arrays["indptr"]), shape=shape)
            # indices and indptr checked before scipy's native code trusts them: an out-of-range index
            # in a csc was a segfault on the conversion to csr, in a csr a row reaching other rows
            mat.check_format(full_check=True)
        elif kind == "coo":
            mat = sp.coo_matrix((arrays["data"], (arrays["row"], arrays["col"])), shape=shape)
        else:
            raise DataError(f"{path}: sparse format {kind!r}; save features as csr (scipy.sparse.save_npz)")
        csr = sp.csr_matrix(mat)
    except (KeyError, ValueError, TypeError) as exc:
        raise DataError(f"{path}: not a consistent {kind} matrix ({exc})") from None
    _check_numbers(path, csr.data, 1)
    csr.data = as_float32(path, csr.data)
    csr.sum_duplicates()  # canonical: each nonzero column of a row stored once, in order (as a feature
    csr.eliminate_zeros()  # bag reads them: an explicit zero or a repeat would join it)
    return csr


def no_columns(path: Path, shape: tuple[int, ...]) -> None:
    """Features of no column passed every check, and the trainer died on its first batch.

    Raises:
        DataError: `shape` (nodes x dims) has no column, naming the file.
    """
    if len(shape) == 2 and shape[1] < 1:
        raise DataError(f"{path}: features of shape {tuple(shape)} have no column (at least one per node)")


def _check_numbers(path: Path, arr: np.ndarray, ndim: int) -> None:
    if arr.ndim != ndim:
        raise DataError(f"{path}: features must be 2-D (nodes x dims), got shape {arr.shape}")
    if ndim == 2:
        no_columns(path, arr.shape)
    if arr.dtype.kind not in "biuf":
        raise DataError(f"{path}: features must hold numbers, got {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        where = tuple(int(v) for v in np.argwhere(~np.isfinite(arr))[0])
        raise DataError(f"{path}: feature {arr[where]} at {list(where)} (features must be finite)")


def _read_table(path: Path) -> Any:
    """A .csv/.tsv/.parquet file as a pyarrow Table (ids kept as text, so 007 stays 007)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataError(f"{path}: unknown node file type {suffix!r} (.npy, .npz, .csv, .tsv or .parquet)")
    try:
        if suffix in (".parquet", ".pq"):
            table = pq.read_table(path)
        else:
            table = pacsv.read_csv(
                path,
                parse_options=pacsv.ParseOptions(delimiter="," if suffix == ".csv" else "\t"),
                convert_options=pacsv.ConvertOptions(column_types={ID_COLUMN: pa.string()}),
            )
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable table ({str(exc).splitlines()[0]})") from None
    twice = repeated_column(table.column_names)
    if twice is not None:
        raise DataError(f"{path}: the header names column {twice!r} twice: name each column once")
    if table.num_rows == 0:
        raise DataError(f"{path}: no rows")
    return table


def repeated_column(names: list[str]) -> str | None:
    """The first column name of a table's header that repeats, else None: pyarrow reads such a file,
    and its table.column(name) then raises KeyError (a traceback in every command)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def misnamed_id(path: Path, columns: list[str]) -> None:
    """DataError when a table has no `id` column but one named like node ids (`node_id`, `ID`): read as
    positional, its rows would be matched to nodes by their order, not by that column."""
    if ID_COLUMN in columns:
        return
    for column in columns:
        if column.strip().lower() in ID_LIKE:
            raise DataError(
                f"{path}: column {column!r} looks like node ids, but only a column named `{ID_COLUMN}` keys "
                f"the rows (without it row i is node i): rename it to `{ID_COLUMN}`"
            )


def _id_column(path: Path, table: Any) -> np.ndarray | None:
    if ID_COLUMN not in table.column_names:
        return None
    column = table.column(ID_COLUMN)
    if column.null_count:
        row = int(np.argmin(np.asarray(column.is_valid())))
        raise DataError(f"{path}: {_at(path, row)} has no {ID_COLUMN}")
    ids = np.array([str(v).strip() for v in column.to_pylist()], dtype=np.str_)
    _unique_ids(path, ids, ids)
    return ids


def _unique_ids(path: Path, ids: np.ndarray, written: np.ndarray) -> None:
    """DataError naming the first id that two rows share (`written`: each row's id as in the file)."""
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    same = np.flatnonzero(ranked[1:] == ranked[:-1])
    if same.size:
        a, b = sorted((int(order[same[0]]), int(order[same[0] + 1])))
        x, y = str(written[a]), str(written[b])
        both = f"id {x!r}" if x == y else f"ids {x!r} and {y!r} (the same integer)"
        raise DataError(f"{path}: {both} on {_at(path, a)} and {_at(path, b)}: one row per node")


def _numeric_column(path: Path, table: Any, column: str) -> np.ndarray:
    import pyarrow as pa

    col = table.column(column)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
        raise DataError(f"{path}: column {column!r} holds {col.type}, not numbers (features are numeric)")
    if col.null_count:
        row = int(np.argmin(np.asarray(col.is_valid())))
        raise DataError(
            f"{path}: column {column!r} has no value on {_at(path, row)} (an empty cell, or one that reads "
            "as missing: NA, NULL, nan, N/A; every feature needs a value)"
        )
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float32)


# ------------------------------------------------------------------------------------------ matching


def typed(table: NodeTable, string_ids: bool) -> NodeTable:
    """`table` with its ids as the graph's ids are: unicode, or int64 (each a decimal integer).

    Raises:
        DataError: an id that is not an integer where the graph's ids are, naming the file and row.
    """
    ids = table.ids
    if ids is None or (ids.dtype.kind == "U") == string_ids:
        return table
    if string_ids:
        return dataclasses.replace(table, ids=ids.astype(np.str_))
    for row, value in enumerate(ids.tolist()):
        if not _ID.fullmatch(value) or not 0 <= int(value) < 2**63:
            raise DataError(
                f"{table.path}: id {value!r} ({_at(table.path, row)}) is not a non-negative integer id like "
                "the edge list's (set graph.nodeIds: string for ids that are names)"
            )
    numbers = ids.astype(np.int64)
    _unique_ids(table.path, numbers, ids)
    return dataclasses.replace(table, ids=numbers)


def positions(universe: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each of `ids` in `universe` (any order, no duplicates), and which ids were found."""
    order = np.argsort(universe, kind="stable")
    ranked = universe[order]
    at = np.searchsorted(ranked, ids).clip(0, max(len(ranked) - 1, 0))
    found = ranked[at] == ids if len(ranked) else np.zeros(len(ids), dtype=bool)
    return order[at], found


def attach(g: Graph, source: Path, feats: NodeTable | None, labels: NodeTable | None) -> None:
    """Put the features and labels of their files on `g`, each row on its node.

    Raises:
        DataError: a row count that is not the node count, an id that is not a node, a node without
            features, or an archive that already holds the array.
    """
    n = g.num_nodes
    universe = g.node_ids if g.node_ids is not None else np.arange(n, dtype=np.int64)
    for table, existing in ((feats, g.feat), (labels, g.label)):
        if table is None:
            continue
        if existing is not None:
            key = "feat" if table.what == "features" else "label"
            raise DataError(f"{source} already holds {key}; remove graph.{table.what} or the array")
        if table.ids is None:
            if table.rows != n:
                raise DataError(
                    f"{table.path}: {table.rows:,} rows but {source} has {n:,} nodes (row i is node i)"
                )
            values = table.values
        else:
            values = _place(typed(table, universe.dtype.kind == "U"), universe, source)
        if table.what == "features":
            g.feat = values
        else:
            g.label = np.asarray(values)
            g.class_names = table.class_names
            labelled = g.label[g.label >= 0]
            g.num_classes = (
                len(table.class_names) if table.class_names is not None else int(labelled.max(initial=-1)) + 1
            )
    g.validate()


def _place(table: NodeTable, universe: np.ndarray, source: Path) -> Features:
    assert table.ids is not None
    at, found = positions(universe, table.ids)
    if not found.all():
        bad = table.ids[np.argmin(found)].item()
        raise DataError(f"{table.path}: id {bad!r} is not a node of {source}")
    n = len(universe)
    if table.what == "labels":
        label = np.full(n, -1, dtype=np.int64)
        label[at] = table.values
        return label
    have = np.zeros(n, dtype=bool)
    have[at] = True
    if not have.all():
        lacking = universe[~have]
        raise DataError(
            f"{table.path}: {len(lacking):,} nodes have no row (e.g. {lacking[0].item()!r}); every node "
            "needs its features"
        )
    feat = np.empty((n, table.values.shape[1]), dtype=table.values.dtype)
    feat[at] = table.values
    return feat
