"""Weighted sums of rows read where they lie (cuda/src/gather_parts.cpp: gt_gather_sum_parts) against
numpy and against the product they replace (a gather, then the CPU core's CSR product), and a
DistTensor's local sums over in-process shards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.graph.loader import csr_tensor
from graphtrain.runtime.kvstore.wire.protocol import ProtocolError
from graphtrain.runtime.models.layers import native_csr_product
from graphtrain.runtime.native.pull import OutsideShard, gather_parts, gather_sum_parts
from graphtrain.runtime.tensor import DistTensor


def _views(table: np.ndarray, bounds: np.ndarray) -> list[tuple[np.ndarray, int]]:
    return [(table[a:b].copy(), int(a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _csr(rng: np.random.Generator, rows: int, sources: int, most: int) -> tuple[np.ndarray, ...]:
    """A mean's CSR (crow, source positions, weights 1/degree) with some rows left empty."""
    counts = rng.integers(0, most + 1, rows)
    counts[::7] = 0  # rows without entries: their sums are zero
    crow = np.zeros(rows + 1, np.int64)
    np.cumsum(counts, out=crow[1:])
    col = rng.integers(0, sources, int(crow[-1])).astype(np.int64)
    weights = np.repeat(1.0 / np.maximum(counts, 1), counts).astype(np.float32)
    return crow, col, weights


@pytest.mark.parametrize("parts", [1, 3, 9])  # past 8 the owner is found by binary search
@pytest.mark.parametrize("threads", [1, 2])
def test_each_row_sums_its_entries_rows_from_their_owners(parts: int, threads: int) -> None:
    rng = np.random.default_rng(parts)
    n, width = 3_000, 48
    table = rng.standard_normal((n, width)).astype(np.float32)
    bounds = np.linspace(0, n, parts + 1).astype(np.int64)
    crow, col, weights = _csr(rng, 700, n, 12)
    ids = col  # global ids straight away, duplicates and every shard
    out = np.full((700, width), np.nan, np.float32)
    counts = gather_sum_parts(crow, ids, weights, _views(table, bounds), bounds, out, threads)
    want = np.zeros((700, width), np.float64)
    for v in range(700):
        for e in range(crow[v], crow[v + 1]):
            want[v] += float(weights[e]) * table[ids[e]].astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert (out[::7] == 0).all()
    owners = np.searchsorted(bounds, ids, side="right") - 1
    assert counts.tolist() == np.bincount(owners, minlength=parts).tolist()


def test_the_bits_of_a_gather_then_the_csr_product_whatever_the_threads() -> None:
    """What GraphSAGE's input layer computed before (every input row copied out, then the mean over
    them), to the bit: the input layer's output does not change when the features are read in place."""
    rng = np.random.default_rng(5)
    n, width, inputs = 20_000, 256, 5_000
    table = rng.standard_normal((n, width)).astype(np.float32)
    bounds = np.array([0, 9_000, n], np.int64)
    views = _views(table, bounds)
    input_nodes = rng.choice(n, inputs, replace=False).astype(np.int64)
    crow, col, weights = _csr(rng, 1_200, inputs, 10)
    x = np.empty((inputs, width), np.float32)
    gather_parts(input_nodes, views, bounds, x, 2)
    mean = csr_tensor(crow, col, weights, (1_200, inputs))
    want = native_csr_product(mean, torch.from_numpy(x))
    assert want is not None
    for threads in (1, 2):
        out = np.empty((1_200, width), np.float32)
        gather_sum_parts(crow, input_nodes[col], weights, views, bounds, out, threads)
        assert torch.equal(torch.from_numpy(out), want)


def test_a_bad_id_or_crow_is_refused_and_nothing_is_written() -> None:
    table = np.arange(300, dtype=np.float32).reshape(100, 3)
    bounds = np.array([0, 40, 100], np.int64)
    views = _views(table, bounds)
    crow = np.array([0, 2, 3], np.int64)
    w = np.ones(3, np.float32)
    out = np.full((2, 3), -7.0, np.float32)
    with pytest.raises(SparseInputError, match="id 100 is outside the table's rows \\[0, 100\\)"):
        gather_sum_parts(crow, np.array([5, 50, 100], np.int64), w, views, bounds, out, 2)
    with pytest.raises(SparseInputError, match="never go down \\(row 1\\)"):
        gather_sum_parts(
            np.array([0, 4, 3], np.int64), np.array([1, 2, 3], np.int64), w, views, bounds, out, 2
        )
    with pytest.raises(SparseInputError, match="start at 0"):
        gather_sum_parts(
            np.array([1, 2, 3], np.int64), np.array([1, 2, 3], np.int64), w, views, bounds, out, 2
        )
    short = [(table[:40], 0), (table[40:90], 40)]  # shard 1 maps only 50 of its 60 rows
    with pytest.raises(OutsideShard) as e:
        gather_sum_parts(crow, np.array([1, 2, 95], np.int64), w, short, bounds, out, 2)
    assert (e.value.pos, e.value.shard) == (2, 1)
    assert (out == -7.0).all()


def test_mismatched_inputs_are_refused_before_the_core() -> None:
    views = [(np.zeros((10, 4), np.float32), 0)]
    bounds = np.array([0, 10], np.int64)
    crow, ids, w = np.array([0, 2], np.int64), np.array([1, 2], np.int64), np.ones(2, np.float32)
    out = np.zeros((1, 4), np.float32)
    with pytest.raises(SparseInputError, match="crow ends at 2 for 1 ids"):
        gather_sum_parts(crow, ids[:1], w[:1], views, bounds, out, 1)
    with pytest.raises(SparseInputError, match="weights must be a contiguous 1-D float32"):
        gather_sum_parts(crow, ids, w.astype(np.float64), views, bounds, out, 1)
    with pytest.raises(SparseInputError, match="out must be"):
        gather_sum_parts(crow, ids, w, views, bounds, np.zeros((1, 4), np.float64), 1)
    with pytest.raises(SparseInputError, match="rows are float16"):
        gather_sum_parts(crow, ids, w, [(np.zeros((10, 4), np.float16), 0)], bounds, out, 1)
    with pytest.raises(SparseInputError, match="bounds"):
        gather_sum_parts(crow, ids, w, views, np.array([0, 5, 10]), out, 1)


def test_a_dist_tensors_local_sums_over_in_process_shards() -> None:
    """A float32 table on in-process shards sums in place, reads counted as a pull's; a bad id is
    refused in the client's words; a table of another dtype answers None (the caller pulls)."""
    from graphtrain.runtime.kvstore.client import reads

    rng = np.random.default_rng(3)
    client = kvstore.standalone(2)
    feat = DistTensor((500, 16), torch.float32, "feat", client=client)
    values = torch.from_numpy(rng.standard_normal((500, 16)).astype(np.float32))
    feat[np.arange(500)] = values
    crow, ids, w = _csr(rng, 90, 500, 8)
    before = reads.reads()
    got = feat.local_sums(crow, ids, w)
    assert got is not None
    want = csr_tensor(crow, ids, w, (90, 500))
    assert torch.equal(got, native_csr_product(want, values))
    after = reads.reads()
    assert sum(after.get((s, "in_process"), 0) - before.get((s, "in_process"), 0) for s in (0, 1)) == len(ids)
    with pytest.raises(ProtocolError, match="id 500 is outside"):
        feat.local_sums(np.array([0, 1], np.int64), np.array([500], np.int64), np.ones(1, np.float32))
    half = DistTensor((500, 16), torch.float16, "half", client=client)
    assert half.local_sums(crow, ids, w) is None
