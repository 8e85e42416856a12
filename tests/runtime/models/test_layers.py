"""The GNN layers against their definitions written edge by edge: the relational mean and per-relation
weights, edge softmax and the attention sum with their gradients, GAT, RGAT and R-GCN forward and
backward on a small block."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional

from graphtrain.contract.spec import GATModel, GraphSAGEModel, RGCNModel
from graphtrain.contract.spec.model import MIXED_PRECISION_KINDS, RGATModel
from graphtrain.runtime.graph.loader import Block, mean_matrices
from graphtrain.runtime.models import GNNShape, gnn_entry, layers
from graphtrain.runtime.models.layers import attention_sum, edge_softmax, relation_pairs
from graphtrain.runtime.models.relational import RelGraphConv


def block(num_dst: int = 6, num_src: int = 15, edges: int = 40, rels: int = 3, seed: int = 0) -> Block:
    """A block as sampling makes one: edges grouped by destination, each with a type."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.sort(torch.randint(0, num_dst, (edges,), generator=g)).values
    src = torch.randint(0, num_src, (edges,), generator=g)
    etype = torch.randint(0, rels, (edges,), generator=g)
    counts = np.bincount(dst.numpy(), minlength=num_dst)
    mean, mean_t, order = mean_matrices(counts, src.numpy(), num_src)
    efeat = torch.randn(edges, 2, generator=g)
    return Block(num_src, num_dst, src, dst, mean, mean_t, etype, None, efeat, order)


def test_relation_pairs_mean_each_destinations_sources_by_relation() -> None:
    b = block()
    h = torch.randn(b.num_src, 4)
    pairs = relation_pairs(b, 3)
    got = torch.sparse.mm(pairs.mean, h)
    for k in range(pairs.num_pairs):
        sel = (b.dst == pairs.dst[k]) & (b.etype == pairs.rel[k])
        torch.testing.assert_close(got[k], h[b.src[sel]].mean(0))
    assert pairs.offsets == torch.searchsorted(pairs.rel, torch.arange(4)).tolist()
    w = torch.rand(len(b.src))
    weighted = torch.sparse.mm(relation_pairs(b, 3, w).mean, h)
    sel = (b.dst == pairs.dst[0]) & (b.etype == pairs.rel[0])
    torch.testing.assert_close(weighted[0], (w[sel, None] * h[b.src[sel]]).sum(0) / w[sel].sum())


def test_relation_products_stay_float32_under_autocast_on_a_cpu() -> None:
    """Small bfloat16 GEMMs are slower than float32's on a CPU (layers.per_relation): under autocast the
    per-relation products, and their gradients, are float32's exactly."""
    b = block(num_dst=20, num_src=50, edges=160, rels=4)
    pairs = relation_pairs(b, 4)
    m = torch.randn(pairs.num_pairs, 8)
    w = torch.randn(4, 8, 5, requires_grad=True)
    want = layers.per_relation(pairs, m, w)
    (grad,) = torch.autograd.grad(want.square().sum(), w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = layers.per_relation(pairs, m, w)
        low = layers.per_relation(pairs, m, w.to(torch.bfloat16))  # weights autocast made
    (got_grad,) = torch.autograd.grad(got.square().sum(), w)  # the loss outside, as the encoder's
    assert got.dtype == torch.float32 and torch.equal(got, want) and torch.equal(got_grad, grad)
    assert low.dtype == torch.float32


@pytest.mark.parametrize("rels", [1, 3, 70_000])
def test_relation_pairs_are_the_same_from_a_loaders_block_and_from_any_edge_order(rels: int) -> None:
    """The loader's block (edges by destination, its source order made) takes the narrow sorts; the
    same edges shuffled, without the source order, take the general ones: the same pairs, in the same
    order, with the same sparse matrices (and the transpose's edges in the same stable order)."""
    b = block(num_dst=50, num_src=300, edges=2_000, rels=min(rels, 40), seed=rels)
    if rels > 40:  # a relation id past 16 bits: the wide sort
        b.etype = b.etype * 1_700
    shuffled = torch.randperm(len(b.src), generator=torch.Generator().manual_seed(1))
    raw = Block(b.num_src, b.num_dst, b.src[shuffled], b.dst[shuffled], etype=b.etype[shuffled])
    fast, slow = relation_pairs(b, rels), relation_pairs(raw, rels)
    assert torch.equal(fast.dst, slow.dst) and torch.equal(fast.rel, slow.rel)
    assert fast.offsets == slow.offsets
    assert torch.equal(fast.edge_pair[shuffled], slow.edge_pair)
    for a, c in ((fast.mean, slow.mean), (fast.mean_t, slow.mean_t)):
        assert torch.equal(a.crow_indices(), c.crow_indices())
        torch.testing.assert_close(a.to_dense(), c.to_dense(), rtol=0, atol=0)
    order = torch.argsort(b.src, stable=True)
    assert torch.equal(fast.mean_t.col_indices(), fast.edge_pair[order])


def test_rel_graph_conv_is_its_definition_with_bases_and_frozen_columns() -> None:
    torch.manual_seed(0)
    b = block()
    conv = RelGraphConv(5, 3, num_rels=3, num_bases=2, frozen=2)
    x = torch.randn(b.num_src, 3, requires_grad=True)
    frozen = torch.randn(b.num_src, 2)
    out = conv(b, x, frozen)
    whole = torch.cat([frozen, x], 1)
    w = torch.einsum("rb,bio->rio", conv.coeff, conv.weight)
    want = whole[: b.num_dst] @ conv.loop + conv.bias
    rows = []
    for v in range(b.num_dst):
        acc = want[v]
        for r in range(3):
            sel = (b.dst == v) & (b.etype == r)
            if sel.any():
                acc = acc + whole[b.src[sel]].mean(0) @ w[r]
        rows.append(acc)
    torch.testing.assert_close(out, torch.stack(rows), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert x.grad is not None and conv.coeff.grad is not None and conv.weight.grad is not None


def _softmax_by_hand(e: torch.Tensor, dst: torch.Tensor, num_dst: int) -> torch.Tensor:
    out = torch.empty_like(e)
    for v in range(num_dst):
        sel = dst == v
        if sel.any():
            out[sel] = torch.softmax(e[sel], 0)
    return out


def test_edge_softmax_and_attention_sum_match_their_definitions_and_gradients() -> None:
    b = block(edges=60)
    e = torch.randn(60, 2, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(edge_softmax(e, b.dst, b.num_dst), _softmax_by_hand(e, b.dst, b.num_dst))
    assert torch.autograd.gradcheck(lambda t: edge_softmax(t, b.dst, b.num_dst), (e,))
    alpha = torch.rand(60, 2, dtype=torch.float64, requires_grad=True)
    z = torch.randn(b.num_src, 2, 3, dtype=torch.float64, requires_grad=True)
    want = torch.zeros(b.num_dst, 2, 3, dtype=torch.float64).index_add(0, b.dst, alpha[..., None] * z[b.src])
    torch.testing.assert_close(attention_sum(alpha, z, b), want)
    assert torch.autograd.gradcheck(lambda a, zz: attention_sum(a, zz, b), (alpha, z))


def test_the_cores_softmax_and_sums_over_a_blocks_rows_are_torchs() -> None:
    """float32 on the host: the CPU core's edge softmax (with the block's row pointer) and attention sums
    (with the transpose the loader sorted) against the torch paths, values and gradients; destinations
    without in-edges included."""
    b = block(num_dst=30, num_src=50, edges=90)
    assert (b.counts == 0).any()
    crow, transpose = layers.block_csr(b)
    assert transpose is not None and torch.equal(transpose.order, torch.argsort(b.src, stable=True))
    bare = Block(b.num_src, b.num_dst, b.src, b.dst)  # no matrices: row pointer counted, backward sorts
    e = torch.randn(90, 3, requires_grad=True)
    upstream = torch.randn(90, 3)
    got = edge_softmax(e, b.dst, b.num_dst, crow)
    (grad_got,) = torch.autograd.grad(got, e, upstream)
    want = edge_softmax(e, b.dst, b.num_dst)
    (grad_want,) = torch.autograd.grad(want, e, upstream)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad_got, grad_want)
    alpha = got.detach().requires_grad_()
    z = torch.randn(b.num_src, 1, 8, requires_grad=True)
    grads = []
    for blk in (b, bare):
        out = attention_sum(alpha, z, blk, head_major=True)
        grads.append((out, *torch.autograd.grad(out, (alpha, z), torch.ones_like(out))))
    for x, y in zip(*grads, strict=True):
        torch.testing.assert_close(x, y)


def test_the_cores_csr_product_is_torchs_forward_and_backward() -> None:
    """A block's mean (destinations without in-edges included) by the CPU core against torch's sparse
    product, and SparseProduct's gradient (the core over the transpose) against the dense matrix's; other
    inputs are left to torch (None)."""
    b = block(num_dst=30, num_src=50, edges=90)
    assert b.mean is not None and b.mean_t is not None and (b.counts == 0).any()
    h = torch.randn(b.num_src, 8, requires_grad=True)
    got = layers.native_csr_product(b.mean, h.detach())
    assert got is not None
    torch.testing.assert_close(got, torch.sparse.mm(b.mean, h.detach()))
    out = layers.SparseProduct.apply(h, b.mean, b.mean_t)
    (grad,) = torch.autograd.grad(out, h, torch.ones_like(out))
    dense = b.mean.to_dense().requires_grad_(False)
    torch.testing.assert_close(out, dense @ h.detach())
    torch.testing.assert_close(grad, dense.t() @ torch.ones_like(out))
    assert layers.native_csr_product(b.mean, h.detach()[:-1]) is None  # torch reports the mismatch
    assert layers.native_csr_product(b.mean.to_sparse_coo(), h.detach()) is None
    assert layers.native_csr_product(b.mean, h.detach().double()) is None


@pytest.mark.parametrize("head_major", [False, True])
@pytest.mark.parametrize("z_heads", [1, 3])
def test_attention_sum_with_frozen_columns_is_the_sum_of_the_joined_input(
    head_major: bool, z_heads: int
) -> None:
    """`frozen` summed into the output's first columns (one pass over the edges in the CPU core) equals
    the sum over [frozen, z] joined, values and the gradients of alpha and z: the core's float32 path
    against the torch path's float64, and the torch path by gradcheck."""
    b = block(num_dst=30, num_src=50, edges=90, seed=3)
    assert (b.counts == 0).any()  # destinations without in-edges: rows of zeros in both parts
    alpha = torch.rand(90, 3, dtype=torch.float64, requires_grad=True)
    z = torch.randn(b.num_src, z_heads, 5, dtype=torch.float64, requires_grad=True)
    frozen = torch.randn(b.num_src, z_heads, 4, dtype=torch.float64)
    upstream = torch.randn((3, b.num_dst, 9) if head_major else (b.num_dst, 3, 9), dtype=torch.float64)
    joined = attention_sum(alpha, torch.cat([frozen, z], dim=2), b, head_major)
    want = (joined, *torch.autograd.grad(joined, (alpha, z), upstream))
    got64 = attention_sum(alpha, z, b, head_major, frozen=frozen)
    for x, y in zip((got64, *torch.autograd.grad(got64, (alpha, z), upstream)), want, strict=True):
        torch.testing.assert_close(x, y)
    a32, z32 = alpha.detach().float().requires_grad_(), z.detach().float().requires_grad_()
    got32 = attention_sum(a32, z32, b, head_major, frozen=frozen.float())  # the CPU core's kernels
    for x, y in zip((got32, *torch.autograd.grad(got32, (a32, z32), upstream.float())), want, strict=True):
        torch.testing.assert_close(x, y.float(), rtol=1e-4, atol=1e-5)
    assert torch.autograd.gradcheck(
        lambda a, zz: attention_sum(a, zz, b, head_major, frozen=frozen), (alpha, z)
    )
    with pytest.raises(ValueError, match="frozen columns take no gradient"):
        attention_sum(alpha, z, b, head_major, frozen=frozen.clone().requires_grad_())
    with pytest.raises(ValueError, match="differ in rows or heads"):
        attention_sum(alpha, z, b, head_major, frozen=frozen[:, :1] if z_heads > 1 else frozen[1:])
    none = Block(b.num_src, 4, b.src[:0], b.dst[:0])  # a block without edges: zeros, zero gradients
    out = attention_sum(a32[:0], z32, none, head_major, frozen=frozen.float())
    assert out.shape == ((3, 4, 9) if head_major else (4, 3, 9)) and not out.any()
    out.sum().backward()


def test_gat_layer_is_its_definition() -> None:
    torch.manual_seed(1)
    b = block()
    model = gnn_entry("gat").build(
        GATModel(heads=2, hidden_dim=4, num_layers=1, edge_features=True), GNNShape(5, 3, edge_dim=2)
    )
    conv = model.layers[0]
    h = torch.randn(b.num_src, 5)
    out = conv(b, h)
    z = conv.fc(h).view(-1, 2, 3)
    ef = conv.edge_fc(b.efeat).view(-1, 2, 3)
    score = (
        (z * conv.attn_l).sum(-1)[b.src]
        + (z[: b.num_dst] * conv.attn_r).sum(-1)[b.dst]
        + (ef * conv.attn_e).sum(-1)
    )
    alpha = _softmax_by_hand(functional.leaky_relu(score, 0.2), b.dst, b.num_dst)
    want = torch.zeros(b.num_dst, 2, 3).index_add(0, b.dst, alpha[..., None] * (z[b.src] + ef))
    want = want + conv.res(h[: b.num_dst]).view(-1, 2, 3) + conv.bias.view(1, 2, 3)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_gat_layer_with_frozen_columns_is_its_definition_forward_and_backward() -> None:
    """The reordered layer (scores from the inputs by thin products, the weighted sum before the
    transform, the sums inside the GEMMs) against DGL's order on [frozen, h]: outputs and the gradients
    of every parameter and of h; the frozen columns get none."""
    torch.manual_seed(2)
    b = block(num_dst=9, num_src=20, edges=50)
    model = gnn_entry("gat").build(GATModel(heads=2, hidden_dim=6, num_layers=1), GNNShape(7, 3, frozen=4))
    conv = model.layers[0]
    frozen, h = torch.randn(b.num_src, 4), torch.randn(b.num_src, 3, requires_grad=True)
    upstream = torch.randn(b.num_dst, 2, 3)
    params = [h, conv.fc.weight, conv.attn_l, conv.attn_r, conv.res.weight, conv.bias]
    got = conv(b, h, frozen)
    grads_got = torch.autograd.grad(got, params, upstream)
    x = torch.cat([frozen, h], dim=1)
    z = conv.fc(x).view(-1, 2, 3)
    score = (z * conv.attn_l).sum(-1)[b.src] + (z[: b.num_dst] * conv.attn_r).sum(-1)[b.dst]
    alpha = _softmax_by_hand(functional.leaky_relu(score, 0.2), b.dst, b.num_dst)
    want = torch.zeros(b.num_dst, 2, 3).index_add(0, b.dst, alpha[..., None] * z[b.src])
    want = want + conv.res(x[: b.num_dst]).view(-1, 2, 3) + conv.bias.view(1, 2, 3)
    grads_want = torch.autograd.grad(want, params, upstream)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads_got, grads_want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


VARIANTS = {
    "sage-typed": GraphSAGEModel(hidden_dim=8),
    "sage-weighted": GraphSAGEModel(hidden_dim=8, edge_weight=True),
    "gat": GATModel(hidden_dim=8, heads=2),
    "rgcn": RGCNModel(hidden_dim=8, num_bases=2),
    "rgat": RGATModel(hidden_dim=8, heads=2, edge_features=True),
}
# each model in float32, and under autocast those training.mixedPrecision takes
LEARNING = [(v, False) for v in VARIANTS.values()] + [
    (v, True) for v in VARIANTS.values() if v.KIND in MIXED_PRECISION_KINDS
]


@pytest.mark.parametrize(
    ("variant", "bfloat16"),
    LEARNING,
    ids=list(VARIANTS) + [f"{k}-autocast" for k, v in VARIANTS.items() if v.KIND in MIXED_PRECISION_KINDS],
)
def test_every_gnn_learns_a_small_typed_task_and_gives_its_hidden_layer(
    variant: object, bfloat16: bool
) -> None:
    """Two layers on fixed blocks: the loss falls, every parameter gets a gradient, hidden() has the
    hidden width; under autocast too (training.mixedPrecision)."""
    torch.manual_seed(0)
    b0, b1 = block(num_dst=15, num_src=30, edges=80, seed=1), block(num_dst=6, num_src=15, edges=40, seed=2)
    b0.efeat = b0.efeat.abs()
    b1.efeat = b1.efeat.abs()
    entry = gnn_entry(variant.KIND)  # type: ignore[attr-defined]
    model = entry.build(variant, GNNShape(5, 3, num_relations=3, edge_dim=2))  # type: ignore[arg-type]
    x = torch.randn(30, 5)
    y = torch.randint(0, 3, (6,))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            out = model([b0, b1], x)
        loss = functional.cross_entropy(out.float(), y)
        opt.zero_grad()
        loss.backward()
        losses.append(float(loss))
        opt.step()
    assert losses[-1] < 0.5 * losses[0], losses[::5]
    assert all(p.grad is not None for p in model.parameters())
    assert model.hidden([b0], x).shape == (15, 8)
