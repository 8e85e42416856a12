"""Pieces the GNNs share: sparse products with their transposes ready for backward, a block's
(destination, relation) pairs, edge softmax, attention-weighted aggregation, and the stack of layers
whose last hidden layer can be read alone.

Every op here runs where the block is (host or GPU) with torch ops, and each keeps the work per edge at
a few floats: a relational layer multiplies once per (destination, relation) pair, not once per edge
(the pairs' mean first, then one GEMM per relation), and attention never holds an (edges x heads x
width) tensor: its aggregation is a sparse product per head, its backward a sampled product.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from graphtrain.runtime.graph.loader import Block, csr_tensor
from graphtrain.runtime.models.padding import row_bucket


class LayerStack(nn.Module, abc.ABC):
    """A GNN as a stack of layers over one block each. `forward` runs them all; `hidden` the last
    hidden layer's output over one block fewer, in evaluation mode (what evaluation with every neighbour
    computes layer by layer). A subclass gives `_run(blocks, x, frozen, last)`."""

    @abc.abstractmethod
    def _run(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None, last: bool
    ) -> torch.Tensor:
        """The layers over `blocks`: all of them (`last`), or all but the output layer."""

    def forward(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._run(blocks, x, frozen, last=True)

    def hidden(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The last hidden layer's output (what the output layer reads), over one block fewer."""
        was = self.training
        self.eval()
        try:
            return self._run(blocks, x, frozen, last=False)
        finally:
            self.train(was)


def autocasting(t: torch.Tensor) -> bool:
    """Whether torch.autocast is on for t's device (training.mixedPrecision): layers then take their
    out-of-place forms, which autocast reaches (it leaves in-place products such as addmm_ alone)."""
    return torch.is_autocast_enabled(t.device.type)


def padded(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """x in autocast's dtype with zero rows appended along `dim` up to row_bucket(its size), on a CPU
    under autocast; x itself otherwise. A GEMM's caller slices its output back (fitted). oneDNN makes
    (JIT-compiles) a bfloat16 GEMM primitive for each new shape and caches up to 1,024 of them; a
    sampled block's rows change every step, so each step paid for making its primitives and a WordNet
    trainer grew from 1.0 to 2.0 GB in 12 epochs. With eight shapes per power of two, the few made
    are reused (bench/RESULTS.md, 12-01). A GPU's and float32's GEMMs keep no such cache."""
    if x.device.type != "cpu" or not autocasting(x):
        return x
    n = x.shape[dim]
    low = x.to(torch.get_autocast_dtype("cpu"))
    return nn.functional.pad(low, [0, 0] * (x.dim() - 1 - dim) + [0, row_bucket(n) - n])


def fitted(y: torch.Tensor, n: int, dim: int = 0) -> torch.Tensor:
    """y's first n along `dim`: a product of padded() rows cut back to the rows asked for."""
    return y if y.shape[dim] == n else y.narrow(dim, 0, n)


def spmm(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """a @ h for a sparse a. Under autocast, in float32 and outside it: torch's CPU sparse kernels have
    no bfloat16, and a mean over a few dozen neighbours keeps float32's precision. A float32 CSR a on the
    host goes to the CPU core (native_csr_product)."""
    if not autocasting(h):
        out = native_csr_product(a, h)
        return torch.sparse.mm(a, h) if out is None else out
    with torch.autocast(h.device.type, enabled=False):
        return torch.sparse.mm(a, h.float())


def native_csr_product(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor | None:
    """a @ h by the CPU core's weighted row sum (gt_attention_sum with one head): each output row written
    once, in its edges' order. torch's CPU product of a CSR matrix zero-fills the output, has MKL write
    a second one and copies it over, and converts the int64 indices to int32 on every call: 0.63 against
    0.48 ms for a WordNet input block's mean (3,745 x 13,659, 17,000 edges, 256 wide; 2 threads), and
    half the time of the small products. None where it does not apply (a GPU, another layout or dtype,
    no native core): the caller takes torch's product."""
    if a.layout != torch.sparse_csr or h.dim() != 2 or a.shape[1] != h.shape[0] or not native_cpu(h):
        return None  # a shape mismatch is torch's to report
    crow, col, values = a.crow_indices(), a.col_indices(), a.values()
    if crow.dtype != torch.int64 or col.dtype != torch.int64 or values.dtype != torch.float32:
        return None
    from graphtrain.runtime.native import core

    h, crow, col, values = h.contiguous(), crow.contiguous(), col.contiguous(), values.contiguous()
    out = h.new_empty((a.shape[0], h.shape[1]))
    core().gt_attention_sum(
        a.shape[0],
        _ptr(crow),
        _ptr(col),
        _ptr(values),
        _ptr(h),
        0,
        _ptr(out),
        1,
        1,
        h.shape[1],
        0,
        0,
        torch.get_num_threads(),
    )
    return out


class SparseProduct(torch.autograd.Function):
    """A @ h with a precomputed A^T for the gradient (torch would transpose A every call): a block's
    mean over in-neighbours, a feature bag's combination of its words' rows (train/inputs.py)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, h: torch.Tensor, a: torch.Tensor, a_t: torch.Tensor
    ) -> torch.Tensor:
        ctx.a_t = a_t
        return spmm(a, h)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        out = native_csr_product(ctx.a_t, grad)
        return torch.sparse.mm(ctx.a_t, grad) if out is None else out, None, None


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    return csr_tensor(crow, col, values, shape)


def _crow(rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The CSR row pointer of `rows` (sorted) over `num_rows` rows."""
    crow = torch.zeros(num_rows + 1, dtype=torch.int64, device=rows.device)
    crow[1:] = torch.cumsum(torch.bincount(rows, minlength=num_rows), 0)
    return crow


class Transpose(NamedTuple):
    """A block's edges grouped by source: the row pointer over sources, each edge's destination, and
    the edge ids in that order (what the transposed sums of a backward walk)."""

    crow: torch.Tensor
    dst: torch.Tensor
    order: torch.Tensor


def transposed(src: torch.Tensor, dst: torch.Tensor, num_src: int) -> Transpose:
    order = torch.argsort(src, stable=True)
    return Transpose(_crow(src[order], num_src), dst[order].contiguous(), order)


def block_csr(block: Block) -> tuple[torch.Tensor, Transpose | None]:
    """The block's row pointer over destinations and its transpose, read from the mean matrices the
    loader made (its thread sorted the edges by source already) where it made them; else the row
    pointer counted here and no transpose (the backward sorts)."""
    mean, mean_t, order = block.mean, block.mean_t, block.order
    if mean is None or mean.layout != torch.sparse_csr:
        return _crow(block.dst, block.num_dst), None
    if mean_t is None or order is None or mean_t.layout != torch.sparse_csr:
        return mean.crow_indices(), None
    return mean.crow_indices(), Transpose(mean_t.crow_indices(), mean_t.col_indices(), order)


def product(h: torch.Tensor, a: torch.Tensor, a_t: torch.Tensor) -> torch.Tensor:
    """a @ h, through SparseProduct when h needs a gradient."""
    return SparseProduct.apply(h, a, a_t) if h.requires_grad else spmm(a, h)


@dataclass
class RelationPairs:
    """A block's (destination, relation) pairs, sorted by relation then destination: pair k holds the
    edges of relation rel[k] into destination dst[k]; offsets[r]:offsets[r+1] are relation r's pairs.
    `mean` (pairs x sources) averages each pair's sources (with a transpose for backward), `weight`
    sums them instead (each pair's edges, weighted by `edge_weight` when given)."""

    dst: torch.Tensor
    rel: torch.Tensor
    offsets: list[int]
    mean: torch.Tensor
    mean_t: torch.Tensor
    edge_pair: torch.Tensor  # each edge's pair

    @property
    def num_pairs(self) -> int:
        return len(self.dst)


def relation_pairs(block: Block, num_rels: int, edge_weight: torch.Tensor | None = None) -> RelationPairs:
    """The pairs of `block` over `num_rels` relations (an untyped block: one relation). With
    `edge_weight` (one per edge) a pair's sources are combined with their weights over the pair's
    total weight instead of averaged.

    Two stable sorts, each of narrow keys where it can be: the edges by (relation, destination), which
    for a block listing its edges by destination (the loader's) is a sort by relation alone, and by
    source, which the loader made already (block.order). The pairs then come from the sorted keys in
    one pass (a sort by key, then by pair, and a third by source took 4.8 ms of a 30,000-edge block)."""
    dst, src = block.dst, block.src
    etype = block.etype if block.etype is not None else torch.zeros_like(dst)
    if etype.numel() and (int(etype.min()) < 0 or int(etype.max()) >= num_rels):
        raise ValueError(f"a block's edge type lies outside the model's {num_rels} relations")
    key = etype * block.num_dst + dst
    order = _stable_order(etype, num_rels) if _ascending(dst) else torch.sort(key, stable=True)[1]
    uniq, counts = torch.unique_consecutive(key[order], return_counts=True)
    num_pairs = len(uniq)
    pair = torch.empty_like(order).index_put_(
        (order,), torch.repeat_interleave(torch.arange(num_pairs, device=dst.device), counts)
    )
    rel = torch.div(uniq, block.num_dst, rounding_mode="floor")
    weight = (
        torch.ones(len(dst), dtype=torch.float32, device=dst.device) if edge_weight is None else edge_weight
    )
    total = torch.zeros(num_pairs, dtype=weight.dtype, device=dst.device).index_add_(0, pair, weight)
    values = weight / total.clamp_min(1e-12)[pair]
    crow = torch.zeros(num_pairs + 1, dtype=torch.int64, device=dst.device)
    crow[1:] = torch.cumsum(counts, 0)
    mean = _csr(crow, src[order], values[order], (num_pairs, block.num_src))
    order_t = block.order if block.order is not None else _stable_order(src, block.num_src)
    order_t = order_t.to(src.device)
    mean_t = _csr(
        _crow(src[order_t], block.num_src), pair[order_t], values[order_t], (block.num_src, num_pairs)
    )
    offsets = torch.searchsorted(rel, torch.arange(num_rels + 1, device=rel.device)).tolist()
    return RelationPairs(uniq - rel * block.num_dst, rel, offsets, mean, mean_t, pair)


def _ascending(x: torch.Tensor) -> bool:
    return x.numel() < 2 or bool((x[1:] >= x[:-1]).all())


def _stable_order(keys: torch.Tensor, bound: int) -> torch.Tensor:
    """The stable argsort of `keys` (each in [0, bound)): on the host, numpy's radix sort of 16-bit keys
    where they fit (15x its merge sort of int64, loader.mean_matrices), else torch's stable sort."""
    if keys.device.type == "cpu" and bound <= 1 << 16:
        return torch.from_numpy(np.argsort(keys.numpy().astype(np.uint16), kind="stable"))
    return torch.sort(keys, stable=True)[1]


def per_relation(pairs: RelationPairs, m: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each pair's message m[k] @ weights[rel[k]]: one GEMM per relation over its pairs (pairs x in ->
    pairs x out). The pairs and weights are split apart once (split, unbind): indexing them relation by
    relation would give autograd a node per relation that fills a whole-size gradient (61 relations of
    a 384 x 256 weight: 1.5 GB of zeros and adds per WordNet step).

    Under autocast, a GPU casts both to autocast's dtype once (autocast would cast every relation's
    slices, and their gradients back, one by one). A CPU keeps these products in float32: most
    relations' GEMMs are small, and small bfloat16 GEMMs are slower there than float32's, by more than
    the large ones gain once the weights' casts are paid (bench/RESULTS.md, "R-GCN in bfloat16")."""
    sizes = [pairs.offsets[r + 1] - pairs.offsets[r] for r in range(len(pairs.offsets) - 1)]
    if autocasting(m):
        low = torch.get_autocast_dtype(m.device.type) if m.device.type != "cpu" else torch.float32
        with torch.autocast(m.device.type, enabled=False):
            return per_relation(pairs, m.to(low), weights.to(low))
    parts = [pm @ w for pm, w in zip(torch.split(m, sizes), weights.unbind(0), strict=True) if pm.shape[0]]
    if not parts:
        return m.new_zeros((0, weights.shape[-1]))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class EdgeSoftmax(torch.autograd.Function):
    """Softmax of edge scores (edges x heads) over each destination's in-edges (DGL's edge_softmax), its
    backward alpha * (g - sum over the destination of alpha * g). With `crow`, the CSR row pointer of
    edges grouped by destination (a block's), the CPU core runs each in one pass over the rows
    (cuda/src/gnn_cpu.cpp); otherwise scatters and gathers over `group`."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        e: torch.Tensor,
        group: torch.Tensor,
        num_groups: int,
        crow: torch.Tensor | None,
    ) -> torch.Tensor:
        if crow is not None and native_cpu(e):
            from graphtrain.runtime.native import core

            e = e.contiguous()
            alpha = torch.empty_like(e)
            core().gt_edge_softmax(
                num_groups, _ptr(crow), _ptr(e), _ptr(alpha), e.shape[1], torch.get_num_threads()
            )
        else:
            index = group.unsqueeze(1).expand_as(e)
            top = torch.full((num_groups, e.shape[1]), float("-inf"), dtype=e.dtype, device=e.device)
            top.scatter_reduce_(0, index, e, "amax", include_self=True)
            ex = torch.exp(e - top.gather(0, index))
            total = torch.zeros_like(top).index_add_(0, group, ex)
            alpha = ex / total.gather(0, index)
        ctx.save_for_backward(alpha, group)
        ctx.num_groups, ctx.crow = num_groups, crow
        return alpha

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        alpha, group = ctx.saved_tensors
        if ctx.crow is not None and native_cpu(alpha, grad):
            from graphtrain.runtime.native import core

            grad = grad.contiguous()
            out = torch.empty_like(grad)
            core().gt_edge_softmax_grad(
                ctx.num_groups,
                _ptr(ctx.crow),
                _ptr(alpha),
                _ptr(grad),
                _ptr(out),
                grad.shape[1],
                torch.get_num_threads(),
            )
            return out, None, None, None
        ag = alpha * grad
        total = torch.zeros((ctx.num_groups, grad.shape[1]), dtype=grad.dtype, device=grad.device)
        total.index_add_(0, group, ag)
        return ag - alpha * total[group], None, None, None


def edge_softmax(
    e: torch.Tensor, group: torch.Tensor, num_groups: int, crow: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax of e over the edges of each group; `crow`: the groups' CSR row pointer, where the edges are
    grouped by group in order (a block's edges by destination)."""
    return EdgeSoftmax.apply(e, group, num_groups, crow)


def native_cpu(*tensors: torch.Tensor) -> bool:
    """The CPU core's attention kernels apply: float32 host tensors and the native core loaded."""
    if not all(t.device.type == "cpu" for t in tensors) or tensors[0].dtype != torch.float32:
        return False
    from graphtrain.runtime.native.backend import CoreBackend, choose

    return choose() is CoreBackend.CPU


def _ptr(t: torch.Tensor) -> int:
    return int(t.data_ptr())


class AttentionSum(torch.autograd.Function):
    """out[v, h] = sum over v's in-edges e of alpha[e, h] * z[src[e], h] over the block's CSR (its edges
    are grouped by destination); z of one head is weighed by every head (out[v, h] = sum alpha[e, h] *
    z[src[e], 0]: a layer aggregating its input before its per-head transform). With head_major the
    output is (heads, destinations, width), what a per-head batched GEMM reads without a copy. `frozen`
    (sources, heads or 1, f), data that takes no gradient, is summed with the same weights into the
    output's first f columns: one tensor, so one GEMM per head transforms data and embedding together.
    Backward: z's gradient by the transposed sum, alpha's by a dot product per edge and head. On the host
    the CPU core runs all three (cuda/src/gnn_cpu.cpp: one pass over the edges, no (edges x heads x
    width) intermediate); elsewhere a sparse product per head and gathers."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        alpha: torch.Tensor,
        z: torch.Tensor,
        crow: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        num_dst: int,
        head_major: bool,
        transpose: Transpose | None = None,
        frozen: torch.Tensor | None = None,
    ) -> torch.Tensor:
        heads = alpha.shape[1]
        alpha, z = alpha.contiguous(), z.contiguous()
        parts = [z] if frozen is None else [frozen.contiguous(), z]
        ld = sum(p.shape[2] for p in parts)
        out = z.new_empty((heads, num_dst, ld) if head_major else (num_dst, heads, ld))
        if native_cpu(alpha, *parts):
            from graphtrain.runtime.native import core

            first, second = parts if len(parts) == 2 else (z, None)
            core().gt_attention_sum(
                num_dst,
                _ptr(crow),
                _ptr(src),
                _ptr(alpha),
                _ptr(first),
                0 if second is None else _ptr(second),
                _ptr(out),
                heads,
                z.shape[1],
                first.shape[2],
                0 if second is None else second.shape[2],
                int(head_major),
                torch.get_num_threads(),
            )
        else:
            at = 0
            for part in parts:
                width = part.shape[2]
                for h in range(heads):
                    a = _csr(crow, src, alpha[:, h].contiguous(), (num_dst, part.shape[0]))
                    got = torch.sparse.mm(a, part[:, h if part.shape[1] > 1 else 0])
                    if head_major:
                        out[h, :, at : at + width] = got
                    else:
                        out[:, h, at : at + width] = got
                at += width
        ctx.save_for_backward(alpha, z, crow, src, dst, *parts[:-1])
        ctx.num_dst, ctx.head_major, ctx.transpose = num_dst, head_major, transpose
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        alpha, z, crow, src, dst, *frozen = ctx.saved_tensors
        grad = grad.contiguous()
        f = frozen[0].shape[2] if frozen else 0
        if native_cpu(alpha, z, grad, *frozen):
            grad_alpha, grad_z = _native_backward(ctx, alpha, z, crow, src, dst, grad, frozen)
        else:
            per_head = grad if ctx.head_major else grad.transpose(0, 1)  # (heads, destinations, ld)
            grad_alpha, grad_z = _torch_backward(ctx, alpha, z, src, dst, per_head[..., f:])
            if frozen and grad_alpha is not None:
                grad_alpha += _alpha_grad(alpha, frozen[0], src, dst, per_head[..., :f])
        return grad_alpha, grad_z, *(None,) * 7


def _torch_backward(
    ctx: torch.autograd.function.FunctionCtx,
    alpha: torch.Tensor,
    z: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    per_head: torch.Tensor,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of alpha and z by sparse products and gathers; per_head: (heads, destinations,
    width), the output's gradient over z's columns."""
    heads, z_heads, num_src = alpha.shape[1], z.shape[1], z.shape[0]
    grad_alpha = grad_z = None
    if ctx.needs_input_grad[1]:
        crow_t, dst_t, order = ctx.transpose or transposed(src, dst, num_src)
        grad_z = torch.zeros_like(z)
        for h in range(heads):
            a_t = _csr(crow_t, dst_t, alpha[order, h].contiguous(), (num_src, ctx.num_dst))
            grad_z[:, h if z_heads > 1 else 0] += torch.sparse.mm(a_t, per_head[h].contiguous())
    if ctx.needs_input_grad[0]:
        grad_alpha = _alpha_grad(alpha, z, src, dst, per_head)
    return grad_alpha, grad_z


def _alpha_grad(
    alpha: torch.Tensor, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, per_head: torch.Tensor
) -> torch.Tensor:
    """<grad_out[dst], z[src]> per edge and head, in row chunks of the edges."""
    grad_alpha = torch.empty_like(alpha)
    for h in range(alpha.shape[1]):
        gh, zh = per_head[h], z[:, h if z.shape[1] > 1 else 0]
        for a in range(0, len(src), 65536):
            b = min(a + 65536, len(src))
            grad_alpha[a:b, h] = (gh[dst[a:b]] * zh[src[a:b]]).sum(1)
    return grad_alpha


def _native_backward(
    ctx: torch.autograd.function.FunctionCtx,
    alpha: torch.Tensor,
    z: torch.Tensor,
    crow: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    grad: torch.Tensor,
    frozen: list[torch.Tensor],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The CPU core's gradients of alpha and z; with `frozen` ([its columns]), z's columns follow them in
    each row of grad."""
    from graphtrain.runtime.native import core

    heads, z_heads, width, num_src = alpha.shape[1], z.shape[1], z.shape[2], z.shape[0]
    f = frozen[0].shape[2] if frozen else 0
    threads, major = torch.get_num_threads(), int(ctx.head_major)
    grad_alpha = grad_z = None
    if ctx.needs_input_grad[1]:
        crow_t, dst_t, order = ctx.transpose or transposed(src, dst, num_src)
        grad_z = torch.empty_like(z)
        core().gt_attention_sum_t(
            num_src,
            ctx.num_dst,
            _ptr(crow_t),
            _ptr(dst_t),
            _ptr(order),
            _ptr(alpha),
            _ptr(grad) + f * grad.element_size(),
            _ptr(grad_z),
            heads,
            z_heads,
            width,
            f + width,
            major,
            threads,
        )
    if ctx.needs_input_grad[0]:
        first, second = (frozen[0], z) if frozen else (z, None)
        grad_alpha = torch.empty_like(alpha)
        core().gt_attention_dot(
            ctx.num_dst,
            _ptr(crow),
            _ptr(src),
            _ptr(grad),
            _ptr(first),
            0 if second is None else _ptr(second),
            _ptr(grad_alpha),
            heads,
            z_heads,
            first.shape[2],
            0 if second is None else width,
            major,
            threads,
        )
    return grad_alpha, grad_z


def attention_sum(
    alpha: torch.Tensor,
    z: torch.Tensor,
    block: Block,
    head_major: bool = False,
    frozen: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each destination's in-edges' z[src] (z: (sources, heads or 1, width)) weighted by alpha:
    (destinations, heads, width), or with head_major (heads, destinations, width). With `frozen`
    (sources, heads or 1, f; no gradient), its weighted sum fills the first f of f + width columns."""
    if frozen is not None and frozen.requires_grad:
        raise ValueError("attention_sum's frozen columns take no gradient; pass them with z instead")
    if frozen is not None and (frozen.shape[0], frozen.shape[1]) != (z.shape[0], z.shape[1]):
        raise ValueError(
            f"attention_sum: frozen {tuple(frozen.shape)} and z {tuple(z.shape)} differ in rows or heads"
        )
    crow, transpose = block_csr(block)
    return AttentionSum.apply(
        alpha, z, crow, block.src, block.dst, block.num_dst, head_major, transpose, frozen
    )
