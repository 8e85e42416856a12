"""Half-precision collective tables (issue 47, item 3) on spawned gloo ranks, fixed and dynamic
vocabularies: the rows are held in float16 or bfloat16 (2 bytes an element) and the model reads them
widened to float32; the owners step them in float32 (state float32) and round back stochastically, so
each step moves a row at most one unit in the last place of its type away from a float32 table's
(tests/native/test_half_tables.py tests the rounding itself). A checkpoint holds half rows, restores
into another world size bit for bit and exports float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.storage.inits import init_keyed
from tests.runtime.collective import ranks
from tests.runtime.collective import scenarios as sc
from tests.runtime.collective.test_dynamic import reference as dynamic_reference

N, DIM, STEPS, WORLD = 37, 4, 3, 2


def fixed_reference() -> tuple[list[np.ndarray], np.ndarray]:
    """A float32 table in one process: the table after each step (rows of every id the steps use)."""
    batches = []
    for s in range(STEPS):
        ids = [sc.batch_ids(s, r, N) for r in range(WORLD)]
        grads = [sc.weights(s, r, len(ids[r]), DIM) for r in range(WORLD)]
        batches.append((np.concatenate(ids), np.concatenate(grads)))
    every = np.unique(np.concatenate([b[0] for b in batches]))
    return [t[every] for t in sc.reference_steps(sc.config("adam", "sum"), N, DIM, batches)], every


def within_rounding(half: np.ndarray, ref: np.ndarray, dtype: torch.dtype, roundings: int) -> None:
    """Each rounding (to nearest at init, stochastic at each step) moves an element at most one unit in
    the last place of `dtype` (eps times its magnitude); one more unit of slack for what the moved rows
    feed back into the steps (the weight decay's gradient)."""
    eps = torch.finfo(dtype).eps
    bound = (roundings + 1) * eps * np.maximum(np.abs(ref), np.abs(half)) + 1e-6
    worst = float(np.max(np.abs(half - ref) - bound))
    assert worst <= 0, f"{dtype}: beyond {roundings} roundings by {worst}"
    assert not np.array_equal(half, ref)  # half rows, not float32 ones


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_collective_tables_train_within_rounding_and_restore_bit_for_bit(tmp_path, dtype, dynamic):
    ckdir = tmp_path / "ck"
    kind = getattr(torch, dtype)
    args = {"dtype": dtype, "dynamic": dynamic, "n": N, "dim": DIM, "ckdir": str(ckdir)}
    out = ranks.run("scenarios_half.train", WORLD, tmp_path / "train", steps=STEPS, **args)
    if dynamic:
        final, looked = dynamic_reference("adam", "sum", WORLD, STEPS)
        every = np.array(sorted(final))
        expected_last = np.stack([final[k] for k in every])
        first_rows = [looked[0][r] for r in range(WORLD)]
    else:
        after, every = fixed_reference()
        expected_last = after[-1]
        init = sc.full_table(N, DIM)
        first_rows = [init[torch.from_numpy(sc.batch_ids(0, r, N))].numpy() for r in range(WORLD)]
    for r in range(WORLD):
        assert int(out[r]["element_size"]) == 2
        assert list(out[r]["state_dtypes"]) == ["torch.float32", "torch.float32", "torch.int64"]
        # the first lookup reads the initial rows rounded to nearest, widened exactly
        nearest = torch.from_numpy(first_rows[r]).to(kind).float().numpy()
        np.testing.assert_array_equal(out[r]["rows0"], nearest)
        within_rounding(out[r][f"table{STEPS - 1}"], expected_last, kind, STEPS + 1)
    np.testing.assert_array_equal(out[0][f"table{STEPS - 1}"], out[1][f"table{STEPS - 1}"])
    last = out[0][f"table{STEPS - 1}"]

    ckpt.verify_checkpoint(ckdir)
    data = sorted(ckdir.rglob("h/*/data.npy"))
    assert data and all(np.load(f).itemsize == 2 for f in data)
    if dynamic:
        exported = ckpt.export_keyed(ckdir, "h")
        assert exported is not None
        np.testing.assert_array_equal(exported[0], every)
    else:
        exported_rows = ckpt.export_table(ckdir, "h")
        assert exported_rows.dtype == np.float32
        np.testing.assert_array_equal(exported_rows[every], last)
    world = 3 if not dynamic else 1
    back = ranks.run("scenarios_half.restore_then", world, tmp_path / "restore", keys=every.tolist(), **args)
    for r in range(world):
        assert str(back[r]["dtype"]) == f"torch.{dtype}"
        np.testing.assert_array_equal(back[r]["rows"], last)
        assert int(back[r]["steps"]) == STEPS  # the rounding count goes on from the checkpoint's


def test_an_unseen_key_of_a_half_dynamic_table_reads_its_initial_value_rounded(tmp_path):
    ckdir = tmp_path / "ck"
    args = {"dtype": "bfloat16", "dynamic": True, "n": N, "dim": DIM, "ckdir": str(ckdir)}
    ranks.run("scenarios_half.train", 1, tmp_path / "train", steps=1, **args)
    unseen = [-7, 2**61]
    back = ranks.run("scenarios_half.restore_then", 2, tmp_path / "restore", keys=unseen, **args)
    start = torch.from_numpy(init_keyed(sc.INIT, np.array(unseen), DIM)).bfloat16().float().numpy()
    for r in range(2):
        np.testing.assert_array_equal(back[r]["rows"], start)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_tables_gradients_cross_in_half_beside_exact_counts(dtype):
    """Half the bytes of float32 (plus 4 a key for its count); sums rounded to nearest, a finite value
    beyond the type's range saturated (never infinite: the owner would refuse it), counts exact."""
    from graphtrain.runtime.collective import exchange as ex

    big = torch.finfo(torch.float32).max  # finite, beyond both half types
    sums = torch.tensor([[1.0, -2.5e-3, 7e4, -big], [0.1, 3.0, -7e4, 65504.0]])
    counts = torch.tensor([3, 70_000])
    packed = ex.pack_gradients(sums, counts, dtype)
    assert packed.dtype == torch.uint8 and packed.shape == (2, 4 * 2 + 4)
    f32 = ex.pack_gradients(sums, counts, torch.float32)
    assert f32.shape == (2, 5) and f32.element_size() * f32.shape[1] == 20
    got_sums, got_counts = ex.unpack_gradients(packed, 4, dtype)
    top = torch.finfo(dtype).max
    np.testing.assert_array_equal(got_sums.numpy(), sums.clamp(-top, top).to(dtype).float().numpy())
    assert torch.isfinite(got_sums).all()
    np.testing.assert_array_equal(got_counts.numpy(), [3.0, 70_000.0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_bytes_a_step_moves_are_what_the_plan_counts_a_key(tmp_path, dtype):
    """A rank sends its keys and gradients to their owners and, as an owner, the rows its peer asked
    for: exchange.key_bytes a key, which `graphtrain plan` counts (exchange.step_bytes)."""
    from graphtrain.runtime.collective import exchange as ex

    out = ranks.run("scenarios_half.wire", WORLD, tmp_path, dtype=dtype, n=N, dim=DIM)
    lookup, update = ex.key_bytes(DIM, getattr(torch, dtype))
    assert (lookup, update) == (
        (8 + 4 * DIM, 8 + 4 * (DIM + 1)) if dtype == "float32" else (8 + 2 * DIM, 12 + 2 * DIM)
    )
    keys = [np.unique(sc.batch_ids(0, r, N)) for r in range(WORLD)]
    to_peer = [int(np.sum(k % WORLD != r)) for r, k in enumerate(keys)]  # keys the other rank owns
    for r in range(WORLD):
        asked_of_me = to_peer[1 - r]
        row = lookup - 8
        want_sent = to_peer[r] * 8 + asked_of_me * row + to_peer[r] * update
        assert int(out[r]["sent"]) == want_sent
        assert int(out[r]["received"]) == asked_of_me * 8 + to_peer[r] * row + asked_of_me * update
    # the plan's estimate with the measured keys: each rank's unique keys, half of them owned remotely
    mean_keys = np.mean([len(k) for k in keys])
    estimate = ex.step_bytes(mean_keys, DIM, getattr(torch, dtype), WORLD, 2, 0)
    assert estimate == pytest.approx(0.5 * mean_keys * (lookup + update))
    assert ex.step_bytes(mean_keys, DIM, torch.float32, WORLD, 1, 0) == 0.0  # one host: nothing crosses


def test_an_optimizer_state_that_does_not_fit_is_refused_before_it_is_made(monkeypatch) -> None:
    """A collective table checked its rows' memory but not its optimizer state's (Adam: twice a float32
    table's rows, four times a half one's): past the free memory, the kernel's OOM killer ended the
    trainer instead of one line. A shard server's state was checked already."""
    from graphtrain.runtime.collective import embedding as collective
    from graphtrain.runtime.optim.config import OptimConfig
    from graphtrain.runtime.storage import placement
    from graphtrain.runtime.storage.errors import StorageError

    table = collective.CollectiveEmbedding(1000, 16, "e", dtype=torch.float16)
    real = placement.fits
    monkeypatch.setattr(
        collective.place,
        "fits",
        lambda what, nbytes, device=placement.CPU: real(what, nbytes, device, lambda d: 100_000),
    )
    with pytest.raises(StorageError, match=r"optimizer state of collective table 'e' on rank 0 needs"):
        table.attach(OptimConfig(kind="adam", lr=0.01))
    assert table.config is None and table.state == {}


def test_a_half_table_no_native_core_can_step_is_refused_when_its_optimizer_attaches(monkeypatch) -> None:
    """The torch reference steps float32 only: a half table whose steps would fall back to it is refused
    in one line at attach, not at its first step after the data is loaded."""
    from graphtrain.runtime.collective import CollectiveEmbedding
    from graphtrain.runtime.optim import OptimConfig

    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", "torch")
    t = CollectiveEmbedding(10, 4, "h", dtype=torch.bfloat16)
    with pytest.raises(
        ValueError, match="embedding 'h': a torch.bfloat16 table is stepped by the native cores"
    ):
        t.attach(OptimConfig("adam", 0.1))
    assert t.config is None and not t.state


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_collective_tables_rows_are_normalised_in_chunks_as_whole(dtype: torch.dtype) -> None:
    """KGE tables start on the unit sphere (train/tables.normalise_rows): a collective table's rows are
    projected a chunk at a time (a half one's float32 copy of the whole table may not fit beside it on a
    GPU), to what projecting the whole table gives."""
    from graphtrain.runtime.collective import CollectiveEmbedding
    from graphtrain.runtime.train.tables import normalise_rows, unit_rows

    t = CollectiveEmbedding(1000, 8, "e", {"kind": "normal", "std": 1.0, "seed": 4}, dtype=dtype)
    whole = unit_rows(t.weight.float()).to(dtype)
    normalise_rows(t, 0, 64)
    assert torch.equal(t.weight, whole)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_rows_of_nan_or_infinity_are_refused_on_restore(tmp_path, dtype, dynamic):
    """A collective table's restore checked no row (a shard server's refused a float32 NaN): a row of
    each rank made non-finite in a checkpoint, hashes re-recorded, is refused by the rank owning it."""
    from graphtrain.runtime.storage.keyed import owners
    from tests.runtime.kvstore.test_half_tables import plant_nonfinite

    ckdir = tmp_path / "ck"
    args = {"dtype": dtype, "dynamic": dynamic, "n": N, "dim": DIM, "ckdir": str(ckdir)}
    ranks.run("scenarios_half.train", 1, tmp_path / "train", steps=1, **args)
    piece = next((ckdir / "h").glob("rows-*"))
    keys = np.load(piece / "keys.npy") if dynamic else np.arange(N)
    owner = owners(keys, 2) if dynamic else keys % 2
    planted = {r: int(np.flatnonzero(owner == r)[-1]) for r in range(2)}  # a row of each rank's
    for row in planted.values():
        plant_nonfinite(piece, row, getattr(torch, dtype))
    back = ranks.run("scenarios_half.restore_refused", 2, tmp_path / "restore", **args)
    for r, row in planted.items():
        where = f"key {keys[row]}" if dynamic else f"row {row}"
        error = str(back[r]["error"])
        assert "data.npy: 1 row(s) hold NaN or infinity" in error and f"(first: {where})" in error, error
