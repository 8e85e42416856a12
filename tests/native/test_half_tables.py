"""Half-precision tables in the CPU core (issue 47, item 3): float16 and bfloat16 rows, updated by the
float32 math and written back with stochastic rounding (optim_math.h).

The rounding, stated: the stored value is one of the two representable neighbours of the float32 result
(the result itself when representable), the upper one with probability (result - lower) / (upper -
lower), from a hash of (seed, row, element). So:
- every bit pattern survives a zero update unchanged (the widening and the exact store are lossless);
- each stored value is a neighbour of what the float32 core computes from the widened rows, which the
  parity tests hold to the float64 oracles (test_optim_parity.py), and lies within one unit in the last
  place of a float64 reference of the same step;
- the mean over many draws is the float32 result (unbiased), where round-to-nearest would keep an
  update below half a unit forever;
- the bits are the same for any thread count and differ with the seed.
"""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.native.optim import SparseInputError, optim_args, sparse_step, sparse_step_pieces

HALF = (torch.float16, torch.bfloat16)
STATE = {
    "sgd": lambda rows, dim: {},
    "adagrad": lambda rows, dim: {"sum": torch.zeros(rows, dim)},
    "rowwise_adagrad": lambda rows, dim: {"sum": torch.zeros(rows)},
    "adam": lambda rows, dim: {
        "exp_avg": torch.zeros(rows, dim),
        "exp_avg_sq": torch.zeros(rows, dim),
        "step": torch.zeros(rows, dtype=torch.int64),
    },
}


def args(kind: str, lr: float = 0.1, weight_decay: float = 0.0):
    return optim_args(kind, lr, 1e-10, 0.9, 0.999, weight_decay, mean=False, global_step=False)


def neighbours(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The representable values of `dtype` just below-or-at and just above-or-at each float32 of x."""
    near = x.to(dtype)
    down = torch.where(near.float() <= x, near, torch.nextafter(near, torch.full_like(near, -float("inf"))))
    up = torch.where(near.float() >= x, near, torch.nextafter(near, torch.full_like(near, float("inf"))))
    return down.float(), up.float()


@pytest.mark.parametrize("dtype", HALF)
def test_every_bit_pattern_survives_a_zero_update(dtype: torch.dtype) -> None:
    table = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype).reshape(-1, 1).clone()
    before = table.clone()
    sparse_step(
        args("sgd", lr=0.0), table, {}, torch.arange(65536), torch.zeros(65536, 1), threads=2, round_seed=1
    )
    nan = torch.isnan(before.float()).reshape(-1)
    same = (table.view(torch.int16) == before.view(torch.int16)).reshape(-1)
    assert bool(same[~nan].all()), torch.nonzero(~same & ~nan)[:5].tolist()
    assert bool(torch.isnan(table.float()).reshape(-1)[nan].all())


@pytest.mark.parametrize(("dim", "decay"), [(24, 0.0), (48, 0.0), (48, 0.01), (128, 0.0), (128, 0.01)])
@pytest.mark.parametrize("kind", list(STATE))
@pytest.mark.parametrize("dtype", HALF)
def test_each_stored_value_is_a_neighbour_of_the_float32_step(
    kind: str, dtype: torch.dtype, dim: int, decay: float
) -> None:
    """Several steps with heavy duplicates: each step, the half table's rows are a neighbour of what the
    float32 core makes of the same (widened) rows and state (which test_optim_parity.py holds to the
    float64 oracles), and the state is the float32 core's. Widths of whole vectors take float16's
    one-pass update on AVX-512 (a width fixed at compile time, 128, and one not, 48), with decay too."""
    rows = 50
    gen = torch.Generator().manual_seed(0)
    half = torch.randn(rows, dim, generator=gen).to(dtype)
    state = STATE[kind](rows, dim)
    for step in range(8):
        ids = torch.randint(0, rows, (300,), generator=gen)
        grads = torch.randn(300, dim, generator=gen)
        wide, wide_state = half.float(), {k: v.clone() for k, v in state.items()}
        sparse_step(args(kind, weight_decay=decay), wide, wide_state, ids, grads, threads=2)
        sparse_step(args(kind, weight_decay=decay), half, state, ids, grads, threads=2, round_seed=step)
        down, up = neighbours(wide, dtype)
        got = half.float()
        assert bool(((got == down) | (got == up)).all()), (kind, step)
        for k in state:  # the state is float32, and the same as the float32 table's
            assert torch.equal(state[k], wide_state[k])


@pytest.mark.parametrize("dtype", HALF)
def test_sgd_against_a_float64_reference_within_one_unit(dtype: torch.dtype) -> None:
    rows, dim = 64, 16
    gen = torch.Generator().manual_seed(1)
    half = torch.randn(rows, dim, generator=gen).to(dtype)
    ids = torch.randint(0, rows, (500,), generator=gen)
    grads = torch.randn(500, dim, generator=gen)
    ref = half.double().index_add(0, ids, grads.double(), alpha=-0.1)
    sparse_step(args("sgd"), half, {}, ids, grads, threads=2, round_seed=9)
    down, up = neighbours(ref.float(), dtype)
    gap = (up - down).double().clamp_min(torch.finfo(dtype).tiny)
    assert bool(((half.double() - ref).abs() <= gap + 1e-6).all())


@pytest.mark.parametrize("dtype", HALF)
def test_rounding_is_unbiased_where_round_to_nearest_loses_the_update(dtype: torch.dtype) -> None:
    """1.0 - 0.001: below half a unit at 1.0 in both types (2^-11 and 2^-8 below 1), so round-to-nearest
    would store 1.0 for ever; the mean of 1.6M stochastic draws is 0.999 within 2e-5."""
    n = 200_000
    table = torch.ones(n, 8, dtype=dtype)
    sparse_step(
        args("sgd", lr=1.0), table, {}, torch.arange(n), torch.full((n, 8), 1e-3), threads=2, round_seed=7
    )
    assert len(set(table.float().reshape(-1).tolist())) == 2
    assert abs(table.double().mean().item() - 0.999) < 2e-5


def test_the_bits_do_not_depend_on_the_thread_count_and_do_on_the_seed() -> None:
    def run(threads: int, seed: int) -> torch.Tensor:
        table = torch.ones(1000, 128, dtype=torch.bfloat16)
        gen = torch.Generator().manual_seed(2)
        ids, grads = torch.randint(0, 1000, (5000,), generator=gen), torch.randn(5000, 128, generator=gen)
        sparse_step(
            args("rowwise_adagrad"), table, {"sum": torch.zeros(1000)}, ids, grads, threads, round_seed=seed
        )
        return table.view(torch.int16)

    assert torch.equal(run(1, 5), run(2, 5))
    assert not torch.equal(run(2, 5), run(2, 6))


SPECIAL = {
    # what sends a row down the element functions' path (optim_math.h, fp16_row_to_float and
    # half_row_round), with the gradient of its element: for float16 a zero, a subnormal, an infinity, a
    # NaN, a value stepped past 65,504; for bfloat16 a NaN
    torch.float16: [(float("nan"), 0.0), (float("inf"), 0.0), (0.0, 0.0), (3e-6, 0.0), (65504.0, -1e4)],
    torch.bfloat16: [(float("nan"), 0.0)],
}


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("dtype", HALF)
def test_a_row_in_range_gets_the_element_functions_bits(kind: str, dtype: torch.dtype) -> None:
    """The CPU core writes a row whose values are all in range by a few-operation loop, and any other row
    by the element functions the CUDA core calls. Each row of 128 values in range is stepped twice: alone
    (the fast path) and with one special value after it, as a row of 129 (the element functions' path:
    the random bits of element j depend on the row, the step and j only). The first 128 must agree bit
    for bit. Values span float16's normal range to near 65,504, boundaries and powers of two included."""
    gen = torch.Generator().manual_seed(11)
    rows, dim = 96, 128
    mag = torch.pow(10.0, torch.empty(rows, dim).uniform_(-4.0, 4.8, generator=gen))
    sign = torch.where(torch.rand(rows, dim, generator=gen) < 0.5, -1.0, 1.0)
    values = mag * sign
    values[0, :8] = torch.tensor([2.0**-14, -(2.0**-14), 1.0, -1.0, 2.0**15, 65504.0, -65504.0, 65472.0])
    values = values.to(dtype)
    grads = torch.randn(rows, dim, generator=gen) * 1e-3
    grads[0, 5:8] = torch.tensor([-1.0, 1.0, -30.0])  # 65,504 pushed past the range (saturated), or not
    for special, push in SPECIAL[dtype]:
        narrow, wide = values.clone(), torch.empty(rows, dim + 1, dtype=dtype)
        wide[:, :dim], wide[:, dim] = values, special
        wide_grads = torch.cat([grads, torch.full((rows, 1), push)], dim=1)
        narrow_state, wide_state = STATE[kind](rows, dim), STATE[kind](rows, dim + 1)
        for seed in (1, 2):  # two steps, the state carried over
            sparse_step(
                args(kind, lr=1e-2), narrow, narrow_state, torch.arange(rows), grads, 2, round_seed=seed
            )
            sparse_step(
                args(kind, lr=1e-2), wide, wide_state, torch.arange(rows), wide_grads, 2, round_seed=seed
            )
        same = narrow.view(torch.int16) == wide[:, :dim].view(torch.int16)
        assert bool(same.all()), (special, torch.nonzero(~same)[:5].tolist())
        assert not torch.equal(narrow.view(torch.int16), values.view(torch.int16))  # the step moved rows


@pytest.mark.parametrize("dim", [128, 3])
@pytest.mark.parametrize("kind", list(STATE))
def test_a_float16_step_past_65504_saturates_and_an_infinity_stays(kind: str, dim: int) -> None:
    """A float32 result beyond float16's range had been written as an infinity (fp16_exact): float32
    and bfloat16 rows hold it finite, and the next pull turned the row into NaN gradients, refused (a
    WordNet GraphSAGE run with SGD at lr 1e8 failed in its first epoch in float16 alone). It saturates
    to +-65504 now, on each path (dim 128: whole AVX-512 vectors, 3: the element functions), as a half
    table's gradients do on the wire; a row already infinite stays so (a float32 table's would too)."""
    rows = 64
    gen = torch.Generator().manual_seed(5)
    start = torch.full((rows, dim), 65000.0) * torch.where(torch.rand(rows, dim, generator=gen) < 0.5, -1, 1)
    start[:, 0] = torch.empty(rows).uniform_(65440.0, 65504.0, generator=gen)  # near the top, carries
    half = start.to(torch.float16)
    half[-1] = float("inf")
    grads = -torch.sign(start) * 1e4  # every step pushes each value outwards
    grads[-1] = 0.0
    lr = 1.0 if kind == "sgd" else 1000.0  # the adaptive kinds move a row about lr a step
    for seed in range(4):
        sparse_step(
            args(kind, lr), half, STATE[kind](rows, dim), torch.arange(rows), grads, 2, round_seed=seed
        )
    got = half.float()
    assert bool(torch.isinf(got[-1]).all())
    assert bool(torch.isfinite(got[:-1]).all()), torch.nonzero(~torch.isfinite(got[:-1]))[:5].tolist()
    assert bool((got[:-1].abs() == 65504.0).all())
    assert bool((torch.sign(got[:-1]) == torch.sign(start[:-1])).all())


def test_pieces_of_a_push_step_a_half_table_as_one_step() -> None:
    gen = torch.Generator().manual_seed(3)
    ids, grads = torch.randint(0, 40, (100,), generator=gen), torch.randn(100, 32, generator=gen)
    a = torch.randn(40, 32, generator=gen).to(torch.float16)
    b = a.clone()
    sparse_step(args("adagrad"), a, {"sum": torch.zeros(40, 32)}, ids, grads, threads=2, round_seed=4)
    sparse_step_pieces(
        args("adagrad"), b, {"sum": torch.zeros(40, 32)}, ids, [grads[:30], grads[30:]], 2, round_seed=4
    )
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_other_table_types_and_seeds_are_refused_naming_them() -> None:
    with pytest.raises(
        SparseInputError, match="table must be float32, float16 or bfloat16, got torch.float64"
    ):
        sparse_step(
            args("sgd"), torch.zeros(4, 2, dtype=torch.float64), {}, torch.arange(2), torch.zeros(2, 2), 1
        )
    with pytest.raises(SparseInputError, match=r"round_seed must be in \[0, 2\*\*64\)"):
        sparse_step(args("sgd"), torch.zeros(4, 2), {}, torch.arange(2), torch.zeros(2, 2), 1, round_seed=-1)
