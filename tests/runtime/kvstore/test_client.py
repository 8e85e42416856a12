"""The client's grouping of ids by owning shard, and pulls/pushes through it on in-process shards."""

from __future__ import annotations

import numpy as np
import pytest

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client.kvclient import KVClient
from graphtrain.runtime.kvstore.wire.protocol import ProtocolError


def test_split_skips_the_permutation_when_ids_are_grouped() -> None:
    ids = np.array([7, 3, 9, 0], dtype=np.int64)
    order, starts = KVClient.split(ids, np.array([0, 10]))  # one shard
    assert order is None and starts.tolist() == [0, 4]
    order, starts = KVClient.split(np.array([1, 0, 5, 8, 6], dtype=np.int64), np.array([0, 4, 4, 10]))
    assert order is None and starts.tolist() == [0, 2, 2, 5]  # sorted by owner, an empty shard between


def test_split_groups_scattered_ids_stably() -> None:
    ids = np.array([8, 1, 6, 0, 9, 2], dtype=np.int64)
    order, starts = KVClient.split(ids, np.array([0, 5, 10]))
    assert order is not None
    assert ids[order].tolist() == [1, 0, 2, 8, 6, 9]  # shard 0 then shard 1, each in batch order
    assert starts.tolist() == [0, 3, 6]


@pytest.mark.parametrize("bad", [-1, 10])
def test_split_names_an_id_outside_the_table(bad: int) -> None:
    with pytest.raises(ProtocolError, match=f"id {bad} is outside the table's rows \\[0, 10\\)"):
        KVClient.split(np.array([3, bad, 4], dtype=np.int64), np.array([0, 5, 10]))


@pytest.mark.parametrize("shards", [1, 3])
def test_pull_and_push_in_any_id_order_match_numpy(shards: int) -> None:
    rng = np.random.default_rng(0)
    rows, dim = 90, 4
    client = kvstore.standalone(shards)
    bounds = np.linspace(0, rows, shards + 1).astype(np.int64)
    client.create("t", rows, (dim,), "float32", bounds, {"kind": "zeros"})
    table = rng.standard_normal((rows, dim)).astype(np.float32)
    client.push("t", np.arange(rows), table, bounds)
    for ids in (np.sort(rng.choice(rows, 40, replace=False)), rng.choice(rows, 40, replace=False)):
        np.testing.assert_array_equal(client.pull("t", ids, bounds, (dim,), np.float32), table[ids])
        values = rng.standard_normal((len(ids), dim)).astype(np.float32)
        client.push("t", ids, values, bounds)
        table[ids] = values
        np.testing.assert_array_equal(client.pull("t", np.arange(rows), bounds, (dim,), np.float32), table)


@pytest.mark.parametrize("case", ["native", "strided rows", "int32 ids", "strided out", "rows of 3 axes"])
def test_gather_rows_is_numpys_take_whichever_path_it_takes(case: str) -> None:
    """The native gather where its inputs allow it, numpy's otherwise: the same rows either way (a push
    gathers each shard's gradient rows with it, whatever the caller's layout)."""
    from graphtrain.runtime.kvstore.client.transport import gather_rows

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((50, 6)).astype(np.float32)
    ids = rng.permutation(50)[:20].astype(np.int64)
    out = None
    if case == "strided rows":
        rows = rng.standard_normal((50, 12)).astype(np.float32)[:, ::2]
    elif case == "int32 ids":
        ids = ids.astype(np.int32)
    elif case == "strided out":
        out = np.zeros((20, 12), np.float32)[:, ::2]
    elif case == "rows of 3 axes":
        rows = rows.reshape(50, 3, 2)
    got = gather_rows(rows, ids, out)
    np.testing.assert_array_equal(got, rows[ids])
    if out is not None:
        np.testing.assert_array_equal(out, rows[ids])
