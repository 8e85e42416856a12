"""A typed graph from the user's own node and edge files (graph.nodes, graph.edges: contract/spec/
typed_graph.py, GraphStorm's graph-construction config field by field).

Each node type's files list its nodes (one row each, ids in `idColumn`), their feature columns and
their label; each edge type's files list its edges (`sourceColumn`, `destinationColumn`, feature
columns). Ids are read as text and scoped per node type: the graph's node i is node type t's id x, kept
as "t:x" in the partition and every output, so paper 1 and author 1 stay apart. Homogeneous node ids run
type by type in the order graph.nodes lists them, each type's nodes in file order; edge types are
numbered in graph.edges' order.

Node features become one array (graph.py): the types whose features share a width share its columns,
and when the widths differ each type gets a block of columns of its own. Labels of every type share one
class space (integer labels as they are; any non-integer label makes all labels class names). Edge
features likewise, one row per edge.

Everything is checked before a graph is made, each problem one line naming the file, the field and the
row or value (the row counts the header as line 1, as an editor shows it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.contract.spec import LABELLED_SPLIT, EdgeTypeFiles, NodeTypeFiles, Split, split_or
from graphtrain.runtime.data.files import regular_file
from graphtrain.runtime.data.graph import Graph, random_masks
from graphtrain.runtime.data.nodefiles import as_float32, encode_names, repeated_column
from graphtrain.runtime.errors import DataError

SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass
class NodeType:
    """One node type as read: ids in file order, features (rows x width) and labels (text, "" none)."""

    name: str
    ids: np.ndarray  # unicode
    feat: np.ndarray | None
    labels: np.ndarray | None  # unicode, "" = unlabelled


def _format(path: Path, fmt: str, field: str) -> str:
    if fmt != "auto":
        return fmt
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(
            f"{path}: {field}: cannot tell the format from {path.suffix or 'no extension'!r} "
            "(.csv, .tsv, .parquet, or set format)"
        )
    return kind


def read_table(path: Path, fmt: str, text_columns: list[str], field: str) -> Any:
    """A node or edge file as a pyarrow Table, `text_columns` read as strings (ids stay as written).

    Raises:
        DataError: the file is missing, unreadable or empty, naming it and `field`.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        regular_file(path, "table")
    except DataError as exc:  # what it is instead: missing, a directory, a FIFO (never "not found"),
        # the field first, as a missing graph.path, features or labels file is named (inputs.require_files)
        raise DataError(f"{field}: {path}: {str(exc).removeprefix(f'{path}: ')}") from None
    kind = _format(path, fmt, field)
    try:
        if kind == "parquet":
            table = pq.read_table(path)
        else:
            table = pacsv.read_csv(
                path,
                parse_options=pacsv.ParseOptions(delimiter="," if kind == "csv" else "\t"),
                convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in text_columns}),
            )
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path}: {field}: not a readable {kind} table ({str(exc).splitlines()[0]})"
        ) from None
    twice = repeated_column(table.column_names)
    if twice is not None:
        raise DataError(f"{path}: {field}: the header names column {twice!r} twice: name each column once")
    if table.num_rows == 0:
        raise DataError(f"{path}: {field}: no rows")
    return table


def _column(path: Path, table: Any, name: str, field: str) -> Any:
    if name not in table.column_names:
        raise DataError(f"{path}: {field}: no column {name!r} (the file has {', '.join(table.column_names)})")
    return table.column(name)


def _ids(path: Path, table: Any, name: str, field: str) -> np.ndarray:
    """A column of ids as stripped text; an empty cell is an error naming its line."""
    col = _column(path, table, name, field)
    values = [None if v is None else str(v).strip() for v in col.to_pylist()]
    bad = next((i for i, v in enumerate(values) if not v), None)
    if bad is not None:
        raise DataError(f"{path}: {field} {name!r} is empty on line {bad + 2}")
    return np.asarray(values, dtype=np.str_)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _features(path: Path, table: Any, columns: list[str], field: str) -> np.ndarray:
    """Feature columns as float32 (rows x width): numbers, or parquet lists of one length."""
    import pyarrow as pa

    twice = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
    if twice is not None:  # read twice, it would be two inputs of the model holding the same numbers
        raise DataError(f"{path}: {field} names column {twice!r} twice: list each feature column once")
    parts = []
    for name in columns:
        col = _column(path, table, name, field).combine_chunks()
        if col.null_count:
            row = int(np.argmin(np.asarray(col.is_valid())))
            raise DataError(
                f"{path}: {field} {name!r} has no value on line {row + 2} (an empty cell, or one that "
                "reads as missing: NA, NULL, nan, N/A)"
            )
        if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type):
            lengths = {len(v) for v in col.to_pylist()}
            if len(lengths) != 1:
                raise DataError(
                    f"{path}: {field} {name!r} holds lists of lengths {sorted(lengths)[:5]}: one width per "
                    "column"
                )
            values = np.asarray(col.to_pylist(), dtype=np.float64)
            if values.dtype.kind != "f":
                raise DataError(f"{path}: {field} {name!r} holds lists of non-numbers")
        elif pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type):
            values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)[:, None]
        else:  # the first cell that is not a number, not the column's first (which may be one)
            cells = [str(v) for v in col.to_pylist()]
            bad = next((i for i, v in enumerate(cells) if not _number(v)), 0)
            sample = f"{cells[bad]!r} on line {bad + 2}" if cells else "nothing"
            raise DataError(
                f"{path}: {field} {name!r} holds {col.type} ({sample}), not numbers (features are numeric)"
            )
        if not np.isfinite(values).all():
            row = int(np.argwhere(~np.isfinite(values))[0][0])
            raise DataError(f"{path}: {field} {name!r} is not finite on line {row + 2}")
        parts.append(values)
    return as_float32(path, np.concatenate(parts, axis=1))


def read_node_type(spec: NodeTypeFiles, base: Path, index: int) -> NodeType:
    """One graph.nodes entry's files, concatenated in order."""
    field = f"spec.graph.nodes[{index}]"
    ids, feats, labels = [], [], []
    for f, name in enumerate(spec.files):
        path = resolve(name, base)
        where = f"{field}.files[{f}]"
        table = read_table(
            path, str(spec.format), [spec.id_column, *([spec.label] if spec.label else [])], where
        )
        ids.append(_ids(path, table, spec.id_column, f"{field}.idColumn"))
        if spec.features:
            feats.append(_features(path, table, list(spec.features), f"{field}.features"))
            if feats[0].shape[1] != feats[-1].shape[1]:
                raise DataError(
                    f"{path}: {field}.features are {feats[-1].shape[1]} wide here but "
                    f"{feats[0].shape[1]} in {spec.files[0]}: one width per node type"
                )
        if spec.label:
            labels.append(_label_text(path, table, spec.label, f"{field}.label"))
    all_ids = np.concatenate(ids)
    _unique(all_ids, spec, base, ids, field)
    return NodeType(
        spec.type,
        all_ids,
        np.concatenate(feats) if feats else None,
        np.concatenate(labels) if labels else None,
    )


def _unique(
    all_ids: np.ndarray, spec: NodeTypeFiles, base: Path, per_file: list[np.ndarray], field: str
) -> None:
    """DataError naming a node id listed twice for one type (file and line of its second listing)."""
    order = np.argsort(all_ids, kind="stable")
    ranked = all_ids[order]
    same = np.flatnonzero(ranked[1:] == ranked[:-1])
    if not same.size:
        return
    second = int(max(order[same[0]], order[same[0] + 1]))
    starts = np.cumsum([0] + [len(p) for p in per_file])
    f = int(np.searchsorted(starts, second, side="right") - 1)
    node = str(all_ids[second])
    raise DataError(
        f"{resolve(spec.files[f], base)}: {field}.idColumn: node {spec.type} {node!r} is listed twice "
        f"(line {second - starts[f] + 2}): one row per node"
    )


def resolve(name: str, base: Path) -> Path:
    p = Path(name)
    return p if p.is_absolute() else base / p


def _columns_block(widths: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Each type's (first column, width): shared columns when every width is the same, else a block each."""
    if len(set(widths.values())) <= 1:
        return {t: (0, w) for t, w in widths.items()}
    blocks, first = {}, 0
    for t, w in widths.items():
        blocks[t] = (first, w)
        first += w
    return blocks


def _labels(types: list[NodeType], counts: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(label per node, -1 unlabelled; class names or None): integers as they are unless any label
    is not an integer, then every label a class name."""
    if all(t.labels is None for t in types):
        return None, None
    text = np.concatenate(
        [t.labels if t.labels is not None else np.full(len(t.ids), "", np.str_) for t in types]
    )
    return parse_labels(text, text != "")


INTEGER = re.compile(r"-?[0-9]{1,18}")  # ASCII digits that fit int64: a class id


def parse_labels(
    text: np.ndarray, present: np.ndarray, field: str = "spec.graph.nodes[].label"
) -> tuple[np.ndarray, np.ndarray | None]:
    """(class per row, -1 where not `present`; class names or None): integers as they are unless any
    label is not an integer (or one past int64, or of other digits than ASCII's), then every label a
    class name. -1 is an integer label's "unlabelled", as in a labels file.

    Raises:
        DataError: an integer label below -1, naming `field`."""
    if present.any() and all(INTEGER.fullmatch(v) for v in text[present].tolist()):
        label = np.full(len(text), -1, dtype=np.int64)
        label[present] = text[present].astype(np.int64)
        if label.min() < -1:
            raise DataError(
                f"{field}: a label is negative ({int(label.min())}); leave the cell empty (or -1) for no "
                "label"
            )
        return label, None
    return encode_names(text, present)


def load_typed(
    nodes: list[NodeTypeFiles], edges: list[EdgeTypeFiles], base: Path, name: str, split: Split | None = None
) -> Graph:
    """The typed graph of graph.nodes and graph.edges, paths relative to `base`; its labelled edges
    split by `split` (the default ratios when None).

    Raises:
        DataError: one line naming the file and field of the first problem found.
    """
    types = [read_node_type(spec, base, i) for i, spec in enumerate(nodes)]
    counts = np.array([len(t.ids) for t in types], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    n = int(offsets[-1])
    lookup = {t.name: (i, t.ids) for i, t in enumerate(types)}
    src_all, dst_all, etype_all, efeats, elabels = [], [], [], [], []
    for e, spec in enumerate(edges):
        s_t, rel, d_t = spec.relation
        field = f"spec.graph.edges[{e}]"
        paths = [resolve(fname, base) for fname in spec.files]
        again = next((f for f, q in enumerate(paths) if q in paths[:f]), None)
        if again is not None:  # its edges twice: multi-edges that are not, and a copy in another split
            raise DataError(
                f"{paths[again]}: {field}.files[{again}] lists a file already listed: list each once"
            )
        for f, path in enumerate(paths):
            text = [spec.source_column, spec.destination_column, *([spec.label] if spec.label else [])]
            table = read_table(path, str(spec.format), text, f"{field}.files[{f}]")
            pair = []
            for column, t_name, what in (
                (spec.source_column, s_t, "sourceColumn"),
                (spec.destination_column, d_t, "destinationColumn"),
            ):
                t_index, universe = lookup[t_name]
                ids = _ids(path, table, column, f"{field}.{what}")
                pair.append(offsets[t_index] + _find(universe, ids, path, f"{field}.{what}", t_name))
            src_all.append(pair[0])
            dst_all.append(pair[1])
            etype_all.append(np.full(len(pair[0]), e, dtype=np.int64))
            efeats.append(
                _features(path, table, list(spec.features), f"{field}.features") if spec.features else None
            )
            elabels.append(_label_text(path, table, spec.label, f"{field}.label") if spec.label else None)
    feat, blocks = _node_features(types, counts, offsets)
    label, class_names = _labels(types, counts)
    efeat = _edge_features(edges, efeats, [len(s) for s in src_all])
    src = np.concatenate(src_all) if src_all else np.empty(0, np.int64)
    dst = np.concatenate(dst_all) if dst_all else np.empty(0, np.int64)
    etype = np.concatenate(etype_all) if etype_all else np.empty(0, np.int64)
    sizes = [len(a) for a in src_all]
    targets, edge_class_names, values = _edge_targets(
        elabels, sizes, (src, etype, dst), split_or(split, LABELLED_SPLIT)
    )
    graph = Graph.from_edges(
        name,
        n,
        src,
        dst,
        etype=etype,
        efeat=efeat,
        feat=feat,
        label=label,
        class_names=class_names,
        node_ids=np.concatenate([np.char.add(f"{t.name}:", t.ids) for t in types]),
        ntype=np.repeat(np.arange(len(types), dtype=np.int64), counts),
        ntype_names=np.asarray([t.name for t in types], dtype=str),
        canonical_etypes=np.asarray([list(e.relation) for e in edges], dtype=str).reshape(-1, 3),
        feature_blocks=blocks,
        edge_targets=targets,
        edge_class_names=edge_class_names,
        edge_values=values,
    )
    return graph


def _label_text(path: Path, table: Any, column: str, field: str) -> np.ndarray:
    """A label column (read as strings) as stripped text, "" for an empty cell."""
    values = _column(path, table, column, field).to_pylist()
    return np.asarray(["" if v is None else str(v).strip() for v in values], dtype=np.str_)


def _edge_targets(
    per_file: list[np.ndarray | None], sizes: list[int], ends: tuple[np.ndarray, ...], split: Split
) -> tuple[dict[str, np.ndarray], np.ndarray | None, dict[str, np.ndarray]]:
    """The labelled edges (tasks edgeClassification, edgeRegression) split by `split`'s seeded ratios,
    as Graph's edge_targets rows (source, edge type, destination, class), the class names (None for
    integer labels), and the labels as numbers aligned with the rows (empty unless every label is one).
    `per_file`: each edge file's labels (None: its type has none), `sizes` its row count, in the order
    of the edge arrays `ends` (source, edge type, destination).

    Raises:
        DataError: a negative integer label."""
    if all(t is None for t in per_file):
        return {}, None, {}
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows = np.concatenate(
        [np.arange(starts[i], starts[i + 1]) for i, t in enumerate(per_file) if t is not None]
    )
    text = np.concatenate([t for t in per_file if t is not None])
    present = text != ""
    label, names = parse_labels(text, present, "graph.edges[].label")
    present &= label >= 0  # -1: unlabelled, as an empty cell
    keep = rows[present]
    labelled = np.stack([ends[0][keep], ends[1][keep], ends[2][keep], label[present]], 1).astype(np.int64)
    masks = random_masks(len(labelled), split.train, split.val, split.seed) if len(labelled) else {}
    out = {"train": "train", "valid": "val", "test": "test"}
    values = numbers(text[present])
    targets = {k: labelled[masks[m]] for k, m in out.items() if m in masks}
    numeric = {} if values is None else {k: values[masks[m]] for k, m in out.items() if m in masks}
    return targets, names, numeric


def numbers(text: np.ndarray) -> np.ndarray | None:
    """The labels as float32 values (task edgeRegression), or None when any is not a finite number."""
    try:
        values = text.astype(np.float64)
    except ValueError:
        return None
    if not np.isfinite(values).all() or np.abs(values).max(initial=0.0) > np.finfo(np.float32).max:
        return None
    return values.astype(np.float32)


def _find(universe: np.ndarray, ids: np.ndarray, path: Path, field: str, t_name: str) -> np.ndarray:
    """Each of `ids`'s position among node type `t_name`'s ids; an id it lacks is an error."""
    order = np.argsort(universe, kind="stable")
    ranked = universe[order]
    at = np.searchsorted(ranked, ids).clip(0, max(len(ranked) - 1, 0))
    found = ranked[at] == ids if len(ranked) else np.zeros(len(ids), dtype=bool)
    if not found.all():
        row = int(np.flatnonzero(~found)[0])
        raise DataError(
            f"{path}: {field}: {t_name} {str(ids[row])!r} (line {row + 2}) is not a node of type {t_name} "
            "(not in its graph.nodes files)"
        )
    return order[at]


def _node_features(
    types: list[NodeType], counts: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray | None, dict[str, tuple[int, int]]]:
    widths = {t.name: t.feat.shape[1] for t in types if t.feat is not None}
    if not widths:
        return None, {}
    blocks = _columns_block(widths)
    width = max(first + w for first, w in blocks.values())
    feat = np.zeros((int(offsets[-1]), width), dtype=np.float32)
    for i, t in enumerate(types):
        if t.feat is not None:
            first, w = blocks[t.name]
            feat[offsets[i] : offsets[i + 1], first : first + w] = t.feat
    return feat, blocks


def _edge_features(
    edges: list[EdgeTypeFiles], per_file: list[np.ndarray | None], sizes: list[int]
) -> np.ndarray | None:
    if all(f is None for f in per_file):
        return None
    widths = {str(i): f.shape[1] for i, f in enumerate(per_file) if f is not None}
    blocks = _columns_block(widths)
    width = max(first + w for first, w in blocks.values())
    out = np.zeros((sum(sizes), width), dtype=np.float32)
    start = 0
    for i, (f, size) in enumerate(zip(per_file, sizes, strict=True)):
        if f is not None:
            first, w = blocks[str(i)]
            out[start : start + size, first : first + w] = f
        start += size
    return out
