"""Numerical parity of the sparse optimizers on every backend (a core that is not built fails, conftest.py).

Oracles: torch.optim on nn.Embedding(sparse=True) (sum rule), DGL 2.1's documented formulas written
here in numpy (mean rule, row-wise Adagrad state, per-row Adam steps), and the torch reference backend.
Many steps, heavy duplicates, an empty batch, a one-row table, an all-duplicate batch, the largest index.
Tolerance: relative 1e-5 (plus 1e-6 absolute for elements near zero).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.optim import (
    OptimConfig,
    SparseAdagrad,
    SparseAdam,
    SparseEmbedding,
    SparseRowwiseAdagrad,
    SparseSGD,
    make_state,
    sparse_step,
)
from tests.native.conftest import backends

BACKENDS = backends()
RTOL, ATOL = 1e-5, 1e-6
STEPS = 30


def batches(
    num_rows: int, dim: int, seed: int = 0, size: int = 64
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Heavy duplicates (ids from a small hot set), then the edge cases, then more heavy batches."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(STEPS):
        if step == 5:
            ids = torch.empty(0, dtype=torch.int64)  # empty batch
        elif step == 9:
            ids = torch.full((size,), num_rows - 1, dtype=torch.int64)  # all duplicates of the largest index
        else:
            hot = max(1, num_rows // 4)
            ids = torch.randint(0, hot, (size,), generator=g)
            ids[::7] = num_rows - 1
        out.append((ids, torch.randn(len(ids), dim, generator=g)))
    return out


def device_of(backend: str) -> str:
    return "cuda" if backend == "cuda" else "cpu"


def run_ours(config: OptimConfig, table: torch.Tensor, data, backend: str):
    t = table.clone().to(device_of(backend))
    state = make_state(config, t.shape[0], t.shape[1], t.device)
    for ids, grads in data:
        sparse_step(config, t, state, ids.to(t.device), grads.to(t.device), backend=backend)
    return t.cpu(), {k: v.cpu() for k, v in state.items()}


def run_torch_optim(make_opt, table: torch.Tensor, data) -> torch.Tensor:
    emb = torch.nn.Embedding(table.shape[0], table.shape[1], sparse=True)
    with torch.no_grad():
        emb.weight.copy_(table)
    opt = make_opt(emb.parameters())
    for ids, grads in data:
        opt.zero_grad()
        (emb(ids) * grads).sum().backward()
        if emb.weight.grad is None:  # an empty batch still counts as a step for the optimizer
            emb.weight.grad = torch.sparse_coo_tensor(
                torch.empty((1, 0), dtype=torch.int64), torch.empty((0, table.shape[1])), table.shape
            )
        opt.step()
    return emb.weight.detach()


TORCH_CASES = [
    ("sgd", OptimConfig("sgd", 0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    (
        "adagrad",
        OptimConfig("adagrad", 0.1, eps=1e-10, initial_accumulator=0.1),
        lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10, initial_accumulator_value=0.1),
    ),
    (
        "adam",
        OptimConfig("adam", 0.01, eps=1e-8, beta1=0.8, beta2=0.99, step_count="global"),
        lambda p: torch.optim.SparseAdam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-8),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "config", "make_opt"), TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
@pytest.mark.parametrize(("rows", "dim"), [(50, 16), (1, 8)])
def test_matches_torch_optim(
    backend: str, name: str, config: OptimConfig, make_opt, rows: int, dim: int
) -> None:
    table = torch.randn(rows, dim, generator=torch.Generator().manual_seed(3))
    data = batches(rows, dim)
    expected = run_torch_optim(make_opt, table, data)
    got, _ = run_ours(config, table, data, backend)
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ DGL 2.1's formulas (mean rule)


def dgl_oracle(kind: str, table: np.ndarray, data, lr: float, eps: float, betas=(0.9, 0.999)) -> np.ndarray:
    """DGL's sparse optimizers as documented: dedup with the mean rule, then
    - rowwise_adagrad (distributed SparseAdagrad): G_row += mean(g^2); w -= lr * g / (sqrt(G_row) + eps);
    - adam (SparseAdam): per-row step t; m, v; w -= lr * m_hat / (sqrt(v_hat) + eps).
    G is stored, not sqrt(G) + eps (DGL 2.1's CPU bug), so a multi-step run catches that bug."""
    w = table.astype(np.float32).copy()
    n, d = w.shape
    G = np.zeros(n, np.float32)
    m = np.zeros((n, d), np.float32)
    v = np.zeros((n, d), np.float32)
    steps = np.zeros(n, np.int64)
    b1, b2 = np.float32(betas[0]), np.float32(betas[1])
    for ids, grads in data:
        ids, grads = ids.numpy(), grads.numpy().astype(np.float32)
        if len(ids) == 0:
            continue
        uniq, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        gv = np.zeros((len(uniq), d), np.float32)
        np.add.at(gv, inverse, grads)
        gv /= counts[:, None].astype(np.float32)
        if kind == "rowwise_adagrad":
            G[uniq] += (gv * gv).mean(axis=1)
            w[uniq] -= np.float32(lr) * gv / (np.sqrt(G[uniq])[:, None] + np.float32(eps))
        else:
            steps[uniq] += 1
            t = steps[uniq].astype(np.float64)
            m[uniq] = b1 * m[uniq] + (1 - b1) * gv
            v[uniq] = b2 * v[uniq] + (1 - b2) * gv * gv
            m_hat = m[uniq] / (1 - np.power(float(b1), t)).astype(np.float32)[:, None]
            v_hat = v[uniq] / (1 - np.power(float(b2), t)).astype(np.float32)[:, None]
            w[uniq] -= np.float32(lr) * m_hat / (np.sqrt(v_hat) + np.float32(eps))
    return w


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adam"])
def test_matches_dgl_formulas(backend: str, kind: str) -> None:
    table = torch.randn(40, 12, generator=torch.Generator().manual_seed(5))
    data = batches(40, 12, seed=2)
    config = OptimConfig(kind, 0.05, eps=1e-8, duplicate="mean", step_count="row")
    got, _ = run_ours(config, table, data, backend)
    expected = torch.from_numpy(dgl_oracle(kind, table.numpy(), data, 0.05, 1e-8))
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dgl_sqrt_bug_would_be_caught(backend: str) -> None:
    """DGL 2.1's CPU SparseAdagrad stores sqrt(G)+eps instead of G from its second step. Our backends
    follow the formula, and the buggy variant lies far outside the parity tolerance, so a multi-step
    test catches anyone who copies that code."""
    table = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    data = [(torch.tensor([0, 1, 1]), torch.ones(3, 4))] * 3
    config = OptimConfig("rowwise_adagrad", 0.1, eps=1e-10, duplicate="mean")
    got, _ = run_ours(config, table, data, backend)
    good = torch.from_numpy(dgl_oracle("rowwise_adagrad", table.numpy(), data, 0.1, 1e-10))
    torch.testing.assert_close(got, good, rtol=RTOL, atol=ATOL)
    w, G = table.numpy().copy(), np.zeros(5, np.float32)
    for _ in range(3):
        G[[0, 1]] += 1.0
        std = np.sqrt(G[[0, 1]]) + np.float32(1e-10)
        w[[0, 1]] -= np.float32(0.1) / std[:, None]
        G[[0, 1]] = std  # the bug
    assert not np.allclose(got.numpy(), w, rtol=RTOL * 100, atol=ATOL * 100)


# ------------------------------------------------------------- every config, native vs reference


CONFIGS = [
    OptimConfig(kind, 0.05, eps=1e-8, step_count=sc, duplicate=dup, weight_decay=wd, initial_accumulator=acc)
    for kind in ("sgd", "adagrad", "rowwise_adagrad", "adam")
    for sc in ("row", "global")
    for dup in ("sum", "mean")
    for wd, acc in ((0.0, 0.0), (0.01, 0.1))
    if not (sc == "global" and kind != "adam")
]


@pytest.mark.parametrize("backend", backends(reference=False))
@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: f"{c.kind}-{c.step_count}-{c.duplicate}-wd{c.weight_decay}"
)
def test_native_matches_reference(backend: str, config: OptimConfig) -> None:
    table = torch.randn(300, 33, generator=torch.Generator().manual_seed(7))  # odd dim on purpose
    assert_matches_reference(config, table, batches(300, 33, seed=4, size=500), backend)


def assert_matches_reference(config: OptimConfig, table: torch.Tensor, data, backend: str) -> None:
    ref_t, ref_s = run_ours(config, table, data, "torch")
    got_t, got_s = run_ours(config, table, data, backend)
    torch.testing.assert_close(got_t, ref_t, rtol=RTOL, atol=ATOL)
    for key in ref_s:
        torch.testing.assert_close(got_s[key], ref_s[key], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", backends(reference=False))
@pytest.mark.parametrize("dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_native_matches_reference_at_compiled_widths(
    backend: str, dim: int, kind: str, weight_decay: float
) -> None:
    """The CPU core compiles its update loop separately for these row widths (constant at compile
    time); each copy must agree with the reference like the run-time-width loop above."""
    config = OptimConfig(kind, 0.05, eps=1e-8, duplicate="mean", weight_decay=weight_decay)
    table = torch.randn(200, dim, generator=torch.Generator().manual_seed(11))
    assert_matches_reference(config, table, batches(200, dim, seed=8, size=300), backend)


# -------------------------------------------------------------------------- the optimizer classes


@pytest.mark.parametrize("backend", BACKENDS)
def test_optimizer_classes_follow_torch(backend: str) -> None:
    rows, dim = 20, 6
    table = torch.randn(rows, dim, generator=torch.Generator().manual_seed(9))
    data = batches(rows, dim, seed=6)
    cases = [
        (lambda e: SparseSGD([e], lr=0.1, backend=backend), lambda p: torch.optim.SGD(p, lr=0.1)),
        (lambda e: SparseAdagrad([e], lr=0.1, backend=backend), lambda p: torch.optim.Adagrad(p, lr=0.1)),
        (
            lambda e: SparseAdam([e], lr=0.01, step_count="global", backend=backend),
            lambda p: torch.optim.SparseAdam(p, lr=0.01),
        ),
    ]
    for ours, theirs in cases:
        emb = SparseEmbedding(rows, dim, "t", init=lambda w: w.copy_(table), device=device_of(backend))
        opt = ours(emb)
        for ids, grads in data:
            out = emb(ids.to(emb.weight.device))
            (out * grads.to(out.device)).sum().backward()
            opt.step()
        torch.testing.assert_close(
            emb.weight.cpu(), run_torch_optim(theirs, table, data), rtol=RTOL, atol=ATOL
        )


def test_rowwise_optimizer_has_one_state_per_row() -> None:
    emb = SparseEmbedding(10, 4, "r")
    SparseRowwiseAdagrad([emb], lr=0.1)
    assert emb.state["sum"].shape == (10,)


CONFIGS_FOR_PIECES = [
    OptimConfig("sgd", 0.1),
    OptimConfig("adagrad", 0.1, duplicate="mean"),
    OptimConfig("rowwise_adagrad", 0.1),
    OptimConfig("adam", 0.05, step_count="row"),
    OptimConfig("adam", 0.05, step_count="global", duplicate="mean"),
]


@pytest.mark.parametrize("config", CONFIGS_FOR_PIECES, ids=lambda c: f"{c.kind}-{c.step_count}-{c.duplicate}")
@pytest.mark.parametrize("dim", [8, 128])
@pytest.mark.usefixtures("cpu_core")
def test_gradients_in_row_blocks_match_one_tensor(config: OptimConfig, dim: int) -> None:
    """A push that reached a shard server in several frames is one step: the native core reading the
    blocks where they lie (one pointer per row) equals the torch reference on the concatenated rows,
    duplicates across blocks included."""
    table = torch.randn(50, dim, generator=torch.Generator().manual_seed(3))
    ours, ref = table.clone(), table.clone()
    s_ours, s_ref = make_state(config, 50, dim), make_state(config, 50, dim)
    for step, (ids, grads) in enumerate(batches(50, dim, seed=11, size=97)):
        cuts = sorted({0, len(ids), *[(step * 13 + 7 * k) % (len(ids) + 1) for k in range(3)]})
        blocks = [grads[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
        sparse_step(config, ours, s_ours, ids, blocks, backend="cpu")
        sparse_step(config, ref, s_ref, ids, grads, backend="torch")
        torch.testing.assert_close(ours, ref, rtol=RTOL, atol=ATOL)
        for key in s_ref:
            torch.testing.assert_close(s_ours[key], s_ref[key], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_row_stepped_is_torch_optim_adam_on_a_dense_table(backend: str) -> None:
    """optimizer.rows: all (a KGE trainer pushes the whole table, zeros where the batch had no gradient):
    with per-row step counts that is torch.optim.Adam on a dense parameter, untouched rows moved by their
    momentum, as PyKEEN trains. The lazy step (only the rows touched) is not: the check would see it."""
    rows, dim = 12, 5
    g = torch.Generator().manual_seed(9)
    table = torch.randn(rows, dim, generator=g)
    grads = []
    for step in range(8):
        grad = torch.randn(rows, dim, generator=g)
        grad[(torch.arange(rows) + step) % 3 == 0] = 0.0  # a third of the rows absent from each batch
        grads.append(grad)
    dense = table.clone().requires_grad_()
    adam = torch.optim.Adam([dense], lr=0.01, eps=1e-8)
    for grad in grads:
        adam.zero_grad()
        dense.grad = grad.clone()
        adam.step()
    config = OptimConfig(kind="adam", lr=0.01, eps=1e-8, step_count="row")
    every, lazy = table.clone(), table.clone()
    s_every, s_lazy = make_state(config, rows, dim), make_state(config, rows, dim)
    for grad in grads:
        sparse_step(config, every, s_every, torch.arange(rows), grad, backend=backend)
        touched = torch.nonzero(grad.abs().sum(1) > 0).flatten()
        sparse_step(config, lazy, s_lazy, touched, grad[touched], backend=backend)
    torch.testing.assert_close(every, dense.detach(), rtol=RTOL, atol=ATOL)
    assert not torch.allclose(lazy, dense.detach(), rtol=RTOL, atol=ATOL)
