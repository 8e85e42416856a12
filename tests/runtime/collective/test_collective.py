"""Collective tables on 2 and 4 spawned ranks (gloo) against a single process holding the whole table:
forward rows, captured gradients and updated rows within 1e-5, for every optimizer and duplicate rule,
the unique and the plain lookup, bags with both combiners (empty and repeated members), group lookups,
refusals that every rank raises, and checkpoints restored into another world size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from tests.runtime.collective import ranks
from tests.runtime.collective import scenarios as sc

N, DIM, STEPS = 37, 5, 3
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _grads(s: int, world: int, ids: list[np.ndarray]) -> list[np.ndarray]:
    return [sc.weights(s, r, len(ids[r]), DIM) for r in range(world)]


@pytest.mark.parametrize("world", [1, 2, 4])  # 1: the local path (no routing, the step reduces duplicates)
@pytest.mark.parametrize(
    ("kind", "duplicate", "unique"),
    [
        ("sgd", "sum", True),
        ("adagrad", "sum", False),
        ("rowwise_adagrad", "mean", True),
        ("adam", "sum", True),
        ("adam", "mean", False),
        ("adam_global", "sum", True),
    ],
)
def test_lookup_and_update_match_one_process(tmp_path, world, kind, duplicate, unique):
    out = ranks.run(
        "lookup_train",
        world,
        tmp_path,
        kind=kind,
        duplicate=duplicate,
        unique=unique,
        n=N,
        dim=DIM,
        steps=STEPS,
    )
    extra = {"step_count": "global"} if kind == "adam_global" else {}
    cfg = sc.config(kind.removesuffix("_global"), duplicate, **extra)
    batches, tables = [], [sc.full_table(N, DIM).numpy()]
    for s in range(STEPS):
        ids = [sc.batch_ids(s, r, N) for r in range(world)]
        grads = _grads(s, world, ids)
        batches.append((np.concatenate(ids), np.concatenate(grads)))
    tables += sc.reference_steps(cfg, N, DIM, batches)
    for s in range(STEPS):
        ids = [sc.batch_ids(s, r, N) for r in range(world)]
        for r in range(world):
            np.testing.assert_allclose(out[r][f"rows{s}"], tables[s][ids[r]], **TOL)
            np.testing.assert_allclose(out[r][f"grad{s}"], _grads(s, world, ids)[r], **TOL)
            np.testing.assert_allclose(out[r][f"table{s}"], tables[s + 1], **TOL)


def _bag_reference(combiner: str, world: int, steps: int):
    cfg = sc.config("adagrad")
    table = sc.full_table(N, DIM)
    state = sc.make_state(cfg, N, DIM)
    pooled, after = [], []
    for s in range(steps):
        all_ids, all_grads, per_rank = [], [], []
        for r in range(world):
            values, offsets = sc.bag_batch(s, r, N)
            lengths = np.diff(offsets)
            member_of = np.repeat(np.arange(len(lengths)), lengths)
            rows = table.numpy()[values]
            sums = np.zeros((len(lengths), DIM), np.float32)
            np.add.at(sums, member_of, rows)
            scale = np.maximum(lengths, 1)[:, None] if combiner == "mean" else 1
            per_rank.append(sums / scale)
            w = sc.weights(s, r, len(lengths), DIM)
            g = w[member_of] / (np.maximum(lengths, 1)[member_of][:, None] if combiner == "mean" else 1)
            all_ids.append(values)
            all_grads.append(g.astype(np.float32))
        pooled.append(per_rank)
        sc.sparse_step(
            cfg,
            table,
            state,
            torch.from_numpy(np.concatenate(all_ids)),
            torch.from_numpy(np.concatenate(all_grads)),
        )
        after.append(table.numpy().copy())
    return pooled, after


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("combiner", ["sum", "mean"])
def test_bags_match_one_process(tmp_path, world, combiner):
    out = ranks.run("bag_train", world, tmp_path, combiner=combiner, n=N, dim=DIM, steps=2)
    pooled, after = _bag_reference(combiner, world, 2)
    for s in range(2):
        for r in range(world):
            np.testing.assert_allclose(out[r][f"bags{s}"], pooled[s][r], **TOL)
            np.testing.assert_allclose(out[r][f"table{s}"], after[s], **TOL)
    for r in range(world):
        ragged = out[r]["ragged"]
        np.testing.assert_allclose(out[r]["slots"].reshape(-1, DIM), ragged, **TOL)
        assert not ragged[1].any()  # the empty slot


@pytest.mark.parametrize("world", [2, 4])
def test_group_lookup_matches_separate_tables(tmp_path, world):
    out = ranks.run("group_train", world, tmp_path, steps=2)
    cfg = sc.config("adam")
    for name, n, dim, shift, salt in (("a", 23, 3, 0, 0), ("b", 41, 6, 10, 1)):
        batches = []
        for s in range(2):
            ids = [sc.batch_ids(s + shift, r, n) for r in range(world)]
            grads = [sc.weights(s, r, len(ids[r]), dim, salt=salt) for r in range(world)]
            batches.append((np.concatenate(ids), np.concatenate(grads)))
        tables = [sc.full_table(n, dim).numpy(), *sc.reference_steps(cfg, n, dim, batches)]
        for s in range(2):
            for r in range(world):
                ids = sc.batch_ids(s + shift, r, n)
                np.testing.assert_allclose(out[r][f"{name}{s}"], tables[s][ids], **TOL)
                np.testing.assert_allclose(out[r][f"table_{name}{s}"], tables[s + 1], **TOL)


def test_refusals_reach_every_rank_and_change_nothing(tmp_path):
    world = 3
    out = ranks.run("refusals", world, tmp_path, n=N, dim=DIM)
    init = sc.full_table(N, DIM).numpy()
    for r in range(world):
        bad_id, nan = out[r]["messages"]
        if r == 1:
            assert bad_id == f"SparseInputError: lookup of 't': id {N} is outside the table's rows [0, {N})"
        else:
            assert (
                bad_id == "CollectiveError: lookup of 't': rank 1 refused its input (ids outside the table)"
            )
        if r == 0:
            assert nan == "NonFiniteGradient: gradient row 1 of 't' holds NaN or infinity"
        else:
            assert nan == "NonFiniteGradient: gradients of 't': rank 0 holds a NaN or infinite gradient"
        np.testing.assert_array_equal(out[r]["table"], init)
        # nonfinite: skip drops rank 0's row of id 1 and applies the rest (sgd, lr 0.05, weight decay 0.01)
        want = init.copy()
        for key, count in ((0, world), (1, world - 1)):
            want[key] -= 0.05 * (count + 0.01 * init[key])
        np.testing.assert_allclose(out[r]["skip"], want, **TOL)


@pytest.mark.parametrize("kind", ["adam", "adam_global", "rowwise_adagrad"])
def test_checkpoint_of_2_ranks_restores_into_3(tmp_path, kind):
    ckdir = tmp_path / "ck"
    saved = ranks.run("save_then", 2, tmp_path / "save", ckdir=str(ckdir), n=N, dim=DIM, kind=kind)
    extra = {"step_count": "global"} if kind == "adam_global" else {}
    cfg = sc.config(kind.removesuffix("_global"), **extra)
    batches = []
    for s in range(2):
        ids = [sc.batch_ids(s, r, N) for r in range(2)]
        batches.append((np.concatenate(ids), np.concatenate(_grads(s, 2, ids))))
    two = sc.reference_steps(cfg, N, DIM, batches)[-1]
    np.testing.assert_allclose(saved[0]["table"], two, **TOL)
    ckpt.verify_checkpoint(ckdir)  # an ordinary checkpoint: export reads it in row order
    np.testing.assert_array_equal(ckpt.export_table(ckdir, "t"), saved[0]["table"])
    restored = ranks.run("restore_then", 3, tmp_path / "restore", ckdir=str(ckdir), n=N, dim=DIM, kind=kind)
    ids = [sc.batch_ids(2, r, N) for r in range(3)]
    batches.append((np.concatenate(ids), np.concatenate(_grads(2, 3, ids))))
    three = sc.reference_steps(cfg, N, DIM, batches)[-1]
    for r in range(3):
        np.testing.assert_array_equal(restored[r]["restored"], saved[0]["table"])
        np.testing.assert_allclose(restored[r]["table"], three, **TOL)


@pytest.mark.parametrize("room", [1 << 30, 0])
def test_a_frozen_checkpoint_is_the_rows_it_was_taken_at_and_restores(tmp_path, room):
    """Frozen (room) or written in the op (none): the checkpoint holds the rows of its step though a step
    ran while it was written, its files are save()'s byte for byte, and it restores into another world."""
    ckdir, whole = tmp_path / "ck", tmp_path / "whole"
    frozen = ranks.run(
        "freeze_then", 2, tmp_path / "f", ckdir=str(ckdir), n=N, dim=DIM, kind="adam", room=room
    )
    saved = ranks.run("save_then", 2, tmp_path / "s", ckdir=str(whole), n=N, dim=DIM, kind="adam")
    assert [int(r["frozen"]) for r in frozen] == ([1, 1] if room else [0, 0])
    np.testing.assert_array_equal(frozen[0]["table"], saved[0]["table"])
    ckpt.verify_checkpoint(ckdir)
    np.testing.assert_array_equal(ckpt.export_table(ckdir, "t"), saved[0]["table"])
    for piece in whole.glob("t/*/*.npy"):
        assert (ckdir / piece.relative_to(whole)).read_bytes() == piece.read_bytes()
    restored = ranks.run("restore_then", 3, tmp_path / "r", ckdir=str(ckdir), n=N, dim=DIM, kind="adam")
    np.testing.assert_array_equal(restored[0]["restored"], saved[0]["table"])


def test_a_piece_that_could_not_be_written_says_why_where_the_checkpoint_is_completed(tmp_path):
    from graphtrain.runtime.collective import checkpoint as cc
    from graphtrain.runtime.errors import DataError

    entry = ckpt.piece_entry(tmp_path, "t", 0, 10)

    def broken() -> None:
        raise OSError(28, "No space left on device")

    writer = cc.Writer(tmp_path, [(entry, broken)])
    assert writer.join(10) and writer.error and "No space left" in writer.error
    with pytest.raises(DataError, match=r"t rows 0-10: not written: OSError: .*No space left on device"):
        cc.written(tmp_path, [entry])
    assert not cc.written(tmp_path, [ckpt.piece_entry(tmp_path, "u", 0, 10)])  # not yet: no marker


def test_one_rank_refuses_bad_ids_and_nan_gradients_as_the_exchange_does_and_changes_nothing() -> None:
    """The local path (one rank, a static table): the lookup and the step check what the exchange path
    checks, with messages naming the table, and nothing changes; nonfinite skip still drops the row."""
    import dataclasses

    from graphtrain.runtime.collective import CollectiveEmbedding
    from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
    from graphtrain.runtime.optim import SparseOptimizer

    table = CollectiveEmbedding(N, DIM, "t", sc.INIT)
    assert table.local
    opt = SparseOptimizer([table], sc.config("adagrad"))
    init = table.rows(torch.arange(N)).numpy().copy()
    with pytest.raises(
        SparseInputError, match=rf"^lookup of 't': id {N} is outside the table's rows \[0, {N}\)$"
    ):
        table(torch.tensor([0, N]))
    with pytest.raises(SparseInputError, match=rf"^gradients of 't': ids\[1\] = {N} is outside"):
        table.apply_gradients(torch.tensor([0, N]), torch.ones(2, DIM))
    rows = table(torch.tensor([0, 1, 1]))
    grad = torch.ones_like(rows)
    grad[2, 0] = float("nan")
    (rows * grad).sum().backward()
    with pytest.raises(NonFiniteGradient, match=r"^gradients of 't': .*NaN or infinity"):
        opt.step()
    np.testing.assert_array_equal(table.rows(torch.arange(N)).numpy(), init)
    skip = CollectiveEmbedding(N, DIM, "s", sc.INIT)
    SparseOptimizer([skip], dataclasses.replace(sc.config("sgd"), nonfinite="skip"))
    before = skip.rows(torch.arange(N)).numpy().copy()
    rows = skip(torch.tensor([0, 1, 1]))
    (rows * grad).sum().backward()
    skip.apply_gradients(*skip.pending())
    want = before.copy()
    for key, count in ((0, 1), (1, 1)):  # id 1's NaN occurrence dropped, its finite one applied
        want[key] -= 0.05 * (count + 0.01 * before[key])
    np.testing.assert_allclose(skip.rows(torch.arange(N)).numpy(), want, **TOL)


def test_a_damaged_checkpoint_is_refused(tmp_path):
    ckdir = tmp_path / "ck"
    ranks.run("save_then", 2, tmp_path / "save", ckdir=str(ckdir), n=N, dim=DIM, kind="adam")
    data = next(ckdir.glob("t/rows-*/data.npy"))
    raw = bytearray(data.read_bytes())
    raw[-3] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(AssertionError, match="ChecksumError|changed"):
        ranks.run("restore_then", 2, tmp_path / "restore", ckdir=str(ckdir), n=N, dim=DIM, kind="adam")


def test_a_table_too_big_for_this_host_is_refused_before_any_allocation():
    from graphtrain.runtime.collective import CollectiveEmbedding
    from graphtrain.runtime.storage.errors import StorageError

    with pytest.raises(
        StorageError, match=r"collective table 'd' on rank 0 needs [\d.]+ GiB; this server has"
    ):
        CollectiveEmbedding(1, 128, "d", capacity=10**12)  # a dynamic vocabulary of 10^12 rows
    with pytest.raises(StorageError, match="collective table 'f' on rank 0 needs"):
        CollectiveEmbedding(10**12, 128, "f")
