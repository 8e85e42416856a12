"""ctypes binding of a pull's one-pass gather over several shards' local rows (cuda/src/gather_parts.cpp).

A pull whose shards all lie in this process (standalone) or in this host's shared memory reads its
rows itself. Grouping the ids by owner and gathering each shard's rows to scattered places of the
output cost 2.5x one in-order gather (a WordNet batch's features: 0.79 against 0.32 ms); here each id
finds its shard among the bounds and the output is written in order. A weighted sum of rows per output
row (gather_sum_parts) reads the same way: a GraphSAGE input layer's mean of frozen features, with
none of the input rows copied out.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import core


class OutsideShard(SparseInputError):
    """An id inside the table's bounds but outside the rows its owning shard holds here."""

    def __init__(self, pos: int, shard: int):
        super().__init__(f"ids[{pos}] is outside shard {shard}'s rows")
        self.pos, self.shard = pos, shard


def _parts(views: list[tuple[np.ndarray, int]], bounds: np.ndarray) -> tuple[Any, ...]:
    """The shards' tables, bounds, first ids and row counts as the core reads them."""
    parts = len(views)
    tables = (ctypes.c_void_p * parts)(*(rows.ctypes.data for rows, _ in views))
    b = np.ascontiguousarray(bounds, dtype=np.int64)
    los = np.array([lo for _, lo in views], dtype=np.int64)
    lens = np.array([len(rows) for rows, _ in views], dtype=np.int64)
    return tables, b, los, lens


def _refused(rc: int, bad: int, ids: np.ndarray, b: np.ndarray) -> None:
    """Raise for a gather's refused id (rc -1: outside the table, -2: outside its owner's rows here)."""
    if rc == -1:
        raise SparseInputError(f"id {int(ids[bad])} is outside the table's rows [{int(b[0])}, {int(b[-1])})")
    if rc == -2:
        raise OutsideShard(bad, int(np.searchsorted(b, ids[bad], side="right")) - 1)


def gather_parts(
    ids: np.ndarray,
    views: list[tuple[np.ndarray, int]],
    bounds: np.ndarray,
    out: np.ndarray,
    threads: int,
) -> np.ndarray:
    """out[i] = the row of ids[i] from its owner's view (rows, first id): shard s owns ids [bounds[s],
    bounds[s + 1]). Views and out share one dtype and row shape, C-contiguous. Returns the ids each
    shard served. Raises SparseInputError for an id outside the table, OutsideShard for one its owner
    does not hold here (nothing is copied in either case)."""
    n, parts = len(ids), len(views)
    if ids.dtype != np.int64 or ids.ndim != 1 or not ids.flags.c_contiguous:
        raise SparseInputError(f"ids must be a contiguous 1-D int64 array, got {ids.dtype} {ids.shape}")
    if len(bounds) != parts + 1 or parts < 1:
        raise SparseInputError(f"{len(bounds)} bounds for {parts} shard(s)")
    if out.shape[0] < n or not out.flags.c_contiguous:
        raise SparseInputError(f"out must be C-contiguous with at least {n} rows, got {out.shape}")
    row_shape, row_bytes = out.shape[1:], out[:1].nbytes if len(out) else 0
    for rows, _ in views:
        if rows.dtype != out.dtype or rows.shape[1:] != row_shape or not rows.flags.c_contiguous:
            raise SparseInputError(
                f"a shard's rows are {rows.dtype} {rows.shape[1:]}, out {out.dtype} {row_shape}"
            )
    counts = np.zeros(parts, dtype=np.int64)
    if n == 0:
        return counts
    tables, b, los, lens = _parts(views, bounds)
    bad = ctypes.c_int64(-1)
    rc = core().gt_gather_parts(
        n,
        ids.ctypes.data,
        parts,
        tables,
        b.ctypes.data,
        los.ctypes.data,
        lens.ctypes.data,
        row_bytes,
        out.ctypes.data,
        counts.ctypes.data,
        threads,
        ctypes.byref(bad),
    )
    _refused(rc, bad.value, ids, b)
    return counts


def gather_sum_parts(
    crow: np.ndarray,
    ids: np.ndarray,
    weights: np.ndarray,
    views: list[tuple[np.ndarray, int]],
    bounds: np.ndarray,
    out: np.ndarray,
    threads: int,
) -> np.ndarray:
    """out[v] = the sum over e in [crow[v], crow[v + 1]) of weights[e] * the row of ids[e], each read from
    its owner's view as gather_parts reads it (float32 rows; len(crow) - 1 output rows, none of them
    read). Returns the rows each shard served. Raises SparseInputError for a bad crow or id, OutsideShard
    for an id its owner does not hold here (nothing is written in any case)."""
    num_rows, parts = len(crow) - 1, len(views)
    arrays = (("crow", crow, np.int64), ("ids", ids, np.int64), ("weights", weights, np.float32))
    for name, a, dtype in arrays:
        if a.dtype != dtype or a.ndim != 1 or not a.flags.c_contiguous:
            raise SparseInputError(f"{name} must be a contiguous 1-D {np.dtype(dtype)} array, got {a.dtype}")
    if num_rows < 0 or int(crow[-1]) != len(ids) or len(weights) != len(ids):
        ends = int(crow[-1]) if len(crow) else None
        raise SparseInputError(f"crow ends at {ends} for {len(ids)} ids and {len(weights)} weights")
    if len(bounds) != parts + 1 or parts < 1:
        raise SparseInputError(f"{len(bounds)} bounds for {parts} shard(s)")
    if out.dtype != np.float32 or out.ndim != 2 or out.shape[0] < num_rows or not out.flags.c_contiguous:
        raise SparseInputError(f"out must be C-contiguous float32 with {num_rows} rows, got {out.shape}")
    for rows, _ in views:
        if rows.dtype != np.float32 or rows.shape[1:] != out.shape[1:] or not rows.flags.c_contiguous:
            raise SparseInputError(
                f"a shard's rows are {rows.dtype} {rows.shape[1:]}, out float32 {out.shape[1:]}"
            )
    counts = np.zeros(parts, dtype=np.int64)
    tables, b, los, lens = _parts(views, bounds)
    bad = ctypes.c_int64(-1)
    rc = core().gt_gather_sum_parts(
        num_rows,
        crow.ctypes.data,
        ids.ctypes.data,
        weights.ctypes.data,
        parts,
        tables,
        b.ctypes.data,
        los.ctypes.data,
        lens.ctypes.data,
        out.shape[1],
        out.ctypes.data,
        counts.ctypes.data,
        threads,
        ctypes.byref(bad),
    )
    if rc == -3:
        raise SparseInputError(f"crow must start at 0 and never go down (row {bad.value})")
    _refused(rc, bad.value, ids, b)
    return counts
