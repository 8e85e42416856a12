"""The CUDA core under skew: Zipf batches and one id seen 200,000 times sum their duplicates in the
canonical order of optim_math.h (bitwise equal to the CPU core and to an exact oracle), are deterministic
run to run, refuse non-finite gradients and scale rows to their norm in the update kernel; and a Zipf
step stays within 3x of a uniform step with the same unique count (it was 20-38x when one warp summed
a hot id's rows)."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
import torch

from graphtrain.runtime.errors import NonFiniteGradient
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step
from tests.native.test_canonical_sum import canonical_sums

KINDS = [
    OptimConfig("sgd", 0.1),
    OptimConfig("adagrad", 0.1),
    OptimConfig("rowwise_adagrad", 0.1, duplicate="mean"),
    OptimConfig("adam", 0.01),
    OptimConfig("adam", 0.01, step_count="global"),
]


def zipf_ids(rows: int, n: int, seed: int = 0) -> torch.Tensor:
    """Zipf(1.1) over ranks, ranks mapped to random rows (as bench/optim.py draws them)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** 1.1
    cdf = np.cumsum(p / p.sum())
    perm = rng.permutation(rows)
    return torch.from_numpy(perm[np.minimum(np.searchsorted(cdf, rng.random(n)), rows - 1)].astype(np.int64))


def step_on(config: OptimConfig, table: torch.Tensor, batches, device: str, **kw):
    t = table.clone().to(device)
    state = make_state(config, t.shape[0], t.shape[1], t.device)
    for ids, grads in batches:
        sparse_step(config, t, state, ids.to(device), grads.to(device), backend=device, **kw)
    return t.cpu(), {k: v.cpu() for k, v in state.items()}


@pytest.mark.parametrize("dim", [32, 128, 129])
def test_zipf_sums_equal_the_cpu_core_and_the_oracle_bitwise(dim: int) -> None:
    rows, n = 50_000, 200_000
    ids = zipf_ids(rows, n)
    grads = torch.randn(n, dim, generator=torch.Generator().manual_seed(1))
    config = OptimConfig("sgd", 1.0)  # lr 1 on zeros: each row is exactly minus its reduced gradient
    table = torch.zeros(rows, dim)
    gpu, _ = step_on(config, table, [(ids, grads)], "cuda")
    cpu, _ = step_on(config, table, [(ids, grads)], "cpu")
    assert torch.equal(gpu, cpu)
    counts = torch.bincount(ids, minlength=rows)
    hot = torch.argsort(counts, descending=True)[:5].tolist()
    assert counts[hot[0]] > 1000  # chunks of 256 combined
    want = canonical_sums(ids.numpy(), grads.numpy())
    for i in hot:
        np.testing.assert_array_equal(-gpu[i].numpy(), want[i])


@pytest.mark.parametrize("config", KINDS, ids=lambda c: f"{c.kind}-{c.duplicate}-{c.step_count}")
def test_zipf_steps_are_deterministic_and_match_the_cpu_core(config: OptimConfig) -> None:
    rows, dim = 20_000, 64
    g = torch.Generator().manual_seed(2)
    table = torch.randn(rows, dim, generator=g)
    batches = [(zipf_ids(rows, 50_000, seed=s), torch.randn(50_000, dim, generator=g)) for s in range(3)]
    first = step_on(config, table, batches, "cuda")
    again = step_on(config, table, batches, "cuda")
    assert torch.equal(first[0], again[0])
    for key in first[1]:
        assert torch.equal(first[1][key], again[1][key]), key
    cpu = step_on(config, table, batches, "cpu")
    torch.testing.assert_close(first[0], cpu[0], rtol=1e-5, atol=1e-6)
    for key in cpu[1]:
        torch.testing.assert_close(first[1][key], cpu[1][key], rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("mean", [False, True])
def test_one_id_two_hundred_thousand_times(mean: bool) -> None:
    rows, dim, n = 100, 128, 200_000
    ids = torch.full((n,), 42, dtype=torch.int64)
    ids[::1000] = 7
    grads = torch.randn(n, dim, generator=torch.Generator().manual_seed(3))
    config = OptimConfig("sgd", 1.0, duplicate="mean" if mean else "sum")
    gpu, _ = step_on(config, torch.zeros(rows, dim), [(ids, grads)], "cuda")
    cpu, _ = step_on(config, torch.zeros(rows, dim), [(ids, grads)], "cpu")
    assert torch.equal(gpu, cpu)


@pytest.mark.parametrize("config", KINDS, ids=lambda c: f"{c.kind}-{c.step_count}")
def test_a_non_finite_gradient_is_refused_on_the_device(config: OptimConfig) -> None:
    rows, dim = 1000, 32
    table = torch.randn(rows, dim, device="cuda")
    state = make_state(config, rows, dim, "cuda")
    before = table.clone(), {k: v.clone() for k, v in state.items()}
    ids = zipf_ids(rows, 5000).cuda()
    grads = torch.randn(5000, dim, device="cuda")
    grads[1234, 5] = float("nan")
    with pytest.raises(NonFiniteGradient) as err:
        sparse_step(config, table, state, ids, grads, backend="cuda", finite=True)
    assert err.value.row == 1234
    assert torch.equal(table, before[0])
    for key, value in state.items():
        assert torch.equal(value, before[1][key]), key


def test_row_norm_in_the_update_kernel_matches_the_cpu_path() -> None:
    rows, dim = 5000, 100
    config = OptimConfig("adagrad", 0.1, row_norm=1.0)
    g = torch.Generator().manual_seed(4)
    table = torch.nn.functional.normalize(torch.randn(rows, dim, generator=g), dim=1)
    batches = [(zipf_ids(rows, 20_000, seed=s), torch.randn(20_000, dim, generator=g)) for s in range(3)]
    gpu = step_on(config, table, batches, "cuda")
    cpu = step_on(config, table, batches, "cpu")
    torch.testing.assert_close(gpu[0], cpu[0], rtol=1e-5, atol=1e-5)
    touched = torch.unique(torch.cat([i for i, _ in batches]))
    torch.testing.assert_close(gpu[0][touched].norm(dim=1), torch.ones(len(touched)), rtol=1e-5, atol=1e-5)


def uniform_like(rows: int, n: int, unique: int, seed: int = 5) -> torch.Tensor:
    """n uniform ids over a range chosen so that about `unique` of them are distinct, spread over rows."""
    lo, hi = unique, 100 * n
    for _ in range(60):  # bisection on R: R * (1 - exp(-n / R)) = unique
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if mid * (1 - np.exp(-n / mid)) > unique else (mid, hi)
    rng = np.random.default_rng(seed)
    span = min(rows, int(round(lo)))
    return torch.from_numpy(rng.permutation(rows)[rng.integers(0, span, n)].astype(np.int64))


def timed_step(config: OptimConfig, table: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor) -> float:
    state = make_state(config, table.shape[0], table.shape[1], table.device)
    times = []
    for k in range(7):
        torch.cuda.synchronize()
        t = time.perf_counter()
        sparse_step(config, table, state, ids, grads, backend="cuda")
        torch.cuda.synchronize()
        if k >= 2:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


@pytest.mark.parametrize("kind", ["sgd", "rowwise_adagrad", "adam"])
def test_a_zipf_step_is_within_3x_of_a_uniform_one(kind: str) -> None:
    rows, dim, n = 5_000_000, 128, 1_000_000
    config = OptimConfig(kind, 0.01)
    zipf = zipf_ids(rows, n).cuda()
    unique = len(torch.unique(zipf))
    uniform = uniform_like(rows, n, unique).cuda()
    grads = torch.randn(n, dim, device="cuda")
    table = torch.zeros(rows, dim, device="cuda")
    t_zipf, t_uniform = timed_step(config, table, zipf, grads), timed_step(config, table, uniform, grads)
    assert t_zipf <= 3 * t_uniform, (
        f"zipf {t_zipf * 1e3:.2f} ms, uniform {t_uniform * 1e3:.2f} ms ({unique} unique)"
    )
