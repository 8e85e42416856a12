"""The CUDA core against the CPU core, its twin from the same math header: every optimizer, duplicate rule
and step count, dims 1, 33 (scalar loads), 128, 129, 1000, many steps, within 1e-5; bitwise determinism
run to run; more than 65,535 unique rows; out-of-range ids and foreign devices leave everything
untouched; a side stream; a table on the second device; empty batches; gather and overwrite; no
cudaMalloc in a steady loop."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native import optim as native
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step
from graphtrain.runtime.optim.functional import native_args

RTOL, ATOL = 1e-5, 1e-6
DIMS = [1, 33, 128, 129, 1000]
CONFIGS = [
    OptimConfig("sgd", 0.1),
    OptimConfig("sgd", 0.1, duplicate="mean", weight_decay=0.01),
    OptimConfig("adagrad", 0.1, initial_accumulator=0.1),
    OptimConfig("adagrad", 0.1, duplicate="mean"),
    OptimConfig("rowwise_adagrad", 0.1),
    OptimConfig("rowwise_adagrad", 0.1, duplicate="mean", weight_decay=0.01),
    OptimConfig("adam", 0.01),
    OptimConfig("adam", 0.01, duplicate="mean", weight_decay=0.01),
    OptimConfig("adam", 0.01, beta1=0.8, beta2=0.99, step_count="global"),
]


def batches(rows: int, dim: int, steps: int = 12, size: int = 512, seed: int = 0):
    """Heavy duplicates, an empty batch, an all-duplicate batch of the last row."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        if step == 3:
            ids = torch.empty(0, dtype=torch.int64)
        elif step == 5:
            ids = torch.full((size,), rows - 1, dtype=torch.int64)
        else:
            ids = torch.randint(0, max(1, rows // 4), (size,), generator=g)
            ids[::7] = rows - 1
        out.append((ids, torch.randn(len(ids), dim, generator=g)))
    return out


def run(config: OptimConfig, table: torch.Tensor, data, device: str, backend: str):
    t = table.clone().to(device)
    state = make_state(config, t.shape[0], t.shape[1], t.device)
    for ids, grads in data:
        sparse_step(config, t, state, ids.to(device), grads.to(device), backend=backend)
    torch.cuda.synchronize()
    return t.cpu(), {k: v.cpu() for k, v in state.items()}


def assert_close(got, want) -> None:
    torch.testing.assert_close(got[0], want[0], rtol=RTOL, atol=ATOL)
    assert got[1].keys() == want[1].keys()
    for key in want[1]:
        torch.testing.assert_close(got[1][key], want[1][key], rtol=RTOL, atol=ATOL, msg=key)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: f"{c.kind}-{c.duplicate}-{c.step_count}-wd{c.weight_decay}"
)
def test_matches_the_cpu_core(config: OptimConfig, dim: int) -> None:
    rows = 300
    table = torch.randn(rows, dim, generator=torch.Generator().manual_seed(1))
    data = batches(rows, dim)
    assert_close(run(config, table, data, "cuda", "cuda"), run(config, table, data, "cpu", "cpu"))


@pytest.mark.parametrize("config", CONFIGS[::2], ids=lambda c: c.kind)
def test_bitwise_deterministic_run_to_run(config: OptimConfig) -> None:
    table = torch.randn(500, 128, generator=torch.Generator().manual_seed(2))
    data = batches(500, 128, size=4096)
    first, second = run(config, table, data, "cuda", "cuda"), run(config, table, data, "cuda", "cuda")
    assert torch.equal(first[0], second[0])
    for key in first[1]:
        assert torch.equal(first[1][key], second[1][key]), key


@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adam"])
def test_more_unique_rows_than_a_grid_dimension(kind: str) -> None:
    rows, dim = 300_000, 32
    g = torch.Generator().manual_seed(3)
    ids = torch.randperm(rows, generator=g)[:150_000]
    ids = torch.cat([ids, ids[:1000]])  # and some duplicates
    data = [(ids, torch.randn(len(ids), dim, generator=g))]
    config = OptimConfig(kind, 0.1)
    table = torch.randn(rows, dim, generator=g)
    assert_close(run(config, table, data, "cuda", "cuda"), run(config, table, data, "cpu", "cpu"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.kind}-{c.step_count}")
@pytest.mark.parametrize("bad", [-1, 300, 2**40])
def test_out_of_range_ids_leave_everything_untouched(config: OptimConfig, bad: int) -> None:
    table = torch.randn(300, 16, device="cuda")
    state = make_state(config, 300, 16, "cuda")
    before = table.clone(), {k: v.clone() for k, v in state.items()}
    ids = torch.tensor([1, 2, bad, 3, bad], device="cuda")
    with pytest.raises(SparseInputError, match=rf"ids\[2\] = {bad} is outside the table's rows \[0, 300\)"):
        sparse_step(config, table, state, ids, torch.ones(5, 16, device="cuda"), backend="cuda")
    assert torch.equal(table, before[0])
    for key in state:
        assert torch.equal(state[key], before[1][key]), key


def test_state_on_another_device_is_refused_before_anything_changes() -> None:
    config = OptimConfig("adam", 0.01, step_count="global")
    table = torch.randn(10, 4, device="cuda")
    state = make_state(config, 10, 4, "cuda")
    state["exp_avg"] = state["exp_avg"].cpu()
    before = table.clone()
    with pytest.raises(SparseInputError, match="state 'exp_avg' is on cpu"):
        cuda.sparse_step(
            native_args(config),
            table,
            state,
            torch.tensor([1], device="cuda"),
            torch.ones(1, 4, device="cuda"),
        )
    assert torch.equal(table, before) and int(state["step"][0]) == 0


def test_runs_on_the_callers_side_stream() -> None:
    config = OptimConfig("adagrad", 0.1)
    table = torch.randn(1000, 64, generator=torch.Generator().manual_seed(4))
    data = batches(1000, 64, size=20_000)
    want = run(config, table, data, "cpu", "cpu")
    t = table.cuda()
    state = make_state(config, 1000, 64, "cuda")
    side = torch.cuda.Stream()
    moved = [(i.cuda(), g.cuda()) for i, g in data]
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for ids, grads in moved:
            sparse_step(config, t, state, ids, grads, backend="cuda")
        side.synchronize()
    assert_close((t.cpu(), {k: v.cpu() for k, v in state.items()}), want)


def test_table_on_the_second_device() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: the second-device test needs two")
    config = OptimConfig("adam", 0.01)
    table = torch.randn(400, 96, generator=torch.Generator().manual_seed(5))
    data = batches(400, 96)
    torch.cuda.set_device(0)
    got = run(config, table, data, "cuda:1", "cuda")
    assert torch.cuda.current_device() == 0  # the core restored the caller's device
    assert_close(got, run(config, table, data, "cpu", "cpu"))
    t0 = torch.zeros(10, 4, device="cuda:0")
    with pytest.raises(SparseInputError, match="ids is on cuda:1; the table is on cuda:0"):
        cuda.gather(t0, torch.tensor([1], device="cuda:1"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.kind}-{c.step_count}")
def test_empty_batch(config: OptimConfig) -> None:
    table = torch.randn(10, 8, device="cuda")
    state = make_state(config, 10, 8, "cuda")
    before = table.clone()
    empty = torch.empty(0, dtype=torch.int64, device="cuda")
    assert sparse_step(config, table, state, empty, torch.empty(0, 8, device="cuda"), backend="cuda") == 0
    assert torch.equal(table, before)
    if config.step_count == "global":
        assert int(state["step"][0]) == 1  # torch.optim.SparseAdam counts an empty step
    assert cuda.gather(table, empty).shape == (0, 8)
    cuda.scatter(table, empty, torch.empty(0, 8, device="cuda"))


@pytest.mark.parametrize("dim", [1, 33, 128])
def test_gather_and_scatter_match_the_cpu_core(dim: int) -> None:
    g = torch.Generator().manual_seed(6)
    table = torch.randn(1000, dim, generator=g)
    ids = torch.randint(0, 1000, (5000,), generator=g)
    values = torch.randn(5000, dim, generator=g)
    assert torch.equal(cuda.gather(table.cuda(), ids.cuda()).cpu(), table[ids])
    want, got = table.clone(), table.cuda()
    native.scatter(want, ids, values, threads=1)  # the last of duplicate ids wins
    cuda.scatter(got, ids.cuda(), values.cuda())
    assert torch.equal(got.cpu(), want)
    with pytest.raises(SparseInputError, match=r"ids\[1\] = 1000 is outside"):
        cuda.scatter(got, torch.tensor([0, 1000], device="cuda"), torch.zeros(2, dim, device="cuda"))
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
def test_no_weight_decay_reads_no_weight(kind: str) -> None:
    config = OptimConfig(kind, 0.1)
    table = torch.randn(10, 33, device="cuda")
    table[3, 32] = float("inf")
    state = make_state(config, 10, 33, "cuda")
    sparse_step(
        config,
        table,
        state,
        torch.tensor([3, 5], device="cuda"),
        torch.ones(2, 33, device="cuda"),
        backend="cuda",
    )
    assert torch.isfinite(table[3, :32]).all() and torch.isfinite(table[5]).all()
    for key, value in state.items():
        assert torch.isfinite(value.float()).all(), key


def test_a_steady_loop_allocates_no_device_memory() -> None:
    """Workspaces come from torch's caching allocator: once warm, no new segment (cudaMalloc)."""
    config = OptimConfig("adam", 0.01)
    table = torch.randn(100_000, 128, device="cuda")
    state = make_state(config, 100_000, 128, "cuda")
    g = torch.Generator(device="cuda").manual_seed(7)
    data = [
        (
            torch.randint(0, 100_000, (50_000,), device="cuda", generator=g),
            torch.randn(50_000, 128, device="cuda", generator=g),
        )
        for _ in range(6)
    ]
    for ids, grads in data[:2]:
        sparse_step(config, table, state, ids, grads, backend="cuda")
    segments = torch.cuda.memory_stats()["segment.all.allocated"]
    for ids, grads in data[2:]:
        sparse_step(config, table, state, ids, grads, backend="cuda")
    assert torch.cuda.memory_stats()["segment.all.allocated"] == segments


def test_probe_reports_the_device() -> None:
    found = cuda.probe(0)
    assert found.ok and found.devices >= 1 and found.capability >= 80 and found.driver >= found.runtime
    assert found.binary_version or found.ptx_version
