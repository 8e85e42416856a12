"""The relational layer of R-GCN and of GraphSAGE on typed graphs (Schlichtkrull et al. 2018; DGL's
RelGraphConv): h_v' = W_0 h_v + sum over relations r of W_r mean(h_u over v's sampled in-neighbours by
r) + b, with ReLU and dropout between layers.

Each relation's weight is its own, or (model.numBases) a learned combination of shared bases, W_r =
sum_b a_rb V_b, which keeps the parameters at numBases weights for graphs of many relations. The mean
is taken per (destination, relation) pair first, then each relation's pairs go through one GEMM
(layers.relation_pairs): work per pair, where DGL's RelGraphConv multiplies every edge's message
(gather_mm), several times the FLOPs on a sampled block whose nodes have a few relations each. An
untyped graph is one relation: the layer is then GraphSAGE's with its own parameters.

`frozen` leading input columns (node features beside a learnable embedding) are multiplied apart so
backward computes no gradient for them, as graphsage.SAGEConv does.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from graphtrain.contract.spec import GNNModel
from graphtrain.runtime.graph.loader import Block
from graphtrain.runtime.models.entry import BlockWork, GNNShape
from graphtrain.runtime.models.layers import (
    autocasting,
    fitted,
    padded,
    per_relation,
    product,
    relation_pairs,
    spmm,
)
from graphtrain.runtime.native.nn import relu_dropout


def _xavier(*shape: int) -> nn.Parameter:
    w = torch.empty(*shape)
    fan_in, fan_out = shape[-2], shape[-1]
    bound = nn.init.calculate_gain("relu") * math.sqrt(6.0 / (fan_in + fan_out))
    return nn.Parameter(w.uniform_(-bound, bound))


class RelGraphConv(nn.Module):
    """One relational layer over `num_rels` relations, full weights or `num_bases` bases; `frozen`
    leading input columns apart (see the module docstring)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_rels: int,
        num_bases: int | None = None,
        self_loop: bool = True,
        frozen: int = 0,
    ):
        super().__init__()
        self.in_dim, self.out_dim, self.num_rels, self.frozen = in_dim, out_dim, num_rels, frozen
        self.num_bases = num_bases if num_bases is not None and num_bases < num_rels else None
        if self.num_bases is None:
            self.weight = _xavier(num_rels, in_dim, out_dim)
            self.coeff = None
        else:
            self.weight = _xavier(self.num_bases, in_dim, out_dim)
            self.coeff = nn.Parameter(nn.init.xavier_uniform_(torch.empty(num_rels, self.num_bases)))
        self.loop = _xavier(in_dim, out_dim) if self_loop else None
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def weights(self) -> torch.Tensor:
        """(relations, in, out): each relation's weight, combined from the bases when there are bases."""
        if self.coeff is None:
            return self.weight
        with torch.autocast(self.weight.device.type, enabled=False):  # float32: see layers.per_relation
            return torch.einsum("rb,bio->rio", self.coeff, self.weight)

    def forward(
        self,
        block: Block,
        h: torch.Tensor,
        frozen: torch.Tensor | None = None,
        edge_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        pairs = relation_pairs(block, self.num_rels, edge_weight)
        w = self.weights()
        f = self.frozen if frozen is not None else 0
        msg = per_relation(pairs, product(h, pairs.mean, pairs.mean_t), w[:, f:])
        if frozen is not None:  # data columns: no input gradient (sparse.mm of a tensor without grad)
            msg = msg + per_relation(pairs, spmm(pairs.mean, frozen), w[:, :f])
        out = self.bias.expand(block.num_dst, -1).clone()
        out.index_add_(0, pairs.dst, msg.to(out.dtype))  # under autocast: bfloat16 products, float32 sums
        if self.loop is not None and autocasting(h):  # out of place: autocast skips addmm_; rows padded
            n = block.num_dst
            out = out + fitted(padded(h[:n]) @ self.loop[f:], n)
            return out if frozen is None else out + fitted(padded(frozen[:n]) @ self.loop[:f], n)
        if self.loop is not None:
            out.addmm_(h[: block.num_dst], self.loop[f:])
            if frozen is not None:
                out.addmm_(frozen[: block.num_dst], self.loop[:f])
        return out


class RGCN(nn.Module):
    """Stacked RelGraphConv layers; the last outputs class scores."""

    def __init__(
        self,
        variant: GNNModel,
        shape: GNNShape,
        num_bases: int | None = None,
        self_loop: bool = True,
        edge_weight: bool = False,
    ):
        super().__init__()
        self.edge_weight = edge_weight
        dims = shape.dims(variant)
        self.layers = nn.ModuleList(
            RelGraphConv(a, b, shape.num_relations, num_bases, self_loop, shape.frozen if i == 0 else 0)
            for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True))
        )
        self.dropout = variant.dropout

    def _weights(self, block: Block) -> torch.Tensor | None:
        """The block's edge weights (its edges' first feature) when the model weighs its means."""
        if not self.edge_weight:
            return None
        if block.efeat is None:
            raise ValueError("model.edgeWeight is set but the block carries no edge features")
        return block.efeat[:, 0].clamp_min(0.0)

    def forward(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = x
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h, frozen)
        return h

    def layer(
        self, i: int, block: Block, h: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer i over one block, with the activation that follows it (graphsage.GraphSAGE.layer)."""
        w = self._weights(block)
        layer = self.layers[i]
        out = layer(block, h, frozen, w) if i == 0 else layer(block, h, edge_weight=w)
        return relu_dropout(out, self.dropout, self.training) if i < len(self.layers) - 1 else out

    def hidden(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The last hidden layer's output (what the classifier reads), over one block fewer than the
        layers; a one-layer model's is its input (data columns first)."""
        if not blocks:
            return x if frozen is None else torch.cat([frozen, x], dim=1)
        h = x
        for i, (layer, block) in enumerate(zip(self.layers[:-1], blocks, strict=True)):
            w = self._weights(block)
            h = torch.relu(layer(block, h, frozen, w) if i == 0 else layer(block, h, edge_weight=w))
        return h


def relational_macs(variant: GNNModel, shape: GNNShape, blocks: BlockWork, bases: int | None) -> float:
    """Per layer: the pairs' mean over the edges, one GEMM per pair (at most one pair per edge; counted
    as min(edges, destinations x relations)), the self-loop's GEMM, and the bases' combination."""
    total = 0.0
    dims = shape.dims(variant)
    for (dst, edges), d_in, d_out in zip(blocks, dims[:-1], dims[1:], strict=True):
        pairs = min(edges, dst * shape.num_relations)
        total += edges * d_in + pairs * d_in * d_out + dst * d_in * d_out
        if bases:
            total += shape.num_relations * bases * d_in * d_out
    return total
