"""Fused ReLU + dropout (native) against its definition, and the torch fallback's statistics."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.native import nn as native_nn
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.native.nn import relu_dropout

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


def test_seeded_by_torch_and_independent_of_threads() -> None:
    x = torch.randn(513, 129)
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            torch.manual_seed(5)
            outs.append(relu_dropout(x, 0.5))
    finally:
        torch.set_num_threads(before)
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
