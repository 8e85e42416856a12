"""Half-precision tables in the CUDA core's sparse step (issue 47, item 3): float16 and bfloat16 rows
widened, stepped by the float32 math and written back with stochastic rounding from the same random bits
as the CPU core (optim_math.h: round_key(seed, row), round_bits(key, column)). So the CUDA core's rows
are the CPU core's: equal where both float32 results are equal, at most one unit in the last place
apart where the two float32 results differ in their last bits and straddle a rounding cut (the float32
cores agree to 1e-5, tests/gpu/test_cuda_core.py). The state stays float32 and matches as for a
float32 table. Narrow rows (one column a lane) and rows of 4k columns (vector loads), hot ids summed in
chunks, the mean rule and weight decay (which reads the half row), an empty batch."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step
from tests.gpu.test_cuda_core import CONFIGS, batches

HALF = (torch.float16, torch.bfloat16)


def run(config: OptimConfig, table: torch.Tensor, data, device: str) -> tuple[torch.Tensor, dict]:
    t = table.clone().to(device)
    state = make_state(config, t.shape[0], t.shape[1], t.device)
    for step, (ids, grads) in enumerate(data):
        sparse_step(
            config, t, state, ids.to(device), grads.to(device), backend=device, round_seed=1000 + step
        )
    if device == "cuda":
        torch.cuda.synchronize()
    return t.cpu(), {k: v.cpu() for k, v in state.items()}


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many steps of the (half) type lie between a and b, elementwise: 0 where they are equal
    (+0 and -0 included), their bit patterns' distance else (of the same sign, as both cores' results)."""
    ia, ib = a.view(torch.int16).int(), b.view(torch.int16).int()
    return torch.where(a.float() == b.float(), 0, (ia - ib).abs())


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("dim", [1, 5, 128])
@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: f"{c.kind}-{c.duplicate}-{c.step_count}-wd{c.weight_decay}"
)
def test_the_cuda_core_steps_half_rows_as_the_cpu_core_does(
    config: OptimConfig, dim: int, dtype: torch.dtype
) -> None:
    rows = 300
    table = torch.randn(rows, dim, generator=torch.Generator().manual_seed(1)).to(dtype)
    data = batches(rows, dim)
    (got, got_state), (want, want_state) = run(config, table, data, "cuda"), run(config, table, data, "cpu")
    assert got.dtype == dtype
    apart = ulps_apart(got, want)
    assert int(apart.max()) <= 1, f"{int(apart.max())} units apart"
    assert float((apart == 0).float().mean()) >= 0.99  # bit for bit, but for the rare straddled cut
    assert not torch.equal(got, table)  # stepped
    for key in want_state:
        torch.testing.assert_close(got_state[key], want_state[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("dtype", HALF)
def test_a_hot_id_summed_in_chunks_and_wide_rows(dtype: torch.dtype) -> None:
    """Batches of 20,000 ids where one id is a third of them (the chunked sums), rows of 4,096 columns."""
    rows, dim = 64, 4096
    g = torch.Generator().manual_seed(3)
    data = []
    for _ in range(3):
        ids = torch.randint(0, rows, (20_000,), generator=g)
        ids[::3] = 7
        data.append((ids, torch.randn(len(ids), dim, generator=g) * 1e-3))
    table = torch.randn(rows, dim, generator=g).to(dtype)
    config = OptimConfig("adam", 0.01)
    (got, _), (want, _) = run(config, table, data, "cuda"), run(config, table, data, "cpu")
    apart = ulps_apart(got, want)
    assert int(apart.max()) <= 1 and float((apart == 0).float().mean()) >= 0.99


def test_a_half_tables_row_norm_is_applied_after_the_step() -> None:
    """TransE's and DistMult's entity rows: the CUDA core steps, then the rows are scaled to the norm in
    float32 and rounded to nearest, as on the CPU."""
    config = OptimConfig("adagrad", 0.1, row_norm=1.0)
    table = torch.randn(50, 32, generator=torch.Generator().manual_seed(4)).bfloat16()
    data = batches(50, 32, steps=4)
    got, _ = run(config, table, data, "cuda")
    norms = got.float().norm(dim=1)
    touched = torch.unique(torch.cat([ids for ids, _ in data]))
    torch.testing.assert_close(norms[touched], torch.ones(len(touched)), atol=1e-2, rtol=0)
