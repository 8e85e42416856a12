"""Bad input is refused before anything changes; results do not depend on the thread count; the
backend choice is explicit; the embedding's gradient capture does not leak."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graphtrain.runtime.native import backend as native_backend
from graphtrain.runtime.native import optim as native
from graphtrain.runtime.native.backend import CoreBackend, choose
from graphtrain.runtime.native.optim import SparseInputError
from graphtrain.runtime.optim import (
    OptimConfig,
    SparseAdam,
    SparseEmbedding,
    SparseSGD,
    choose_backend,
    make_state,
    sparse_step,
)
from graphtrain.runtime.optim.functional import ENV_THREADS, native_args, unit_complex
from graphtrain.runtime.optim.functional import threads as team_size

BACKENDS = ["torch", "cpu"]  # the tensors here are on the CPU; a missing core fails (conftest.py)


def setup(config: OptimConfig, rows: int = 10, dim: int = 4):
    table = torch.randn(rows, dim, generator=torch.Generator().manual_seed(0))
    return table, make_state(config, rows, dim)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("bad", [-1, 10, 2**40])
def test_bad_ids_change_nothing(backend: str, kind: str, bad: int) -> None:
    config = OptimConfig(kind, 0.1, step_count="global" if kind == "adam" else "row")
    table, state = setup(config)
    before_t, before_s = table.clone(), {k: v.clone() for k, v in state.items()}
    ids = torch.tensor([1, 2, bad, 3])
    with pytest.raises(SparseInputError, match=rf"ids\[2\] = {bad} is outside the table's rows \[0, 10\)"):
        sparse_step(config, table, state, ids, torch.ones(4, 4), backend=backend)
    assert torch.equal(table, before_t)
    for key in state:
        assert torch.equal(state[key], before_s[key]), key


@pytest.mark.parametrize(
    ("ids", "grads", "needle"),
    [
        (torch.tensor([1, 2], dtype=torch.int32), torch.ones(2, 4), "ids must be a 1-D int64"),
        (torch.tensor([[1, 2]]), torch.ones(2, 4), "ids must be a 1-D int64"),
        (torch.tensor([1, 2]), torch.ones(2, 4, dtype=torch.float64), "grads must be float32"),
        (torch.tensor([1, 2]), torch.ones(3, 4), r"grads must be float32 of shape \(2, 4\)"),
        (torch.tensor([1, 2]), torch.ones(2, 5), r"shape \(2, 4\)"),
    ],
)
def test_bad_tensors_are_named(ids: torch.Tensor, grads: torch.Tensor, needle: str) -> None:
    config = OptimConfig("sgd", 0.1)
    table, state = setup(config)
    with pytest.raises(SparseInputError, match=needle):
        sparse_step(config, table, state, ids, grads)


def test_bad_table_and_state() -> None:
    config = OptimConfig("adagrad", 0.1)
    table, state = setup(config)
    with pytest.raises(SparseInputError, match="contiguous 2-D float32"):
        sparse_step(config, table.t(), state, torch.tensor([0]), torch.ones(1, 10))
    with pytest.raises(ValueError, match="state 'sum' must be"):
        sparse_step(config, table, {"sum": torch.zeros(3, 4)}, torch.tensor([0]), torch.ones(1, 4))
    with pytest.raises(ValueError, match="needs entries"):
        sparse_step(config, table, {}, torch.tensor([0]), torch.ones(1, 4))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"kind": "sgd", "lr": float("nan")}, "lr must be a finite number"),
        ({"kind": "sgd", "lr": float("inf")}, "lr must be a finite number"),
        ({"kind": "sgd", "lr": 0.0}, "lr must be > 0"),
        ({"kind": "adagrad", "lr": 0.1, "eps": -1.0}, "eps must be >= 0"),
        ({"kind": "adam", "lr": 0.1, "beta2": 1.0}, r"beta2 must be in \[0, 1\)"),
        ({"kind": "adam", "lr": 0.1, "weight_decay": float("nan")}, "weight_decay must be a finite"),
        ({"kind": "adamw", "lr": 0.1}, "kind must be one of"),
        ({"kind": "adam", "lr": 0.1, "step_count": "epoch"}, "step_count"),
        ({"kind": "sgd", "lr": 0.1, "duplicate": "max"}, "duplicate"),
    ],
)
def test_bad_hyper_parameters(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        OptimConfig(**kwargs)


@pytest.mark.usefixtures("cpu_core")
@pytest.mark.parametrize("kind", ["adagrad", "rowwise_adagrad", "adam"])
def test_results_do_not_depend_on_threads(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config = OptimConfig(kind, 0.05, duplicate="sum")
    g = torch.Generator().manual_seed(1)
    data = [
        (torch.randint(0, 500, (5000,), generator=g), torch.randn(5000, 24, generator=g)) for _ in range(5)
    ]
    results = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("GRAPHTRAIN_OPTIM_THREADS", threads)
        table, state = setup(config, rows=500, dim=24)
        for ids, grads in data:
            sparse_step(config, table, state, ids, grads, backend="cpu")
        results.append(table)
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


@pytest.mark.usefixtures("cpu_core")
@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adam"])
def test_a_capped_team_steps_as_the_full_one(kind: str) -> None:
    """max_threads=1 (a shard server's I/O thread) changes who computes, not what: a step over one
    checked block of 1,024 x 64 (uncapped: a team of torch's threads) equals the uncapped step bit for bit."""
    config = OptimConfig(kind, 0.05, step_count="global")
    g = torch.Generator().manual_seed(2)
    ids, grads = torch.randint(0, 4000, (1024,), generator=g), torch.randn(1024, 64, generator=g)
    results = []
    for cap in (None, 1):
        table, state = setup(config, rows=4000, dim=64)
        for _ in range(3):
            sparse_step(config, table, state, ids, [grads], backend="cpu", finite=True, max_threads=cap)
        results.append((table, state))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(results[0][1][k], results[1][1][k]) for k in results[0][1])


def test_a_thread_count_that_is_no_number_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """As an unknown backend is: int()'s "invalid literal for int() with base 10" named nothing."""
    from graphtrain.runtime.optim.functional import threads

    for bad in ("abc", "-2", "1.5"):
        monkeypatch.setenv(ENV_THREADS, bad)
        with pytest.raises(ValueError, match=f"GRAPHTRAIN_OPTIM_THREADS={bad!r}: not a whole number"):
            threads()
    monkeypatch.setenv(ENV_THREADS, "0")
    assert threads() == 1


@pytest.mark.usefixtures("cpu_core")
def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.delenv("GRAPHTRAIN_OPTIM_BACKEND", raising=False)
    assert choose_backend(cpu) == "cpu"
    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", "torch")
    assert choose_backend(cpu) == "torch"
    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", "gpu")
    with pytest.raises(ValueError, match="must be one of"):
        choose_backend(cpu)
    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", "cuda")
    with pytest.raises(ValueError, match="CUDA core"):
        choose_backend(cpu)
    monkeypatch.setattr(native_backend, "available", lambda: False)  # as where the core was not built
    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", "cpu")
    with pytest.raises(ValueError, match="needs the native core"):
        choose_backend(cpu)
    monkeypatch.delenv("GRAPHTRAIN_OPTIM_BACKEND")
    native_backend._core_missing.cache_clear()
    with pytest.warns(RuntimeWarning, match="native CPU core is not built"):  # said, not silent
        assert choose_backend(cpu) == "torch"
    native_backend._core_missing.cache_clear()


@pytest.mark.usefixtures("cpu_core")
def test_only_the_optimizer_reads_the_backend_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gather, dedup, sampling and the rest keep the core when GRAPHTRAIN_OPTIM_BACKEND picks torch for
    the optimizer (sampling's fallback would draw other neighbours); a device no core serves gets torch."""
    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", "torch")
    assert choose_backend(torch.device("cpu")) is CoreBackend.TORCH
    assert choose() is CoreBackend.CPU and choose(torch.device("cpu")) is CoreBackend.CPU
    assert choose("meta") is CoreBackend.TORCH
    if not torch.cuda.is_available():
        assert choose("cuda:0") is CoreBackend.TORCH


@pytest.mark.usefixtures("cpu_core")
def test_native_dedup_gather_scatter() -> None:
    ids = torch.tensor([5, 2, 5, 9, 2, 5])
    grads = torch.arange(6 * 3, dtype=torch.float32).reshape(6, 3)
    uids, summed, inverse = native.dedup(ids, grads, 10, mean=False, threads=2)
    assert uids.tolist() == [5, 2, 9]  # first-occurrence order
    assert torch.equal(summed[0], grads[0] + grads[2] + grads[5])
    assert inverse.tolist() == [0, 1, 0, 2, 1, 0]
    _, mean, _ = native.dedup(ids, grads, 10, mean=True, threads=2)
    torch.testing.assert_close(mean[1], (grads[1] + grads[4]) / 2)
    _, shared, _ = native.dedup(ids, grads, 10, mean=False, threads=2, share_distinct=True)
    assert torch.equal(shared, summed)  # duplicates: reduced as always
    distinct = torch.tensor([4, 0, 7])
    uids, same, inverse = native.dedup(distinct, grads[:3], 10, mean=True, threads=2, share_distinct=True)
    assert uids.tolist() == [4, 0, 7] and inverse.tolist() == [0, 1, 2]
    assert same.data_ptr() == grads.data_ptr()  # every id distinct: the gradients as they are
    table = torch.randn(10, 3)
    torch.testing.assert_close(native.gather(table, ids, threads=2), table[ids])
    native.scatter(table, ids, grads, threads=2)
    assert torch.equal(table[5], grads[5]) and torch.equal(table[2], grads[4])  # the last write wins
    with pytest.raises(SparseInputError, match=r"ids\[1\] = 10"):
        native.gather(table, torch.tensor([0, 10]), threads=2)


def test_native_dedup_of_keys_takes_any_int64_and_rows_stay_checked() -> None:
    keys = torch.tensor([-(2**63), 2**62, -7, 2**62, -(2**63)])
    grads = torch.arange(5 * 2, dtype=torch.float32).reshape(5, 2)
    uids, summed, inverse = native.dedup(keys, grads, -1, mean=False, threads=2)
    assert uids.tolist() == [-(2**63), 2**62, -7] and inverse.tolist() == [0, 1, 2, 1, 0]
    assert torch.equal(summed[0], grads[0] + grads[4])
    with pytest.raises(SparseInputError):
        native.dedup(keys, grads, 10, mean=False, threads=2)  # row ids: checked against the rows


@pytest.mark.usefixtures("cpu_core")
def test_native_gather_to_positions() -> None:
    table = torch.randn(10, 3)
    out = torch.zeros(5, 3)
    dest = torch.tensor([4, 0, 2])
    native.gather(table, torch.tensor([7, 1, 7]), 2, out, dest)
    assert torch.equal(out[[4, 0, 2]], table[[7, 1, 7]])
    assert not out[[1, 3]].any()  # rows not named are left alone
    for bad, match in (
        (torch.tensor([0, 5, 1]), r"dest positions must be in \[0, 5\)"),
        (torch.tensor([0, 1]), "dest has 2 positions for 3 ids"),
    ):
        with pytest.raises(SparseInputError, match=match):
            native.gather(table, torch.tensor([1, 2, 3]), 2, out, bad)
    with pytest.raises(SparseInputError, match="rows of 4"):
        native.gather(table, torch.tensor([1]), 2, torch.zeros(1, 4))
    with pytest.raises(SparseInputError, match="2 rows for 3 ids"):
        native.gather(table, torch.tensor([1, 2, 3]), 2, torch.zeros(2, 3))


def test_embedding_gradients_and_no_leak() -> None:
    emb = SparseEmbedding(50, 4, "e")
    opt = SparseSGD([emb], lr=1.0)
    before = emb.weight.clone()
    ids = torch.tensor([[1, 2], [2, 3]])
    out = emb(ids)
    assert out.shape == (2, 2, 4)
    out.sum().backward()
    emb(torch.tensor([3])).sum().backward()  # a second forward in the same step accumulates
    assert opt.step() == 3
    expected = before.clone()
    expected[1] -= 1
    expected[2] -= 2
    expected[3] -= 2
    torch.testing.assert_close(emb.weight, expected)
    for _ in range(100):  # forwards never followed by step() must not pile up: freed by reference
        emb(torch.arange(50))  # counting alone (a gc.collect() per forward cost a minute on the suite's heap)
    assert len(emb._capture) <= 1
    with torch.no_grad():
        emb(torch.arange(5))
    assert len(emb._capture) <= 1
    emb(torch.tensor([1])).sum().backward()
    opt.zero_grad()
    assert opt.step() == 0  # zero_grad dropped the pending gradient


def test_the_captured_gradient_is_backwards_own_tensor_not_a_copy() -> None:
    """The rows' gradient is taken as autograd stores it: no copy left in rows.grad (7 MB a WordNet
    step), and a second backward over a retained graph still adds to it."""
    made: list[torch.Tensor] = []

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
            made.append(grad * 2)
            return made[-1]

    emb = SparseEmbedding(50, 4, "e")
    rows = emb(torch.tensor([1, 2, 3]))
    loss = Twice.apply(rows).sum()
    loss.backward(retain_graph=True)
    ids, grads = emb.pending()
    leaf = rows._base if rows._base is not None else rows  # emb() returns a view of the leaf
    assert leaf.grad is None and grads.data_ptr() == made[0].data_ptr()
    torch.testing.assert_close(grads, torch.full((3, 4), 2.0))
    loss.backward()
    torch.testing.assert_close(emb.pending()[1], torch.full((3, 4), 4.0))
    assert torch.equal(ids, torch.tensor([1, 2, 3]))


def test_embedding_errors() -> None:
    emb = SparseEmbedding(5, 2, "e")
    with pytest.raises(IndexError):
        emb(torch.tensor([5]))
    SparseSGD([emb], lr=0.1)
    with pytest.raises(ValueError, match="already has optimizer sgd"):
        SparseAdam([emb], lr=0.1)
    other = SparseEmbedding(5, 2, "e")
    with pytest.raises(ValueError, match="names must be unique"):
        SparseSGD([other, SparseEmbedding(5, 2, "e")], lr=0.1)
    with pytest.raises(ValueError, match="num_embeddings and dim"):
        SparseEmbedding(0, 2, "z")


TOUCHED = torch.tensor([1, 4, 7])


def constrained_step(constrained: OptimConfig, backend: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(table, reference): one step on rows 1, 4, 4, 7 with `constrained`, and the same step without its
    constraint on the torch reference; untouched rows checked equal here."""
    plain = dataclasses.replace(constrained, row_norm=0.0, unit_complex=False)
    table, state = setup(plain)
    ref_t, ref_s = table.clone(), {k: v.clone() for k, v in state.items()}
    ids = torch.tensor([1, 4, 4, 7])
    grads = torch.randn(4, 4, generator=torch.Generator().manual_seed(seed))
    sparse_step(constrained, table, state, ids, grads, backend=backend)
    sparse_step(plain, ref_t, ref_s, ids, grads, backend="torch")
    others = torch.tensor([i for i in range(10) if i not in TOUCHED.tolist()])
    assert torch.equal(table[others], ref_t[others])
    return table, ref_t


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_row_norm_projects_the_updated_rows_only(backend: str, kind: str) -> None:
    """row_norm (the KGE entity constraint): the step, then each touched row scaled to the norm."""
    table, ref_t = constrained_step(OptimConfig(kind, 0.1, row_norm=1.0), backend, 1)
    expect = ref_t[TOUCHED] / ref_t[TOUCHED].norm(dim=1, keepdim=True)
    torch.testing.assert_close(table[TOUCHED], expect, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(table.norm(dim=1)[TOUCHED], torch.ones(3))
    with pytest.raises(ValueError, match="row_norm"):
        OptimConfig(kind, 0.1, row_norm=-1.0)


@pytest.mark.parametrize("dim", [16, 37, 128])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_cpu_cores_row_norm_in_its_loop_is_the_projection_after_the_step(
    dim: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU core scales a float32 table's updated rows in its update loop (OptimParams.row_norm): the
    torch reference's step and project_rows after it, to the last bits of the norm's sum, at a width of
    its own loop (16, 128) and a run-time one (37), on one thread or two; untouched rows unchanged."""
    config = OptimConfig("adam", 0.05, row_norm=1.0)
    table, state = setup(config, rows=300, dim=dim)
    ref_t, ref_s = table.clone(), {k: v.clone() for k, v in state.items()}
    gen = torch.Generator().manual_seed(dim)
    ids = torch.randint(0, 200, (500,), generator=gen)
    grads = torch.randn(500, dim, generator=gen)
    monkeypatch.setenv(ENV_THREADS, str(threads))
    sparse_step(config, table, state, ids, grads, backend="cpu")
    sparse_step(config, ref_t, ref_s, ids, grads, backend="torch")
    torch.testing.assert_close(table, ref_t, rtol=1e-6, atol=1e-7)
    assert torch.equal(table[200:], ref_t[200:])
    torch.testing.assert_close(table[ids.unique()].norm(dim=1), torch.ones(len(ids.unique())))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dim", [1, 4, 128])
def test_a_row_whose_squares_pass_float32_is_put_on_the_sphere_not_zeroed(backend: str, dim: int) -> None:
    """The projection sums a row's squares in double when float32 overflows (a row past ~1.8e19), in
    the CPU core and in project_rows: the row ends at the norm, not at zero."""
    config = OptimConfig("sgd", 1.0, row_norm=1.0)
    table, state = torch.full((2, dim), 1e20), make_state(config, 2, dim)
    sparse_step(config, table, state, torch.tensor([0]), torch.zeros(1, dim), backend=backend)
    torch.testing.assert_close(table[0], torch.full((dim,), dim**-0.5))
    assert torch.equal(table[1], torch.full((dim,), 1e20))


@pytest.mark.parametrize("bad", [1e-46, 1e-39, 1e39])
def test_a_row_norm_no_float32_holds_is_refused(bad: float) -> None:
    """The cores read row_norm as a float32: 1e-46 would be zero there (no projection at all)."""
    with pytest.raises(ValueError, match="row_norm"):
        OptimConfig("sgd", 0.1, row_norm=bad)
    assert OptimConfig("sgd", 0.1, row_norm=1e-30).row_norm == 1e-30


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_unit_complex_puts_the_updated_rows_complex_numbers_on_the_unit_circle(
    backend: str, kind: str
) -> None:
    """unit_complex (RotatE's relation constraint): the step, then each complex number of each touched
    row (real parts, then imaginary) divided by its modulus; a zero one becomes 1 + 0i; untouched rows
    keep their values; it cannot be set beside row_norm."""
    table, ref_t = constrained_step(OptimConfig(kind, 0.1, unit_complex=True), backend, 2)
    z = torch.complex(ref_t[TOUCHED, :2], ref_t[TOUCHED, 2:])
    expect = z / z.abs()
    torch.testing.assert_close(table[TOUCHED], torch.cat([expect.real, expect.imag], 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.complex(table[TOUCHED, :2], table[TOUCHED, 2:]).abs(), torch.ones(3, 2))
    assert unit_complex(torch.zeros(1, 4)).tolist() == [[1.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="row_norm and unit_complex"):
        OptimConfig(kind, 0.1, row_norm=1.0, unit_complex=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("blocks", ["tensor", "blocks", "one block"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_gradients_are_refused_before_anything_changes(
    backend: str, blocks: str, bad: float
) -> None:
    """finite=True (a shard server's default, issue 14 finding 4): one bad element refuses the whole step,
    the global Adam step included. "one block": a server's one-frame push, which a one-thread step scans
    on the native pieces path."""
    from graphtrain.runtime.errors import NonFiniteGradient

    config = OptimConfig("adam", 0.1, step_count="global")
    table, state = setup(config)
    before_t, before_s = table.clone(), {k: v.clone() for k, v in state.items()}
    grads = torch.ones(6, 4)
    grads[4, 2] = bad
    ids = torch.tensor([1, 2, 3, 3, 7, 9])
    pieces = {"tensor": grads, "blocks": [grads[:3], grads[3:]], "one block": [grads]}[blocks]
    with pytest.raises(NonFiniteGradient):
        sparse_step(config, table, state, ids, pieces, backend, finite=True, max_threads=1)
    assert torch.equal(table, before_t)
    assert all(torch.equal(state[k], before_s[k]) for k in state)


@pytest.mark.parametrize("row", [0, 777, 4_999])
def test_a_team_scanning_its_own_rows_refuses_the_whole_step_and_names_the_first_bad_row(row: int) -> None:
    """The CPU core's step of two threads scans the reduced rows each thread owns before any thread
    updates one: a NaN anywhere (here in a repeated id's row too) refuses everything, the global Adam
    step included, and the error names the batch's first bad row."""
    from graphtrain.runtime.errors import NonFiniteGradient

    config = OptimConfig("adam", 0.1, step_count="global")
    table, state = setup(config, 2_000, 64)  # 5,000 x 64 gradients: past one thread's size
    assert team_size(5_000 * 64) >= 2
    before_t, before_s = table.clone(), {k: v.clone() for k, v in state.items()}
    gen = torch.Generator().manual_seed(row)
    ids = torch.randint(0, table.shape[0], (5_000,), generator=gen)
    grads = torch.randn(5_000, table.shape[1], generator=gen)
    grads[row, -1] = float("nan")
    grads[4_999 if row < 4_999 else 0, 0] = float("inf")  # a later (or earlier) one: the first is named
    with pytest.raises(NonFiniteGradient, match=f"gradient row {min(row, 4_999 if row < 4_999 else 0)} "):
        sparse_step(config, table, state, ids, grads, "cpu", finite=True, max_threads=2)
    assert torch.equal(table, before_t)
    assert all(torch.equal(state[k], before_s[k]) for k in state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_ids_finite_gradients_that_sum_to_infinity_are_refused(backend: str) -> None:
    """The CPU core and the reference check the reduced rows: two finite 3e38 of one id sum to infinity,
    which would have reached the table; the global Adam step is not counted."""
    from graphtrain.runtime.errors import NonFiniteGradient

    config = OptimConfig("adam", 1e-3, step_count="global")
    table, state = setup(config)
    before_t, before_s = table.clone(), {k: v.clone() for k, v in state.items()}
    ids, grads = torch.tensor([5, 2, 2]), torch.full((3, 4), 3e38)
    with pytest.raises(NonFiniteGradient, match="the gradients of row 1's id sum to infinity"):
        sparse_step(config, table, state, ids, grads, backend, finite=True)
    assert torch.equal(table, before_t)
    assert all(torch.equal(state[k], before_s[k]) for k in state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_finite_gradients_whose_sum_overflows_are_applied(backend: str) -> None:
    """The fast check sums the gradients: 3e38 + 3e38 overflows to infinity, yet every value is finite."""
    config = OptimConfig("sgd", 1e-38)
    table, state = setup(config)
    grads = torch.full((2, 4), 3e38)
    sparse_step(config, table, state, torch.tensor([1, 2]), grads, backend, finite=True)
    assert torch.isfinite(table).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("dim", [4, 17, 33])  # 17, 33: row-wise Adagrad's tail past its 16 lanes
def test_no_weight_decay_reads_no_weight(backend: str, kind: str, dim: int) -> None:
    """weight_decay 0 adds no 0 * w: an infinite weight stays one element's problem instead of turning
    its row's (row-wise: its accumulator's) update into NaN. The CUDA kernels share the rule (tests/gpu)."""
    config = OptimConfig(kind, 0.1)
    table, state = setup(config, dim=dim)
    table[3, dim - 1] = float("inf")
    sparse_step(config, table, state, torch.tensor([3, 5]), torch.ones(2, dim), backend=backend)
    assert torch.isfinite(table[3, : dim - 1]).all() and torch.isfinite(table[5]).all()
    assert table[3, dim - 1] == float("inf")
    for key, value in state.items():
        assert torch.isfinite(value.float()).all(), key


@pytest.mark.parametrize("threads", [1, 2])
def test_a_push_in_pieces_is_refused_whole_for_a_nonfinite_row_or_an_overflowing_sum(threads: int) -> None:
    """A push in row blocks (a shard server's frames) gets the refusals of one array: a NaN row names
    its first position, finite rows of one id that sum to infinity name that id's first row, and nothing
    is touched either way (the scan runs inside the step, not as a pass before it)."""
    from graphtrain.runtime.errors import NonFiniteGradient

    config = OptimConfig("adam", 1e-3, step_count="global")
    table, state = setup(config)
    before_t, before_s = table.clone(), {k: v.clone() for k, v in state.items()}
    args = native_args(config)
    ids = torch.tensor([5, 2, 7, 2])
    grads = torch.ones(4, 4)
    grads[3, 1] = float("nan")
    with pytest.raises(NonFiniteGradient, match="gradient row 3 holds NaN"):
        native.sparse_step_pieces(args, table, state, ids, [grads[:2], grads[2:]], threads, True)
    grads = torch.ones(4, 4)
    grads[1] = grads[3] = 3e38
    with pytest.raises(NonFiniteGradient, match="the gradients of row 1's id sum to infinity"):
        native.sparse_step_pieces(args, table, state, ids, [grads[:1], grads[1:]], threads, True)
    # two ids overflow: the smallest (2) is named, by its first row, whatever the team's size
    many, overflowing = torch.tensor([7, 5, 2, 7, 2]), torch.ones(5, 4)
    overflowing[[0, 2, 3, 4]] = 3e38
    with pytest.raises(NonFiniteGradient, match="the gradients of row 2's id sum to infinity"):
        native.sparse_step_pieces(args, table, state, many, [overflowing[:2], overflowing[2:]], threads, True)
    with pytest.raises(NonFiniteGradient, match="the gradients of row 2's id sum to infinity"):
        native.sparse_step(args, table, state, many, overflowing, threads, refuse_nonfinite=True)
    assert torch.equal(table, before_t)
    assert all(torch.equal(state[k], before_s[k]) for k in state)
    grads[1] = grads[3] = 1.0  # a finite push in pieces is applied as one array would be
    state["step"].fill_(1)  # the table's count, which the caller (optim.sparse_step) raises
    whole_t, whole_s = table.clone(), {k: v.clone() for k, v in state.items()}
    native.sparse_step_pieces(args, table, state, ids, [grads[:3], grads[3:]], threads, True)
    native.sparse_step(args, whole_t, whole_s, ids, grads, threads, refuse_nonfinite=True)
    assert torch.equal(table, whole_t) and not torch.equal(table[[2, 5, 7]], before_t[[2, 5, 7]])
