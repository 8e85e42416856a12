"""The one-pass gather over several shards' local rows (cuda/src/gather_parts.cpp) against numpy, and
the client's pulls that take it."""

from __future__ import annotations

import numpy as np
import pytest

from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.kvstore.wire.protocol import ProtocolError
from graphtrain.runtime.native.pull import OutsideShard, gather_parts


def _views(table: np.ndarray, bounds: np.ndarray) -> list[tuple[np.ndarray, int]]:
    return [(table[a:b].copy(), int(a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@pytest.mark.parametrize("parts", [1, 2, 5, 8, 9, 40])  # past 8 the owner is found by binary search
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_in_the_ids_order_from_their_owners(parts: int, threads: int) -> None:
    rng = np.random.default_rng(parts)
    rows = 4_000
    table = rng.standard_normal((rows, 64)).astype(np.float32)  # 1 MB a pull: past the one-thread size
    inner = np.sort(rng.choice(np.arange(1, rows), parts - 1, replace=False))
    if parts > 2:
        inner[1] = inner[0]  # an empty shard between two others
    bounds = np.concatenate([[0], inner, [rows]]).astype(np.int64)
    ids = rng.integers(0, rows, 5_000).astype(np.int64)  # duplicates, every shard, any order
    out = np.full((len(ids), 64), np.nan, np.float32)
    counts = gather_parts(ids, _views(table, bounds), bounds, out, threads)
    np.testing.assert_array_equal(out, table[ids])
    owners = np.searchsorted(bounds, ids, side="right") - 1
    assert counts.tolist() == np.bincount(owners, minlength=parts).tolist()


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.uint8])
def test_any_dtype_and_row_shape(dtype: type) -> None:
    rng = np.random.default_rng(1)
    table = rng.integers(0, 100, (300, 3, 5)).astype(dtype)
    bounds = np.array([0, 100, 300])
    ids = rng.permutation(300)[:77].astype(np.int64)
    out = np.zeros((77, 3, 5), dtype)
    gather_parts(ids, _views(table, bounds), bounds, out, 2)
    np.testing.assert_array_equal(out, table[ids])
    labels = np.arange(300, dtype=np.int64)  # a batch's labels: one value a row
    got = np.zeros(77, np.int64)
    gather_parts(ids, _views(labels, bounds), bounds, got, 2)
    assert got.tolist() == ids.tolist()


@pytest.mark.parametrize("bad", [-1, 300, 2**62])
def test_an_id_outside_the_table_is_named_and_nothing_is_copied(bad: int) -> None:
    table = np.arange(300, dtype=np.float32).reshape(100, 3)
    bounds = np.array([0, 40, 100])
    ids = np.array([5, 50, bad, 7], dtype=np.int64)
    out = np.full((4, 3), -7.0, np.float32)
    with pytest.raises(SparseInputError, match=f"id {bad} is outside the table's rows \\[0, 100\\)"):
        gather_parts(ids, _views(table.reshape(100, 3), bounds), bounds, out, 1)
    assert (out == -7.0).all()


def test_an_id_its_owner_does_not_hold_here() -> None:
    table = np.arange(300, dtype=np.float32).reshape(100, 3)
    bounds = np.array([0, 40, 100])
    views = [(table[:40], 0), (table[40:90], 40)]  # shard 1 maps only 50 of its 60 rows
    with pytest.raises(OutsideShard) as e:
        gather_parts(np.array([1, 95], dtype=np.int64), views, bounds, np.zeros((2, 3), np.float32), 1)
    assert (e.value.pos, e.value.shard) == (1, 1)


def test_mismatched_inputs_are_refused_before_the_core() -> None:
    views = [(np.zeros((10, 4), np.float32), 0)]
    bounds = np.array([0, 10])
    ids = np.array([1, 2], dtype=np.int64)
    with pytest.raises(SparseInputError, match="rows are float32"):
        gather_parts(ids, views, bounds, np.zeros((2, 4), np.float64), 1)
    with pytest.raises(SparseInputError, match="int64"):
        gather_parts(ids.astype(np.int32), views, bounds, np.zeros((2, 4), np.float32), 1)
    with pytest.raises(SparseInputError, match="bounds"):
        gather_parts(ids, views, np.array([0, 5, 10]), np.zeros((2, 4), np.float32), 1)
    with pytest.raises(SparseInputError, match="at least 2 rows"):
        gather_parts(ids, views, bounds, np.zeros((1, 4), np.float32), 1)
    counts = gather_parts(ids[:0], views, bounds, np.zeros((0, 4), np.float32), 1)
    assert counts.tolist() == [0]


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_standalone_pulls_take_it_and_keep_their_errors(dtype: str) -> None:
    """In-process shards: a pull is one pass, its reads counted per shard as before, and a bad id
    refused in the words the per-shard path used."""
    from graphtrain.runtime.kvstore.client import reads

    rng = np.random.default_rng(2)
    rows = 90
    client = kvstore.standalone(3)
    bounds = np.array([0, 30, 60, rows], dtype=np.int64)
    np_dtype = np.dtype(dtype)
    client.create("t", rows, (4,), dtype, bounds, {"kind": "zeros"})
    table = rng.integers(-8, 8, (rows, 4)).astype(np_dtype)
    client.push("t", np.arange(rows), table, bounds)
    ids = rng.choice(rows, 50).astype(np.int64)
    before = reads.reads()
    np.testing.assert_array_equal(client.pull("t", ids, bounds, (4,), np_dtype), table[ids])
    after = reads.reads()
    per_shard = np.bincount(np.searchsorted(bounds, ids, side="right") - 1, minlength=3)
    for s in range(3):
        key = (s, "in_process")
        assert after.get(key, 0) - before.get(key, 0) == per_shard[s]
    with pytest.raises(ProtocolError, match="id 90 is outside the table's rows \\[0, 90\\)"):
        client.pull("t", np.array([3, 90], dtype=np.int64), bounds, (4,), np_dtype)
