"""A knowledge graph from the user's own (head, relation, tail) files (graph.triples).

Read as PyKEEN's `TriplesFactory.from_path` reads them: one triple per line, tab-separated (.tsv/.txt)
or comma-separated (.csv), `#` comments; every label is a string, numbers included ("7" is a label,
not an id). The column order is graph.triples.columns. A first line naming the three columns (head,
relation, tail, or subject/predicate/object, h/r/t) is a header; it must agree with `columns`, or the
file would be read in another order than it was written in.

Ids: entities and relations are numbered in sorted label order, the labels kept as entity_names and
relation_names, so the same files give the same ids on every machine.

Duplicates: a triple written twice in one file is kept once, with a DataWarning counting the copies
(PyKEEN keeps them; a copy weighs its triple twice, and in a one-file split it would land in train and
in test at once). The one-file split is made after this.

Leakage: a valid or test triple that is also a training triple is an error naming file:line (and how
many more there are): its answer would be in training, and the filtered metrics inflated; valid and
test sharing triples is a DataWarning counting them (the model is then selected on its test).

Splits: with valid and test files, the user's own. An entity or relation of valid/test that train does
not hold is an error naming file:line and the label: the model has no row trained for it, and
dropping such triples silently would change the test set (PyKEEN filters them with a log line; here
the user decides). With one file, a seeded split by graph.split (default 80/10/10).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from graphtrain.contract.spec import Split, TriplesSource, split_or
from graphtrain.runtime import arrays
from graphtrain.runtime.data import text
from graphtrain.runtime.data.files import regular_file, resolve
from graphtrain.runtime.data.graph import KnowledgeGraph, random_triple_split
from graphtrain.runtime.errors import DataError, DataWarning

DEFAULT_SPLIT = Split(train=0.8, val=0.1, test=0.1, seed=0)
ROLES = ("head", "relation", "tail")
HEADER_NAMES = {
    **dict.fromkeys(("head", "h", "subject", "s", "source", "src"), "head"),
    **dict.fromkeys(("relation", "r", "predicate", "p", "rel", "relation_type", "type"), "relation"),
    **dict.fromkeys(("tail", "t", "object", "o", "target", "dst"), "tail"),
}


class Labels:
    """The labels of one triples file, columns in (head, relation, tail) order, with their lines."""

    def __init__(self, rows: text.TextRows, skip: int, order: list[int]):
        self.rows = rows
        self.skip = skip
        data = rows.fields[skip:]
        self.columns = [np.array([r[i] for r in data], dtype=np.str_) for i in order]

    def __len__(self) -> int:
        return len(self.columns[0])

    def where(self, i: int) -> str:
        return self.rows.where(self.skip + i)


def read_labels(path: Path, fmt: str, columns: list[str]) -> Labels:
    """The (head, relation, tail) labels of a triples file whose columns are in `columns` order.

    Raises:
        DataError: naming file:line: a row without three fields, an empty label, a header that names
            the columns in another order than `columns`, or no triples at all.
    """
    kind = fmt if fmt in ("csv", "tsv") else ("csv" if path.suffix.lower() == ".csv" else "tsv")
    rows = text.read_rows(path, kind)
    skip = 0
    if rows.fields:
        roles = [HEADER_NAMES.get(f.lower()) for f in rows.fields[0]]
        if len(roles) == 3 and None not in roles and len(set(roles)) == 3:
            if roles != list(columns):
                raise DataError(
                    f"{rows.where(0)}: the header names the columns {', '.join(rows.fields[0])} "
                    f"({', '.join(r or '' for r in roles)}) but graph.triples.columns is "
                    f"[{', '.join(columns)}]: make them agree"
                )
            skip = 1
    if len(rows.fields) == skip:
        raise DataError(f"{path}: no triples")
    for i in range(skip, len(rows.fields)):
        row = rows.fields[i]
        if len(row) != 3:
            raise DataError(f"{rows.where(i)}: expected 3 columns ({', '.join(columns)}), found {len(row)}")
        if "" in row:
            raise DataError(f"{rows.where(i)}: an empty label in {row}")
    return Labels(rows, skip, [list(columns).index(r) for r in ROLES])


def load_triples(
    source: TriplesSource, split: Split | None, name: str, base_dir: Path | None
) -> KnowledgeGraph:
    """The knowledge graph of graph.triples, paths resolved from `base_dir`.

    Raises:
        DataError: a missing or malformed file (naming file:line), or a valid/test label not in train.
    """
    columns = [str(c) for c in source.columns]
    fmt = str(source.format)
    train = read_labels(_file(source.path, base_dir), fmt, columns)
    if source.valid is None or source.test is None:
        entities = arrays.unique(np.concatenate([train.columns[0], train.columns[2]]))
        relations = arrays.unique(train.columns[1])
        triples = _unique(train, _encode(train, entities, relations))
        s = split_or(split, DEFAULT_SPLIT)
        tr, va, te = random_triple_split(triples, s.train, s.val, s.seed)
    else:
        entities = arrays.unique(np.concatenate([train.columns[0], train.columns[2]]))
        relations = arrays.unique(train.columns[1])
        tr = _unique(train, _encode(train, entities, relations))
        held = [read_labels(_file(p, base_dir), fmt, columns) for p in (source.valid, source.test)]
        encoded = [_encode(h, entities, relations, train.rows.path) for h in held]
        for h, ids in zip(held, encoded, strict=True):
            _refuse_leaks(h, ids, tr, train.rows.path)
        va, te = (_unique(h, ids) for h, ids in zip(held, encoded, strict=True))
        shared = int(_member(te, va).sum())
        if shared:
            warnings.warn(
                f"{held[1].rows.path}: {shared:,} of its {len(te):,} test triples are also valid triples "
                f"({held[0].rows.path}): the model is chosen on its own test set",
                DataWarning,
                stacklevel=2,
            )
    if len(relations) > ORDER_SHARE * len(tr) and len(tr) >= ORDER_MIN_TRIPLES:
        warnings.warn(
            f"{train.rows.path}: {len(relations):,} relations among {len(tr):,} triples: is the column "
            f"order [{', '.join(columns)}] (graph.triples.columns) the file's?",
            DataWarning,
            stacklevel=2,
        )
    return KnowledgeGraph(
        name=name,
        num_entities=len(entities),
        num_relations=len(relations),
        train=tr,
        valid=va,
        test=te,
        entity_names=entities.astype(np.str_),
        relation_names=relations.astype(np.str_),
    )


ORDER_SHARE = 0.5  # more relations than this share of triples: columns probably in another order
ORDER_MIN_TRIPLES = 20


def _file(path: str, base_dir: Path | None) -> Path:
    return regular_file(resolve(path, base_dir), "triples")


def _keys(triples: np.ndarray) -> np.ndarray:
    """One comparable value per (head, relation, tail) row."""
    return np.ascontiguousarray(triples).view(np.dtype((np.void, triples.dtype.itemsize * 3))).ravel()


def _member(triples: np.ndarray, of: np.ndarray) -> np.ndarray:
    """Which rows of `triples` are rows of `of`."""
    return np.isin(_keys(triples), _keys(of))


def _unique(labels: Labels, triples: np.ndarray) -> np.ndarray:
    """`triples` without repeated rows (first copies kept, file order), with a DataWarning counting them."""
    _, first = np.unique(_keys(triples), return_index=True)
    if len(first) == len(triples):
        return triples
    kept = np.zeros(len(triples), dtype=bool)
    kept[first] = True
    copy = int(np.argmin(kept))
    warnings.warn(
        f"{labels.rows.path}: {len(triples) - len(first):,} duplicate triples dropped (the first at "
        f"{labels.where(copy)})",
        DataWarning,
        stacklevel=3,
    )
    return triples[np.sort(first)]


def _refuse_leaks(labels: Labels, triples: np.ndarray, train: np.ndarray, train_path: Path) -> None:
    """DataError naming the first row of `labels` (encoded as `triples`, row for row) that train holds."""
    leak = _member(triples, train)
    if leak.any():
        i = int(np.argmax(leak))
        more = int(leak.sum()) - 1
        shown = " ".join(str(c[i]) for c in labels.columns)
        raise DataError(
            f"{labels.where(i)}: the triple {shown!r} (head relation tail) is also a training triple "
            f"({train_path}){f', as are {more:,} more' if more else ''}: its answer would be "
            "learnt, inflating the metrics (remove it from one of the files)"
        )


def _encode(
    labels: Labels, entities: np.ndarray, relations: np.ndarray, train: Path | None = None
) -> np.ndarray:
    """(n, 3) int64 ids of `labels`; a label outside the tables is an error naming its line."""
    out = np.empty((len(labels), 3), dtype=np.int64)
    for j, (column, table) in enumerate(zip(labels.columns, (entities, relations, entities), strict=True)):
        at = np.searchsorted(table, column).clip(0, len(table) - 1)
        known = table[at] == column
        if not known.all():
            i = int(np.argmin(known))
            what = "relation" if j == 1 else "entity"
            raise DataError(
                f"{labels.where(i)}: {what} {str(column[i])!r} is not in the training triples ({train}): the "
                "model learns no row for it (move a triple naming it into the training file)"
            )
        out[:, j] = at
    return out
