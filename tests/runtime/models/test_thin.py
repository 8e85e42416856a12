"""Thin products (GAT's attention scores): the CPU core's float32 kernels (cuda/src/thin_cpu.cpp) and the
torch path against a float64 reference, one part and two (frozen data beside a learnable input), with
their gradients; the core's sums the same for any thread count."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.models.layers import native_cpu
from graphtrain.runtime.models.thin import thin_product


def test_the_cpu_core_is_what_float32_host_tensors_take() -> None:
    assert native_cpu(torch.zeros(1))  # else the tests below would compare torch with itself


def test_thin_product_and_its_gradients_by_gradcheck() -> None:
    """The torch path (float64), w_t a column slice of a wider weight, one part and two."""
    x = torch.randn(37, 5, dtype=torch.float64, requires_grad=True)
    frozen = torch.randn(37, 3, dtype=torch.float64)
    w = torch.randn(4, 11, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(thin_product(x, w[:, 2:7]), x @ w[:, 2:7].t())
    assert torch.autograd.gradcheck(lambda a, b: thin_product(a, b[:, 2:7]), (x, w))
    both = thin_product(x, w[:, 2:10], frozen)
    torch.testing.assert_close(both, torch.cat([frozen, x], 1) @ w[:, 2:10].t())
    assert torch.autograd.gradcheck(lambda a, b: thin_product(a, b[:, 2:10], frozen), (x, w))


# rows: not a multiple of the core's blocks (4 rows, 256-row partials); 1 and 0 rows; k odd and even
@pytest.mark.parametrize("rows", [0, 1, 3, 517])
@pytest.mark.parametrize(("c1", "c2", "k"), [(13, 0, 8), (13, 7, 8), (16, 9, 3), (5, 11, 1)])
def test_the_cores_kernels_against_float64(rows: int, c1: int, c2: int, k: int) -> None:
    """[frozen, x] @ w_t^T and the gradients of x and w_t (frozen takes none), float32 through the core
    against float64 by torch."""
    g = torch.Generator().manual_seed(rows * 31 + c1 + c2 + k)
    x = torch.randn(rows, c1, generator=g, dtype=torch.float64)
    frozen = torch.randn(rows, c2, generator=g, dtype=torch.float64) if c2 else None
    w = torch.randn(k, c1 + c2, generator=g, dtype=torch.float64)
    upstream = torch.randn(rows, k, generator=g, dtype=torch.float64)
    joined = x if frozen is None else torch.cat([frozen, x], 1)
    w_x = w[:, c2:]  # x's columns follow frozen's
    want = (joined @ w.t(), upstream @ w_x, upstream.t() @ joined)
    x32, w32 = x.float().requires_grad_(), w.float().requires_grad_()
    out = thin_product(x32, w32, None if frozen is None else frozen.float())
    grad_x, grad_w = torch.autograd.grad(out, (x32, w32), upstream.float())
    for got, ref in zip((out, grad_x, grad_w), want, strict=True):
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-4)


def test_the_cores_sums_do_not_depend_on_the_thread_count() -> None:
    """w's gradient adds fixed chunks of rows in their order: bit for bit the same on 1 and 2 threads."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1100, 40, generator=g, requires_grad=True)
    frozen = torch.randn(1100, 24, generator=g)
    w = torch.randn(8, 64, generator=g, requires_grad=True)
    upstream = torch.randn(1100, 8, generator=g)
    before = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out = thin_product(x, w, frozen)
            got.append((out, *torch.autograd.grad(out, (x, w), upstream)))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*got, strict=True):
        assert torch.equal(a, b)


def test_mixed_dtypes_never_reach_the_core() -> None:
    """A float64 part beside float32 weights takes torch's path (which refuses it), never the core's
    float32 reads of float64 bytes."""
    with pytest.raises(RuntimeError, match="dtype"):
        thin_product(torch.zeros(4, 2, dtype=torch.float64), torch.zeros(2, 5), torch.zeros(4, 3))


def test_frozen_must_have_the_rows_of_x() -> None:
    with pytest.raises(ValueError, match="frozen has 3 rows and x 4"):
        thin_product(torch.zeros(4, 2), torch.zeros(2, 5), torch.zeros(3, 3))
