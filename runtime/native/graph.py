"""ctypes bindings of the native sampling and relabelling (cuda/src/sampling.cpp), on numpy arrays."""

from __future__ import annotations

import ctypes

import numpy as np

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import core


def _i64(a: np.ndarray, name: str) -> int:
    if a.dtype != np.int64 or not a.flags.c_contiguous or a.ndim != 1:
        raise SparseInputError(f"{name} must be a contiguous 1-D int64 array, got {a.dtype} {a.shape}")
    return a.ctypes.data


def sample_neighbors(
    indptr: np.ndarray, indices: np.ndarray, lo: int, seeds: np.ndarray, fanout: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(sources, counts) of up to `fanout` distinct in-neighbours per seed (-1: all)."""
    lib = core()
    n = len(seeds)
    counts = np.empty(n, dtype=np.int64)
    bad = ctypes.c_int64(-1)
    args = (
        _i64(indptr, "indptr"),
        _i64(indices, "indices"),
        lo,
        len(indptr) - 1,
        _i64(seeds, "seeds"),
        n,
        fanout,
        seed & (2**64 - 1),
    )
    total = lib.gt_sample_neighbors(*args, counts.ctypes.data, None, ctypes.byref(bad))
    if total < 0:
        raise SparseInputError(
            f"seed {int(seeds[bad.value])} is outside this partition's nodes [{lo}, {lo + len(indptr) - 1})"
        )
    src = np.empty(total, dtype=np.int64)
    lib.gt_sample_neighbors(*args, counts.ctypes.data, src.ctypes.data, ctypes.byref(bad))
    return src, counts


def sample_edges(
    indptr: np.ndarray,
    etype: np.ndarray | None,
    lo: int,
    seeds: np.ndarray,
    fanout: int,
    type_fanouts: np.ndarray | None,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(positions in the partition's edge arrays, counts) of up to `fanout` in-edges per seed, or with
    `type_fanouts` (one per edge type, -1 all, 0 none) per edge type of each seed's row."""
    lib = core()
    n = len(seeds)
    counts = np.empty(n, dtype=np.int64)
    bad = ctypes.c_int64(-1)
    if type_fanouts is not None and etype is None:
        raise SparseInputError("per-edge-type fan-outs need the partition's edge types")
    args = (
        _i64(indptr, "indptr"),
        None if etype is None else _i64(etype, "etype"),
        lo,
        len(indptr) - 1,
        _i64(seeds, "seeds"),
        n,
        fanout,
        None if type_fanouts is None else _i64(type_fanouts, "type_fanouts"),
        0 if type_fanouts is None else len(type_fanouts),
        seed & (2**64 - 1),
    )
    total = lib.gt_sample_edges(*args, counts.ctypes.data, None, ctypes.byref(bad))
    if total < 0:
        raise SparseInputError(
            f"seed {int(seeds[bad.value])} is outside this partition's nodes [{lo}, {lo + len(indptr) - 1})"
        )
    pos = np.empty(total, dtype=np.int64)
    lib.gt_sample_edges(*args, counts.ctypes.data, pos.ctypes.data, ctypes.byref(bad))
    return pos, counts


def relabel(frontier: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, local ids of src): nodes = frontier then the new ids of src in first-occurrence order."""
    nodes = np.empty(len(frontier) + len(src), dtype=np.int64)
    local = np.empty(len(src), dtype=np.int64)
    count = core().gt_relabel(
        _i64(frontier, "frontier"),
        len(frontier),
        _i64(src, "src"),
        len(src),
        nodes.ctypes.data,
        local.ctypes.data,
    )
    return nodes[:count], local


BlockMeans = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def block_means(counts: np.ndarray, src_local: np.ndarray, num_src: int) -> BlockMeans:
    """(crow, values, crow_t, col_t, values_t, order) of a block's row-normalised mean A (destinations
    x sources: edges grouped by destination, `counts` per destination) and of A^T, its edges grouped by
    source, stably (order: the edge at each place of A^T). What loader.mean_matrices builds, in one pass.

    Raises:
        SparseInputError: a negative count, counts that do not add up to the edges, or a source outside
            [0, num_src).
    """
    n = len(src_local)
    crow, crow_t = np.empty(len(counts) + 1, np.int64), np.empty(num_src + 1, np.int64)
    values, values_t = np.empty(n, np.float32), np.empty(n, np.float32)
    col_t, order = np.empty(n, np.int64), np.empty(n, np.int64)
    bad = ctypes.c_int64(-1)
    rc = core().gt_block_means(
        len(counts),
        _i64(counts, "counts"),
        num_src,
        n,
        _i64(src_local, "src_local"),
        crow.ctypes.data,
        values.ctypes.data,
        crow_t.ctypes.data,
        col_t.ctypes.data,
        values_t.ctypes.data,
        order.ctypes.data,
        ctypes.byref(bad),
    )
    if rc == -1:
        said = f"counts[{bad.value}] is negative" if bad.value >= 0 else f"counts add up to other than {n}"
        raise SparseInputError(said)
    if rc == -2:
        at = bad.value
        raise SparseInputError(f"src_local[{at}] = {int(src_local[at])} is outside [0, {num_src})")
    return crow, values, crow_t, col_t, values_t, order
