"""Padded blocks (models/padding.py): a GraphSAGE step on them computes the seeds' outputs and every
gradient of the unpadded step, and under bf16_products each of its float32 GEMMs has its varying
dimensions in the bucket sizes, so oneDNN reuses a few primitives."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.nn import functional
from torch.utils._python_dispatch import TorchDispatchMode

from graphtrain.runtime.models.graphsage import GraphSAGE
from graphtrain.runtime.models.padding import (
    bf16_products,
    implicit_bf16,
    padded_block,
    padded_blocks,
    row_bucket,
)
from tests.runtime.models.test_layers import block

GEMMS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.addmm_.default}


class Float32Gemms(TorchDispatchMode):
    """Records the shapes of every float32 GEMM's matrix operands."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in GEMMS:
            mats = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 2]
            self.shapes += [tuple(a.shape) for a in mats if a.dtype == torch.float32]
        return func(*args, **(kwargs or {}))


def blocks(seed: int = 0) -> list:
    """Two blocks of a sampled batch with no bucket sizes: 1,001 -> 301 -> 97 destinations."""
    return [
        block(num_dst=1_001, num_src=2_003, edges=6_007, rels=1, seed=seed),
        block(num_dst=97, num_src=1_001, edges=511, rels=1, seed=seed + 1),
    ]


def test_padded_blocks_chain_bucketed_destinations_with_empty_rows_and_columns() -> None:
    b0, b1 = blocks()
    p0, p1 = padded_blocks([b0, b1])
    assert (p0.num_dst, p0.num_src) == (row_bucket(1_001), 2_003) == (1_024, 2_003)
    assert (p1.num_dst, p1.num_src) == (row_bucket(97), 1_024) == (104, 1_024)
    for p, b in ((p0, b0), (p1, b1)):
        assert p.mean is not None and p.mean_t is not None and b.mean is not None and b.mean_t is not None
        assert p.mean.shape == (p.num_dst, p.num_src) and p.mean_t.shape == (p.num_src, p.num_dst)
        dense, want = p.mean.to_dense(), b.mean.to_dense()
        assert torch.equal(dense[: b.num_dst, : b.num_src], want) and not dense[b.num_dst :].any()
        assert not dense[:, b.num_src :].any()
        assert torch.equal(p.mean_t.to_dense(), dense.t())
        assert p.src is b.src and p.dst is b.dst
    # a destination row is a source row: never more destinations than sources
    small = block(num_dst=9, num_src=9, edges=20, rels=1)
    assert padded_blocks([small])[0] is small
    assert padded_blocks([block(num_dst=17, num_src=17, edges=30, rels=1)])[0].num_dst == 17
    with pytest.raises(ValueError, match="cannot pad"):
        padded_block(small, 9, 10)


def sage_step(padded: bool, products: bool, frozen: int) -> tuple[torch.Tensor, list, list]:
    """A GraphSAGE forward and backward (learnable input rows beside `frozen` data columns) on the
    blocks, padded or not, under bf16_products or not: the seeds' outputs, every gradient, the GEMMs'
    operand shapes."""
    torch.manual_seed(0)
    model = GraphSAGE(16 + frozen, 32, 5, num_layers=2, dropout=0.0, frozen=frozen)
    bs = blocks()
    x = torch.randn(2_003, 16, requires_grad=True)
    data = torch.randn(2_003, frozen) if frozen else None
    y = torch.randint(0, 5, (97,), generator=torch.Generator().manual_seed(1))
    seen = Float32Gemms()
    with seen, bf16_products() if products else contextlib.nullcontext():
        out = model(padded_blocks(bs) if padded else bs, x, data)[:97]
        loss = functional.cross_entropy(out, y)
        grads = torch.autograd.grad(loss, [x, *model.parameters()])
    return out, list(grads), seen.shapes


@pytest.mark.parametrize("frozen", [0, 24])
def test_padded_blocks_give_the_unpadded_outputs_and_gradients(frozen: int) -> None:
    out, grads, shapes = sage_step(True, False, frozen)
    want, want_grads, raw = sage_step(False, False, frozen)
    assert any(1_001 in s for s in raw) and not any(1_001 in s for s in shapes)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("frozen", [0, 24])
def test_bf16_products_on_padded_blocks_see_bucketed_gemms_and_the_same_math(frozen: int) -> None:
    out, grads, shapes = sage_step(True, True, frozen)
    assert shapes, "no float32 GEMM seen"
    odd = sorted({d for s in shapes for d in s if row_bucket(d) != d})
    assert odd == [], odd
    want, want_grads, _ = sage_step(False, False, frozen)
    # bfloat16 keeps 8 bits of each input, summed in float32: the gradients' errors here are 0.2-3 %
    # (autocast's on the same step 0.3-3.5 %: its outputs are rounded to bfloat16 too)
    assert relative_error(out, want) < 1e-2
    for g, w in zip(grads, want_grads, strict=True):
        assert relative_error(g, w) < 5e-2
    exact, _, _ = sage_step(True, False, frozen)
    assert relative_error(out, exact) > 1e-5 or not torch.ops.mkldnn._is_mkldnn_bf16_supported()


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want| (Frobenius)."""
    return float((got - want).norm() / want.norm())


def test_bf16_products_rounds_inside_and_puts_the_flag_back() -> None:
    a = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    b = torch.randn(256, 64, generator=torch.Generator().manual_seed(1))
    flags = torch.backends.mkldnn.matmul
    was = flags.fp32_precision
    with bf16_products():
        assert flags.fp32_precision == "bf16"
    assert flags.fp32_precision == was
    with pytest.raises(RuntimeError, match="inside"), bf16_products():
        raise RuntimeError("inside")
    assert flags.fp32_precision == was
    if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        with bf16_products():
            low = a @ b
        exact = a.double() @ b.double()
        assert not torch.equal(low, a @ b)  # the inputs were rounded to bfloat16
        torch.testing.assert_close(low.double(), exact, rtol=0, atol=0.5)


def test_implicit_bfloat16_only_on_amx_cpus_for_padding_models_with_bare_outputs() -> None:
    assert implicit_bf16(True, "cpu", True, True, True)
    for args in [
        (False, "cpu", True, True, True),  # float32 asked
        (True, "cuda", True, True, True),  # a GPU: autocast
        (True, "cpu", False, True, True),  # a model with unpadded GEMMs (GAT, R-GCN)
        (True, "cpu", True, False, True),  # a decoder's GEMMs after the encoder (link prediction)
        (True, "cpu", True, True, False),  # no AMX: not measured, autocast as before
    ]:
        assert not implicit_bf16(*args), args
