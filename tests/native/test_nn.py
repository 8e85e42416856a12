"""Fused ReLU + dropout, with a bias added first, and ELU + dropout (native) against their definitions,
and the torch fallback's statistics."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from graphtrain.runtime.native import nn as native_nn
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.native.nn import bias_relu_dropout, elu_dropout, relu_dropout

pytestmark = pytest.mark.usefixtures("cpu_core")  # a missing core fails these tests (conftest.py)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keeps_positive_elements_with_probability_one_minus_p(p: float) -> None:
    torch.manual_seed(0)
    x = torch.randn(1000, 257)  # not a multiple of the kernel's chunk
    out = relu_dropout(x, p)
    kept = out != 0
    assert not kept[x <= 0].any()
    torch.testing.assert_close(out[kept], x[kept] / (1 - p))
    positives = int((x > 0).sum())
    rate = int(kept.sum()) / positives
    sd = (p * (1 - p) / positives) ** 0.5
    assert abs(rate - (1 - p)) < 5 * sd


def test_backward_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(1)
    x = torch.randn(300, 64, requires_grad=True)
    out = relu_dropout(x, 0.3)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    torch.testing.assert_close(x.grad, upstream * (out != 0) / 0.7)


def _per_thread_count(draw: Callable[[], torch.Tensor], seed: int) -> list[torch.Tensor]:
    """draw() under 1, 2 and 3 threads, torch seeded alike before each."""
    before, outs = torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            torch.manual_seed(seed)
            outs.append(draw())
    finally:
        torch.set_num_threads(before)
    return outs


def test_seeded_by_torch_and_independent_of_threads() -> None:
    x = torch.randn(513, 129)
    outs = _per_thread_count(lambda: relu_dropout(x, 0.5), seed=5)
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    torch.manual_seed(6)
    assert not torch.equal(outs[0], relu_dropout(x, 0.5))  # another draw, another mask


def test_eval_and_zero_p_are_relu_and_bad_p_is_refused() -> None:
    x = torch.randn(50, 8)
    assert torch.equal(relu_dropout(x, 0.5, training=False), torch.relu(x))
    assert torch.equal(relu_dropout(x, 0.0), torch.relu(x))
    for p in (-0.1, 1.0):
        with pytest.raises(ValueError, match="dropout probability"):
            relu_dropout(x, p)


def test_torch_fallback_has_the_same_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_nn, "choose", lambda device: CoreBackend.TORCH)  # as where no core serves
    torch.manual_seed(0)
    x = torch.randn(500, 200, requires_grad=True)
    out = relu_dropout(x, 0.25)
    kept = out != 0
    assert not kept[x <= 0].any()
    assert abs(int(kept.sum()) / int((x > 0).sum()) - 0.75) < 0.01
    out.sum().backward()
    torch.testing.assert_close(x.grad, kept / 0.75)


def test_elu_dropout_is_elu_scaled_where_kept_with_relu_dropouts_mask() -> None:
    """The native ELU (a vectorised expm1, not libm's) against torch's elu, over the whole float range a
    hidden layer can hold: tiny values keep expm1's relative accuracy, the far tail is -1, NaN stays NaN."""
    torch.manual_seed(2)
    special = torch.tensor(
        [0.0, -0.0, -1e-30, -1e-7, -1e-3, -0.3465, -0.3467, -1.0, -10.0, -86.9, -87.5, -1e30]
    )
    x = torch.cat([torch.randn(1000, 257).flatten() * 4, special, -special, torch.tensor([float("-inf")])])
    torch.manual_seed(9)
    out = elu_dropout(x, 0.4)
    torch.manual_seed(9)
    kept_positive = relu_dropout(x, 0.4) != 0
    kept = (out != 0) | ((x == 0) & kept_positive)  # elu(0) = 0: where x is 0 the draw is relu_dropout's
    assert torch.equal(kept[x > 0], kept_positive[x > 0])  # one draw for both kernels, as documented
    expected = torch.nn.functional.elu(x.double()) / 0.6
    torch.testing.assert_close(out[kept].double(), expected[kept], rtol=3e-7, atol=0.0)
    assert abs(int(kept.sum()) / x.numel() - 0.6) < 0.02
    with_nan = elu_dropout(torch.tensor([float("nan")] * 64), 0.1)
    assert int(with_nan.isnan().sum()) + int((with_nan == 0).sum()) == 64 and with_nan.isnan().any()


def test_elu_dropout_backward_is_elus_derivative_times_the_mask() -> None:
    torch.manual_seed(3)
    x = (torch.randn(300, 70) * 3).requires_grad_()
    out = elu_dropout(x, 0.3)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    kept = (out != 0).double()
    xd = x.detach().double()
    derivative = torch.where(xd > 0, torch.ones_like(xd), torch.exp(xd))
    expected = upstream.double() * kept * derivative / 0.7
    torch.testing.assert_close(x.grad.double(), expected, rtol=3e-7, atol=1e-12)


def test_elu_dropout_eval_is_elu_and_thread_count_does_not_change_it() -> None:
    x = torch.randn(513, 129) * 5
    assert torch.equal(elu_dropout(x, 0.5, training=False), torch.nn.functional.elu(x))
    outs = _per_thread_count(lambda: elu_dropout(x, 0.5), seed=4)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


# rows shorter and longer than a chunk; 1,003: a thread's share of the rows ends short of a four-row pass
@pytest.mark.parametrize("shape", [(1003, 257), (3, 1), (2, 3000)])
def test_bias_relu_dropout_is_relu_dropout_of_x_plus_bias_in_place(shape: tuple[int, int]) -> None:
    """The same bits and the same mask as relu_dropout(x + bias) for the same generator state, written
    over x; backward's input gradient is relu_dropout's, and the bias's the column sums of it."""
    torch.manual_seed(7)
    x, upstream = torch.randn(shape), torch.randn(shape)
    bias = torch.randn(shape[1], requires_grad=True)
    a = x.clone().requires_grad_()
    torch.manual_seed(8)
    want = relu_dropout(a + bias, 0.4)
    want.backward(upstream)
    want_bias_grad, bias.grad = bias.grad, None
    b = x.clone().requires_grad_()
    fresh = b * 1.0  # a GEMM's output stands here: a fresh non-leaf
    torch.manual_seed(8)
    got = bias_relu_dropout(fresh, bias, 0.4)
    assert got.data_ptr() == fresh.data_ptr()  # in place
    assert torch.equal(got, want)
    got.backward(upstream)
    assert torch.equal(b.grad, a.grad)
    exact = (a.grad.double()).sum(0).float()
    torch.testing.assert_close(bias.grad, exact, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(want_bias_grad, exact, rtol=1e-5, atol=1e-5)


def test_bias_relu_dropout_values_do_not_depend_on_threads() -> None:
    x, bias, upstream = torch.randn(513, 129), torch.randn(129), torch.randn(513, 129)

    def draw() -> torch.Tensor:
        b = bias.clone().requires_grad_()
        out = bias_relu_dropout(x.clone(), b, 0.5)
        out.backward(upstream)
        return torch.cat([out.flatten(), b.grad])

    outs = _per_thread_count(draw, seed=3)
    for o in outs[1:]:
        assert torch.equal(o[: x.numel()], outs[0][: x.numel()])
        torch.testing.assert_close(o[x.numel() :], outs[0][x.numel() :], rtol=1e-6, atol=1e-6)


def test_bias_relu_dropout_elsewhere_leaves_x_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluation, p 0, other dtypes and the torch fallback: relu_dropout(x + bias), x unchanged."""
    x, bias = torch.randn(40, 6), torch.randn(6)
    before = x.clone()
    assert torch.equal(bias_relu_dropout(x, bias, 0.5, training=False), torch.relu(before + bias))
    assert torch.equal(bias_relu_dropout(x, bias, 0.0), torch.relu(before + bias))
    assert bias_relu_dropout(x.double(), bias.double(), 0.5).dtype == torch.float64
    monkeypatch.setattr(native_nn, "choose", lambda device: CoreBackend.TORCH)
    out = bias_relu_dropout(x, bias, 0.5)
    kept = out != 0
    torch.testing.assert_close(out[kept], (before + bias)[kept] / 0.5)
    assert torch.equal(x, before)
    for p in (-0.1, 1.0):
        with pytest.raises(ValueError, match="dropout probability"):
            bias_relu_dropout(x, bias, p)
