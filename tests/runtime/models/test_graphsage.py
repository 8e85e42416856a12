"""GraphSAGE's layer against a plain reference (index_add mean, separate products), values and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.graph.loader import Block, mean_matrices
from graphtrain.runtime.models.graphsage import GraphSAGE, SAGEConv, transform_first


def random_block(num_dst: int, num_src: int, seed: int) -> Block:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, num_dst)  # some destinations without neighbours
    src = rng.integers(0, num_src, int(counts.sum())).astype(np.int64)
    dst = np.repeat(np.arange(num_dst, dtype=np.int64), counts)
    mean, mean_t, _ = mean_matrices(counts, src, num_src)
    return Block(num_src, num_dst, torch.from_numpy(src), torch.from_numpy(dst), mean, mean_t)


def reference(layer: SAGEConv, block: Block, h: torch.Tensor, frozen: torch.Tensor | None) -> torch.Tensor:
    x = h if frozen is None else torch.cat([frozen, h], 1)
    w_self, w_neigh = layer.w_self, layer.w_neigh
    if frozen is not None:
        w_self = torch.cat([layer.w_self_frozen, w_self], 1)
        w_neigh = torch.cat([layer.w_neigh_frozen, w_neigh], 1)
    agg = torch.zeros(block.num_dst, x.shape[1]).index_add_(0, block.dst, x[block.src])
    deg = torch.bincount(block.dst, minlength=block.num_dst).clamp(min=1).unsqueeze(1)
    return x[: block.num_dst] @ w_self.T + (agg / deg) @ w_neigh.T + layer.bias


@pytest.mark.parametrize(
    ("in_dim", "out_dim", "frozen"),
    # the mean first / transforming first (narrow outputs over few edges, BothMaps), split inputs
    [(16, 8, 0), (8, 16, 0), (24, 8, 16), (12, 32, 4), (64, 4, 0), (48, 4, 16)],
)
def test_layer_matches_reference_values_and_gradients(in_dim: int, out_dim: int, frozen: int) -> None:
    torch.manual_seed(0)
    block = random_block(30, 70, seed=1)
    layer = SAGEConv(in_dim, out_dim, frozen)
    with torch.no_grad():
        layer.bias.uniform_(-1, 1)  # a zero bias would hide a dropped bias term
    h = torch.randn(70, in_dim - frozen, requires_grad=True)
    x = torch.randn(70, frozen) if frozen else None
    upstream = torch.randn(30, out_dim)

    got = layer(block, h, x)
    (got * upstream).sum().backward()
    grads = [p.grad.clone() for p in layer.parameters()] + [h.grad.clone()]
    layer.zero_grad()
    h.grad = None
    want = reference(layer, block, h, x)
    (want * upstream).sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, [p.grad for p in layer.parameters()] + [h.grad], strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_a_learnable_input_meaned_first_takes_one_node_with_one_gradient() -> None:
    """The mean-first order over an input that learns beside data (WordNet's embedding rows) runs as
    MeanMaps, whose backward writes h's gradient once (the test above checks its values)."""
    block = random_block(30, 70, seed=1)
    layer = SAGEConv(24, 8, frozen=16)  # 70 x 8 > 30 x 8: the mean first
    h, x = torch.randn(70, 8, requires_grad=True), torch.randn(70, 16)
    out = layer._part(block, h, layer.w_self, layer.w_neigh, layer.bias)
    assert type(out.grad_fn).__name__ == "MeanMapsBackward"
    assert layer(block, h.detach(), x).requires_grad  # data alone: the weights still learn


def test_the_order_follows_the_work_of_both_not_the_widths_alone() -> None:
    # WordNet's output layer: 2.3x the GEMMs transforming 3,745 sources first saves a mean 211 columns
    # narrower over 4,700 edges; the mean first (1.5 against 2.2 ms forward and backward, measured)
    assert not transform_first(3745, 1024, 4700, 256, 45)
    assert transform_first(4000, 4000, 40000, 256, 45)  # a whole graph: DGL's rule, in > out
    assert transform_first(100, 30, 20000, 256, 8)  # dense edges onto few sources: transform first
    for d_in, d_out in ((128, 256), (256, 256)):  # never when the input is no wider
        assert not transform_first(16000, 4000, 17000, d_in, d_out)
    block = random_block(30, 70, seed=1)
    for d_in, d_out, name in ((64, 4, "BothMapsBackward"), (4, 8, "MeanMapsBackward")):
        layer = SAGEConv(d_in, d_out)
        out = layer(block, torch.randn(70, d_in, requires_grad=True))
        seen, nodes = set(), [out.grad_fn]
        while nodes:
            node = nodes.pop()
            if node is not None and type(node).__name__ not in seen:
                seen.add(type(node).__name__)
                nodes.extend(f for f, _ in node.next_functions)
        assert name in seen


def test_graphsage_is_deterministic_in_eval_and_seeded_in_training() -> None:
    blocks = [random_block(40, 90, seed=2), random_block(10, 40, seed=3)]
    x = torch.randn(90, 12)
    torch.manual_seed(0)
    model = GraphSAGE(12, 32, 5, dropout=0.5)
    model.eval()
    assert torch.equal(model(blocks, x), model(blocks, x))
    model.train()
    torch.manual_seed(7)
    a = model(blocks, x)
    torch.manual_seed(7)
    assert torch.equal(a, model(blocks, x))
    with pytest.raises(ValueError, match="dropout"):
        GraphSAGE(12, 32, 5, dropout=1.0)


@pytest.mark.parametrize(("in_dim", "out_dim", "frozen"), [(16, 8, 0), (8, 16, 0), (24, 8, 16)])
def test_layer_under_autocast_is_float32s_within_bfloat16s_precision(
    in_dim: int, out_dim: int, frozen: int
) -> None:
    """training.mixedPrecision: the products in bfloat16 (the output is not float32's bit for bit), the
    means in float32, and the parameters' gradients float32 and close to float32's."""
    torch.manual_seed(0)
    block = random_block(30, 70, seed=1)
    layer = SAGEConv(in_dim, out_dim, frozen)
    h = torch.randn(70, in_dim - frozen, requires_grad=True)
    x = torch.randn(70, frozen) if frozen else None
    upstream = torch.randn(30, out_dim)
    runs = []
    for cast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cast):
            out = layer(block, h, x)
        (out.float() * upstream).sum().backward()
        runs.append((out.float(), [p.grad.clone() for p in layer.parameters()] + [h.grad.clone()]))
        layer.zero_grad()
        h.grad = None
    (want, want_grads), (got, got_grads) = runs
    assert not torch.equal(got, want)
    torch.testing.assert_close(got, want, rtol=0.03, atol=0.03)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=0.05, atol=0.05)
