"""GraphSAGE (Hamilton et al. 2017) with the mean aggregator.

It follows DGL's SAGEConv with the mean aggregator (h_dst' = W_self h_dst + W_neigh mean of
h_src over the sampled in-neighbours), ReLU and dropout between layers; the last layer outputs class
scores. It reads message-flow blocks whose destination nodes are the first of their source nodes.
"""

from __future__ import annotations

import torch
from torch import nn

from graphtrain.contract.spec import GNNModel
from graphtrain.runtime.graph.loader import Block, MeanInput
from graphtrain.runtime.models.entry import BlockWork, GNNEntry, GNNShape
from graphtrain.runtime.models.layers import SparseProduct, autocasting, fitted, padded, spmm
from graphtrain.runtime.models.relational import RGCN, relational_macs
from graphtrain.runtime.native.nn import bias_relu_dropout


class BothMaps(torch.autograd.Function):
    """(h W_neigh^T, h[:n] W_self^T): a transform-first layer's two products, with one gradient of h.
    Through autograd, h[:n]'s gradient is a whole zero (num_src x in) tensor with its first n rows
    copied in, then added to the other product's: three passes over the step's widest gradient (3,745 x
    256 in WordNet's output layer). Here the self product's part is added into the first n rows of the
    other's, in place (one GEMM accumulating)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        h: torch.Tensor,
        w_neigh: torch.Tensor,
        w_self: torch.Tensor,
        n: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(h, w_neigh, w_self)
        ctx.n = n
        return h @ w_neigh.t(), h[:n] @ w_self.t()

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor, grad_dst: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        h, w_neigh, w_self = ctx.saved_tensors
        n = ctx.n
        grad_h = grad_neigh = grad_self = None
        if ctx.needs_input_grad[0]:
            grad_h = grad @ w_neigh
            grad_h[:n].addmm_(grad_dst, w_self)
        if ctx.needs_input_grad[1]:
            grad_neigh = grad.t() @ h
        if ctx.needs_input_grad[2]:
            grad_self = grad_dst.t() @ h[:n]
        return grad_h, grad_neigh, grad_self, None


class MeanMaps(torch.autograd.Function):
    """bias + mean(h) W_neigh^T + h[:n] W_self^T, the mean first, for an h that learns (WordNet's 13,659
    x 128 embedding rows), with one gradient of h. Through autograd, h[:n]'s gradient is a whole zero
    (num_src x in) tensor with its first n rows copied in, then added to the transposed mean's: a fill,
    a copy and an add over the step's largest gradient. Here the self product's part is added into the
    first n rows of the transposed mean's output, in place (one GEMM accumulating).

    `given`: the mean and h[:n] read where the rows lie (loader.MeanInput), h then only the leaf that
    takes the gradient (its values unread): the same products and bits, without the source rows."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        block: Block,
        h: torch.Tensor,
        w_neigh: torch.Tensor,
        w_self: torch.Tensor,
        bias: torch.Tensor | None,
        given: MeanInput | None = None,
    ) -> torch.Tensor:
        n = block.num_dst
        m, h_dst = (spmm(block.mean, h), h[:n]) if given is None else (given.mean, given.dst)
        ctx.save_for_backward(h_dst, m, w_neigh, w_self)
        ctx.mean_t, ctx.n = block.mean_t, n
        return onto(bias, m, w_neigh).addmm_(h_dst, w_self.t())

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        h_dst, m, w_neigh, w_self = ctx.saved_tensors
        n = ctx.n
        grad_h = grad_neigh = grad_self = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_h = spmm(ctx.mean_t, grad @ w_neigh)  # a fresh tensor: ours to add to
            grad_h[:n].addmm_(grad, w_self)
        if ctx.needs_input_grad[2]:
            grad_neigh = grad.t() @ m
        if ctx.needs_input_grad[3]:
            grad_self = grad.t() @ h_dst
        if ctx.needs_input_grad[4]:
            grad_bias = grad.sum(0)
        return None, grad_h, grad_neigh, grad_self, grad_bias, None


def onto(acc: torch.Tensor | None, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """acc + a w^T as one GEMM: acc None (a fresh product), a bias (1-D, broadcast into the product's
    output first), or the output so far (2-D, added to in place)."""
    if acc is None:
        return torch.mm(a, w.t())
    return torch.addmm(acc, a, w.t()) if acc.dim() == 1 else acc.addmm_(a, w.t())


# What one element of a mean (a gathered row's float, added) costs in GEMM multiply-adds: 125 against 7
# ps on 2 Xeon cores (a 4,713-edge mean 256 wide; 1,024 x 256 x 45 products), so ~18 per pass. Training
# runs three GEMM passes (forward, both gradients) to the mean's two, hence 12.
MEAN_ELEMENT_MACS = 12


def transform_first(num_src: int, num_dst: int, edges: int, d_in: int, d_out: int) -> bool:
    """Whether to transform the sources before the mean rather than after. Transforming first costs
    num_src x in x out in GEMMs and a mean edges x out wide; the mean first, num_dst x in x out and
    edges x in. DGL transforms first whenever in > out, exact for a whole graph (num_src = num_dst) but
    not for a sampled block: WordNet's output layer (3,745 sources, 1,024 destinations, 4,700 edges, 256
    -> 45) runs 2.3x the GEMM work that way, 2.2 against 1.5 ms forward and backward. The edges are
    the mean's entries: a block at a fixed capacity (fixed_blocks) decides on its padded counts."""
    gemm_saved = d_in * d_out * (num_src - num_dst)
    return gemm_saved < MEAN_ELEMENT_MACS * edges * (d_in - d_out)


class SAGEConv(nn.Module):
    """Mean-aggregator GraphSAGE layer. The neighbour transform and the mean commute (both linear), so
    each block runs them in the cheaper order: transforming first costs num_src x in x out, afterwards
    num_dst x in x out. DGL decides by in > out alone, which for a wide input layer (projected features
    plus an embedding: 384 -> 256) transforms the ~16k source rows instead of the ~4k destinations:
    four times the GEMMs, forward and backward.

    `frozen` leading input columns are data that need no gradient (node features next to a learnable
    embedding): their weights are kept as separate matrices so backward skips their input-gradient
    GEMMs, two thirds of the input layer's for 256 feature + 128 embedding columns. Same function, same
    parameters, and the same initialisation (drawn for the whole matrix, then split)."""

    def __init__(self, in_dim: int, out_dim: int, frozen: int = 0):
        super().__init__()
        self.in_dim, self.out_dim, self.frozen = in_dim, out_dim, frozen
        gain = nn.init.calculate_gain("relu")
        # DGL's SAGEConv.reset_parameters: Xavier-uniform with ReLU gain, zero bias (nn.Linear's default
        # Kaiming-uniform(a=sqrt(5)) starts ~2.5x smaller and trains to a different point in 10 epochs).
        w_self = nn.init.xavier_uniform_(torch.empty(out_dim, in_dim), gain=gain)
        w_neigh = nn.init.xavier_uniform_(torch.empty(out_dim, in_dim), gain=gain)
        self.w_self = nn.Parameter(w_self[:, frozen:].clone())
        self.w_neigh = nn.Parameter(w_neigh[:, frozen:].clone())
        self.w_self_frozen = nn.Parameter(w_self[:, :frozen].clone()) if frozen else None
        self.w_neigh_frozen = nn.Parameter(w_neigh[:, :frozen].clone()) if frozen else None
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(
        self,
        block: Block,
        h: torch.Tensor | MeanInput,
        frozen: torch.Tensor | MeanInput | None = None,
        bias: bool = True,
    ) -> torch.Tensor:
        """h, and frozen: the input rows of the block's sources, or a frozen input as its mean and
        destination rows (loader.MeanInput: the features, read where they lie). Without `bias` the
        caller adds self.bias (nn.bias_relu_dropout, in the activation's pass)."""
        out = self._part(block, h, self.w_self, self.w_neigh, self.bias if bias else None)
        if frozen is not None:
            out = self._part(block, frozen, self.w_self_frozen, self.w_neigh_frozen, out)
        return out

    def _part(
        self,
        block: Block,
        h: torch.Tensor | MeanInput,
        w_self: torch.Tensor,
        w_neigh: torch.Tensor,
        acc: torch.Tensor | None,
    ) -> torch.Tensor:
        """acc + h_dst W_self^T + mean(h) W_neigh^T. acc is none, the bias (1-D) or the output so far,
        which is added to in place: each product is one GEMM accumulating into the output (addmm, beta 1)
        rather than a product, then an add, then the bias's broadcast add."""
        if isinstance(h, MeanInput):  # the mean and h_dst given
            if h.dst.shape[0] != block.num_dst or h.mean.shape[0] != block.num_dst:
                raise ValueError(f"a mean input of {h.dst.shape[0]} rows for {block.num_dst} destinations")
            if h.src is None:  # frozen: the last branch's products
                return onto(acc, h.mean, w_neigh).addmm_(h.dst, w_self.t())
            if (
                h.src.shape[0] != block.num_src
                or block.mean_t is None
                or (acc is not None and acc.dim() != 1)
            ):
                raise ValueError("a learnable mean input needs its block's transposed mean and goes first")
            return MeanMaps.apply(block, h.src, w_neigh, w_self, acc, h)
        h_dst, n = h[: block.num_dst], block.num_dst
        if autocasting(h):  # out of place: autocast skips in-place products; rows padded (layers.padded)
            own = fitted(nn.functional.linear(padded(h_dst), w_self), n)
            own = own.float() if acc is None else acc + own  # sums in float32, as with a bias first
            return own + fitted(nn.functional.linear(padded(self._mean(block, h)), w_neigh), n)
        edges = block.src.shape[0] if block.mean is None else block.mean.values().shape[0]
        if transform_first(block.num_src, n, edges, w_neigh.shape[1], w_neigh.shape[0]):
            z, z_dst = BothMaps.apply(h, w_neigh, w_self, n)
            out = self._mean(block, z)  # a fresh tensor: ours to add to
            if acc is not None:
                out = out.add_(acc) if acc.dim() == 1 else acc.add_(out)
            return out.add_(z_dst)
        sparse = block.mean is not None and block.mean_t is not None
        if (acc is None or acc.dim() == 1) and h.requires_grad and sparse:
            return MeanMaps.apply(block, h, w_neigh, w_self, acc)
        return onto(acc, self._mean(block, h), w_neigh).addmm_(h_dst, w_self.t())

    @staticmethod
    def _mean(block: Block, h: torch.Tensor) -> torch.Tensor:
        """The mean over each destination's in-neighbours, summed in float32 (under autocast too)."""
        if autocasting(h):
            h = h.float()
        if block.mean is not None:
            if block.mean_t is not None and h.requires_grad:
                return SparseProduct.apply(h, block.mean, block.mean_t)
            return spmm(block.mean, h)
        agg = torch.zeros((block.num_dst, h.shape[1]), dtype=h.dtype, device=h.device)
        agg.index_add_(0, block.dst, h.index_select(0, block.src))
        deg = torch.bincount(block.dst, minlength=block.num_dst).clamp_(min=1).to(h.dtype)
        return agg / deg.unsqueeze(1)


class GraphSAGE(nn.Module):
    """`frozen`: leading input columns that are data (no gradient), see SAGEConv. Every GEMM it runs has
    a block's destination count as its rows or inner dimension, or none (`pads_blocks`: on padded
    blocks, padding.py, they take a few shapes)."""

    pads_blocks = True

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        num_classes: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        frozen: int = 0,
    ):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList(
            SAGEConv(a, b, frozen if i == 0 else 0)
            for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True))
        )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {dropout}")
        self.dropout = dropout

    def forward(
        self,
        blocks: list[Block],
        x: torch.Tensor | MeanInput,
        frozen: torch.Tensor | MeanInput | None = None,
    ) -> torch.Tensor:
        """x: the input columns that learn (or all of them); frozen: the leading data columns, if split.
        Data columns may come as their mean and destination rows (loader.MeanInput)."""
        h = x
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h, frozen)
        return h

    def layer(
        self,
        i: int,
        block: Block,
        h: torch.Tensor | MeanInput,
        frozen: torch.Tensor | MeanInput | None = None,
    ) -> torch.Tensor:
        """Layer i over one block, with the activation that follows it (what forward stacks, and what
        evaluation over the whole graph runs layer by layer)."""
        conv = self.layers[i]
        if i == len(self.layers) - 1:
            return conv(block, h, frozen) if i == 0 else conv(block, h)
        out = conv(block, h, frozen, bias=False) if i == 0 else conv(block, h, bias=False)
        return bias_relu_dropout(out, conv.bias, self.dropout, self.training)

    def hidden(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The last hidden layer's output (what the classifier reads), over one block fewer than the
        layers, as forward computes it in evaluation; a one-layer model's is its input (data columns
        first, as SAGEConv reads them)."""
        if not blocks:
            return x if frozen is None else torch.cat([frozen, x], dim=1)
        h = x
        for i, (layer, block) in enumerate(zip(self.layers[:-1], blocks, strict=True)):
            h = torch.relu(layer(block, h, frozen) if i == 0 else layer(block, h))
        return h


def build(variant: GNNModel, shape: GNNShape) -> nn.Module:
    """GraphSAGE; on a typed graph (several relations) one mean and weight per relation, summed, beside
    one self weight (DGL's HeteroGraphConv of SAGEConvs, its self terms merged): rgcn's layer with a
    full weight per relation, as is a mean weighted by edge features (model.edgeWeight)."""
    weighted = bool(getattr(variant, "edge_weight", False))
    if shape.num_relations > 1 or weighted:
        return RGCN(variant, shape, num_bases=None, self_loop=True, edge_weight=weighted)
    return GraphSAGE(
        shape.in_dim, variant.hidden_dim, shape.out_dim, variant.num_layers, variant.dropout, shape.frozen
    )


def macs(variant: GNNModel, shape: GNNShape, blocks: BlockWork) -> float:
    """Each SAGEConv's two linear maps of its destinations and the mean over its edges (a typed
    graph's: rgcn's count)."""
    if shape.num_relations > 1 or getattr(variant, "edge_weight", False):
        return relational_macs(variant, shape, blocks, None)
    total = 0.0
    dims = shape.dims(variant)
    for (dst, edges), d_in, d_out in zip(blocks, dims[:-1], dims[1:], strict=True):
        total += dst * d_in * d_out * 2 + edges * d_in
    return total


ENTRY = GNNEntry("graphsage", build, macs)
