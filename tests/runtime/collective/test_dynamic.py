"""Dynamic vocabularies of collective tables on spawned gloo ranks: arbitrary int64 keys get rows on first
sight with an initial value that depends on the key alone; lookups, gradients and updates equal a single
process holding every key's row (within 1e-5); evaluation lookups of unseen keys read the initial value
and insert nothing; a full shard refuses (every rank raises, the message names table, shard and
capacity) or evicts; checkpoints keep the keys and restore into another world size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.checkpoint import export_keyed
from graphtrain.runtime.optim import make_state, sparse_step
from graphtrain.runtime.storage.inits import init_keyed
from tests.runtime.collective import ranks
from tests.runtime.collective import scenarios as sc
from tests.runtime.collective import scenarios_dynamic as dyn
from tests.runtime.kvstore.test_keyed import held_rows_of

N, STEPS, DIM = 37, 3, 4
TOL = {"atol": 1e-5, "rtol": 1e-5}


def reference(
    kind: str, duplicate: str, world: int, steps: int
) -> tuple[dict[int, np.ndarray], list[list[np.ndarray]]]:
    """Every key's row after `steps` steps in one process, and the rows each lookup returned."""
    cfg = sc.config(kind, duplicate)
    keys = np.unique(np.concatenate([dyn.keys_of(s, r, N) for s in range(steps) for r in range(world)]))
    index = {int(k): i for i, k in enumerate(keys)}
    table = torch.from_numpy(init_keyed(sc.INIT, keys, DIM))
    state = make_state(cfg, len(keys), DIM)
    looked = []
    for s in range(steps):
        per_rank = [dyn.keys_of(s, r, N) for r in range(world)]
        looked.append([table.numpy()[[index[int(k)] for k in ks]].copy() for ks in per_rank])
        ids = torch.tensor([index[int(k)] for ks in per_rank for k in ks], dtype=torch.int64)
        grads = torch.from_numpy(
            np.concatenate([sc.weights(s, r, len(per_rank[r]), DIM) for r in range(world)])
        )
        sparse_step(cfg, table, state, ids, grads)
    return {int(k): table.numpy()[i] for i, k in enumerate(keys)}, looked


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize(
    ("kind", "duplicate"), [("adagrad", "sum"), ("adam", "mean"), ("rowwise_adagrad", "sum")]
)
def test_dynamic_lookups_and_updates_match_one_process(tmp_path, world, kind, duplicate):
    probe = [-1, 2**62, 12345]
    out = ranks.run(
        "scenarios_dynamic.train",
        world,
        tmp_path,
        kind=kind,
        duplicate=duplicate,
        capacity=64,
        n=N,
        steps=STEPS,
        probe=probe,
    )
    final, looked = reference(kind, duplicate, world, STEPS)
    seen = sorted(final)
    for r in range(world):
        for s in range(STEPS):
            np.testing.assert_allclose(out[r][f"rows{s}"], looked[s][r], **TOL)
        np.testing.assert_allclose(out[r]["seen"], np.stack([final[k] for k in seen]), **TOL)
        np.testing.assert_array_equal(out[r]["probe"], init_keyed(sc.INIT, np.array(probe), DIM))
        before, after = out[r]["held_before_after"]
        assert before == after  # evaluation lookups inserted nothing
        mean_bags = [
            np.mean([final[k] for k in seen[a:b]], axis=0) if b > a else np.zeros(DIM)
            for a, b in ((0, 2), (2, 2), (2, 5))
        ]
        np.testing.assert_allclose(out[r]["bag"], np.stack(mean_bags), **TOL)
    assert sum(int(o["held_before_after"][0]) for o in out) == len(seen)  # each key held once, by its owner


def test_a_full_shard_refuses_on_every_rank_naming_table_shard_and_capacity(tmp_path):
    world = 2
    out = ranks.run("scenarios_dynamic.full", world, tmp_path, on_full="error")
    assert out[0]["messages"][0] == (
        "KeyMapFull: table 'd' shard 0 of 2 is full: capacity 3 rows, all in use (onFull: error)"
    )
    assert (
        out[1]["messages"][0]
        == "KeyMapFull: lookup of 'd': the shard of rank 0 is full (its own message says more)"
    )
    for r in range(world):
        # the new keys were not inserted: an evaluation lookup reads their initial values
        new = np.array([world * 10, world * 11])
        np.testing.assert_array_equal(out[r]["after"][3:], init_keyed(sc.INIT, new, DIM))
        assert out[r]["held"] == 3


def test_a_full_shard_evicts_its_least_recently_used_rows(tmp_path):
    world = 2
    out = ranks.run("scenarios_dynamic.full", world, tmp_path, on_full="evict")
    assert out[0]["messages"][0] == "" and out[1]["messages"][0] == ""
    init = init_keyed(sc.INIT, np.arange(30), DIM)
    rank0 = out[0]["after"]  # keys 0, 2, 4 (rows 0-2), then 20 and 22, inserted by rank 1's lookup
    # key 4 was used by the lookup itself: kept (trained); keys 0 and 2 gave way and read their init
    np.testing.assert_array_equal(rank0[0], init[0])
    np.testing.assert_array_equal(rank0[1], init[2])
    assert not np.allclose(rank0[2], init[4])
    np.testing.assert_array_equal(rank0[3:], init[[20, 22]])
    assert out[0]["held"] == 3


def test_dynamic_checkpoint_of_2_ranks_restores_into_3(tmp_path):
    ckdir = tmp_path / "ck"
    saved = ranks.run("scenarios_dynamic.save_then", 2, tmp_path / "save", ckdir=str(ckdir), capacity=60, n=N)
    keys = saved[0]["keys"]
    exported = export_keyed(ckdir, "d")
    assert exported is not None
    np.testing.assert_array_equal(exported[0], keys)
    np.testing.assert_array_equal(exported[1], saved[0]["seen"])
    held = held_rows_of(ckdir)  # each rank's piece: its rows in use, not its 30 rows of capacity
    assert len(held) == 2 and all(rows == k == said for k, rows, said in held), held
    assert sum(k for k, _, _ in held) == len(keys) < 60
    restored = ranks.run(
        "scenarios_dynamic.restore_then",
        3,
        tmp_path / "restore",
        ckdir=str(ckdir),
        capacity=60,
        n=N,
        keys=keys.tolist(),
    )
    for r in range(3):
        np.testing.assert_array_equal(restored[r]["seen"], saved[0]["seen"])
    assert sum(o["held"] for o in restored) == len(keys)


@pytest.mark.parametrize("world", [2, 4])
def test_a_group_lookup_of_a_dynamic_and_a_fixed_table_equals_separate_lookups(tmp_path, world):
    out = ranks.run("scenarios_dynamic.group_vs_separate", world, tmp_path, n=N, steps=2)
    for r in range(world):
        for s in range(2):
            np.testing.assert_allclose(out[r][f"rows0_{s}"], out[r][f"rows1_{s}"], atol=1e-6)
        np.testing.assert_allclose(out[r]["d0"], out[r]["d1"], atol=1e-6)
        np.testing.assert_allclose(out[r]["f0"], out[r]["f1"], atol=1e-6)
        assert not np.allclose(out[r]["f0"], sc.full_table(N, DIM).numpy())  # trained


def test_a_dynamic_table_resumes_into_another_capacity_that_holds_its_keys(tmp_path) -> None:
    """A server table took a changed capacity on resume (refusing one below its keys), a collective one
    refused any change as a shape mismatch: both restore by key now, and both refuse too few rows."""
    import torch

    from graphtrain.runtime.collective import checkpoint as cc
    from graphtrain.runtime.collective.embedding import CollectiveEmbedding
    from graphtrain.runtime.errors import DataError
    from graphtrain.runtime.optim.config import OptimConfig

    adam = OptimConfig(kind="adam", lr=0.01)
    table = CollectiveEmbedding(100, 4, "e", capacity=100)
    table.attach(adam)
    keys = torch.tensor([1, 5, 9, 1000])
    rows = table(keys).detach()
    cc.write_checkpoint([table], tmp_path / "ck")
    smaller = CollectiveEmbedding(50, 4, "e", capacity=50)
    smaller.attach(adam)
    assert cc.restore(smaller, tmp_path / "ck")
    assert torch.equal(smaller(keys).detach(), rows)
    tiny = CollectiveEmbedding(2, 4, "e", capacity=2)
    tiny.attach(adam)
    with pytest.raises(DataError, match="capacity"):
        cc.restore(tiny, tmp_path / "ck")
