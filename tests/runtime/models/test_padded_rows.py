"""Padded rows under autocast on a CPU (layers.padded): every bfloat16 GEMM of a model's step, forward
and backward, sees row counts from a few sizes per power of two, so oneDNN reuses its primitives rather
than making one per sampled shape; the outputs and gradients are those of unpadded rows."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional
from torch.utils._python_dispatch import TorchDispatchMode

from graphtrain.contract.spec import GATModel, GraphSAGEModel, RGCNModel
from graphtrain.contract.spec.model import RGATModel
from graphtrain.runtime.models import GNNShape, gnn_entry, layers
from tests.runtime.models.test_layers import block

GEMMS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}
GEMMS |= {torch.ops.aten.baddbmm.default}


class GemmShapes(TorchDispatchMode):
    """Records the shapes of every bfloat16 GEMM's operands."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in GEMMS:
            low = [a for a in args if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16]
            self.shapes += [tuple(a.shape) for a in low]
        return func(*args, **(kwargs or {}))


def test_a_bucket_is_at_most_an_eighth_more_and_eight_per_power_of_two() -> None:
    for k in range(4, 20):
        sizes = {layers.row_bucket(n) for n in range(2**k, 2 ** (k + 1))} - {2 ** (k + 1)}
        assert len(sizes) == 8 and min(sizes) == 2**k, (k, sorted(sizes))
    for n in [1, 7, 16, 17, 1_000, 1_001, 1_024, 13_337, 250_001]:
        assert n <= layers.row_bucket(n) <= n * 1.125, n
    assert layers.row_bucket(1_024) == 1_024 and layers.row_bucket(1_001) == 1_024


def test_nothing_is_padded_outside_autocast_or_off_a_cpu() -> None:
    x = torch.randn(1_001, 4)
    assert layers.padded(x) is x
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = layers.padded(x)
        assert got.shape == (1_024, 4) and got.dtype == torch.bfloat16
        assert torch.equal(got[1_001:], torch.zeros(23, 4, dtype=torch.bfloat16))
        assert layers.padded(torch.randn(3, 1_001, 4), dim=1).shape == (3, 1_024, 4)
    assert layers.fitted(x, 1_001) is x


VARIANTS = {
    "graphsage": (GraphSAGEModel(hidden_dim=16), 1),
    "sage-typed": (GraphSAGEModel(hidden_dim=16), 3),
    "gat": (GATModel(hidden_dim=16, heads=2), 1),
    "rgcn": (RGCNModel(hidden_dim=16, num_bases=2), 3),
    "rgat": (RGATModel(hidden_dim=16, heads=2, edge_features=True), 3),
}


def step(kind: str, padding: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, list, list]:
    """One autocast forward and backward on blocks of 1,001 and 301 destinations (no bucket sizes):
    the output, the gradients, the bfloat16 GEMMs' shapes."""
    if not padding:
        monkeypatch.setattr(layers, "row_bucket", lambda n: n)
    variant, rels = VARIANTS[kind]
    torch.manual_seed(0)
    b0 = block(num_dst=1_001, num_src=2_003, edges=6_007, rels=rels, seed=1)
    b1 = block(num_dst=301, num_src=1_001, edges=2_011, rels=rels, seed=2)
    b0.efeat, b1.efeat = b0.efeat.abs(), b1.efeat.abs()
    model = gnn_entry(variant.KIND).build(variant, GNNShape(16, 4, num_relations=rels, edge_dim=2))
    x = torch.randn(2_003, 16)
    y = torch.randint(0, 4, (301,))
    seen = GemmShapes()
    with seen:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model([b0, b1], x)
        loss = functional.cross_entropy(out.float(), y)
        grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    return out.float(), list(grads), seen.shapes


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_every_bfloat16_gemm_of_a_step_sees_bucketed_rows_and_the_same_math(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, grads, shapes = step(kind, True, monkeypatch)
    assert shapes, "no bfloat16 GEMM seen"
    odd = sorted({d for s in shapes for d in s if layers.row_bucket(d) != d})
    assert odd == [], (kind, odd)
    with monkeypatch.context() as m:
        want, want_grads, raw = step(kind, False, m)
    assert any(1_001 in s for s in raw)  # what the padding removed
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
    for g, w in zip(grads, want_grads, strict=True):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w, rtol=5e-2, atol=5e-3)
