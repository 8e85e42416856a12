"""Relational graph attention (Busbridge et al. 2019's WIRGAT; GraphStorm's rgat: a GATConv per
relation, summed): per relation r its own projection W_r and attention vectors, each edge u -> v of r
scored LeakyReLU(a_l^r W_r h_u + a_r^r W_r h_v), the scores softmaxed over v's in-edges of r, the
relations' weighted sums added, with a residual projection of v itself.

A relation's projection is applied to its edges' sources only (the rows it reads), so a block's work is
its edges' sources per relation rather than every source per relation. model.hiddenDim is the heads'
concatenated width, as in gat.py; edge features (model.edgeFeatures) enter each relation's scores and
messages as in GAT.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from graphtrain.contract.spec import GNNModel
from graphtrain.contract.spec.model import RGATModel
from graphtrain.runtime.graph.loader import Block
from graphtrain.runtime.models.entry import BlockWork, GNNEntry, GNNShape
from graphtrain.runtime.models.layers import LayerStack, edge_softmax, fitted, padded


class RGATConv(nn.Module):
    """One relational attention layer: `heads` heads of `width` each, per relation."""

    def __init__(
        self,
        in_dim: int,
        width: int,
        heads: int,
        num_rels: int,
        negative_slope: float = 0.2,
        attention_dropout: float = 0.0,
        edge_dim: int = 0,
    ):
        super().__init__()
        self.heads, self.width, self.num_rels = heads, width, num_rels
        gain = nn.init.calculate_gain("relu")
        self.weight = nn.Parameter(
            nn.init.xavier_normal_(torch.empty(num_rels, in_dim, heads * width), gain=gain)
        )
        self.attn_l = nn.Parameter(nn.init.xavier_normal_(torch.empty(num_rels, heads, width), gain=gain))
        self.attn_r = nn.Parameter(nn.init.xavier_normal_(torch.empty(num_rels, heads, width), gain=gain))
        self.res = nn.Linear(in_dim, heads * width, bias=False)
        nn.init.xavier_normal_(self.res.weight, gain=gain)
        self.bias = nn.Parameter(torch.zeros(heads * width))
        self.edge_fc = nn.Linear(edge_dim, heads * width, bias=False) if edge_dim else None
        self.attn_e = (
            nn.Parameter(nn.init.xavier_normal_(torch.empty(num_rels, heads, width), gain=gain))
            if edge_dim
            else None
        )
        self.negative_slope, self.attention_dropout = negative_slope, attention_dropout

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        """(destinations, heads, width)."""
        etype = block.etype if block.etype is not None else torch.zeros_like(block.dst)
        hw = self.heads * self.width
        # per edge: its relation's projection of its source and of its destination
        z_src = torch.empty((len(block.src), hw), dtype=h.dtype, device=h.device)
        z_dst = torch.empty((len(block.src), hw), dtype=h.dtype, device=h.device)
        order = torch.argsort(etype, stable=True)
        bounds = torch.searchsorted(
            etype[order], torch.arange(self.num_rels + 1, device=etype.device)
        ).tolist()
        for r in range(self.num_rels):
            a, b = bounds[r], bounds[r + 1]
            if b <= a:
                continue
            edges = order[a:b]
            src, dst = block.src[edges], block.dst[edges]
            nodes, back = torch.unique(torch.cat([src, dst]), return_inverse=True)
            # each node this relation reads, projected once (under autocast a bfloat16 product, kept in
            # h's dtype for the attention)
            z = fitted(padded(h[nodes]) @ self.weight[r], len(nodes)).to(h.dtype)  # rows: layers.padded
            z_src[edges] = z[back[: len(src)]]
            z_dst[edges] = z[back[len(src) :]]
        zs = z_src.view(-1, self.heads, self.width)
        score = (zs * self.attn_l[etype]).sum(-1) + (
            z_dst.view(-1, self.heads, self.width) * self.attn_r[etype]
        ).sum(-1)
        msg = zs
        if self.edge_fc is not None and self.attn_e is not None:
            if block.efeat is None:
                raise ValueError("model.edgeFeatures is set but the block carries no edge features")
            ef = fitted(self.edge_fc(padded(block.efeat)), len(block.efeat)).view(-1, self.heads, self.width)
            score = score + (ef * self.attn_e[etype]).sum(-1)
            msg = msg + ef
        # the softmax runs over each (destination, relation) pair's edges
        group_key = etype * block.num_dst + block.dst
        groups, group = torch.unique(group_key, return_inverse=True)
        alpha = edge_softmax(functional.leaky_relu(score, self.negative_slope), group, len(groups))
        alpha = functional.dropout(alpha, self.attention_dropout, self.training)
        out = torch.zeros((block.num_dst, self.heads, self.width), dtype=h.dtype, device=h.device)
        out.index_add_(0, block.dst, alpha.unsqueeze(-1) * msg)
        res = fitted(self.res(padded(h[: block.num_dst])), block.num_dst).view(-1, self.heads, self.width)
        return out + res + self.bias.view(1, self.heads, self.width)


class RGAT(LayerStack):
    """Stacked RGATConv layers: heads concatenated (ELU, dropout) between layers, averaged at the output."""

    def __init__(self, variant: RGATModel, shape: GNNShape):
        super().__init__()
        heads, layers = variant.heads, variant.num_layers
        if variant.hidden_dim % heads:
            raise ValueError(f"model.hiddenDim {variant.hidden_dim} is not a multiple of model.heads {heads}")
        width = variant.hidden_dim // heads
        edge_dim = shape.edge_dim if variant.edge_features else 0
        ins = [shape.in_dim] + [variant.hidden_dim] * (layers - 1)
        outs = [width] * (layers - 1) + [shape.out_dim]
        self.layers = nn.ModuleList(
            RGATConv(
                a, b, heads, shape.num_relations, variant.negative_slope, variant.attention_dropout, edge_dim
            )
            for a, b in zip(ins, outs, strict=True)
        )
        self.dropout = variant.dropout

    def _run(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None, last: bool
    ) -> torch.Tensor:
        h = x
        for i, block in enumerate(blocks[: len(self.layers) if last else len(self.layers) - 1]):
            h = self.layer(i, block, h, frozen)
        return h if blocks or frozen is None else torch.cat([frozen, x], dim=1)

    def layer(
        self, i: int, block: Block, h: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer i over one block (the first reads the data columns before the learnable ones): its
        heads averaged at the output, else concatenated (ELU, dropout)."""
        if i == 0 and frozen is not None:
            h = torch.cat([frozen, h], dim=1)
        out = self.layers[i](block, h)
        if i == len(self.layers) - 1:
            return out.mean(1)
        return functional.dropout(functional.elu(out.flatten(1)), self.dropout, self.training)


def build(variant: GNNModel, shape: GNNShape) -> nn.Module:
    assert isinstance(variant, RGATModel)
    return RGAT(variant, shape)


def macs(variant: GNNModel, shape: GNNShape, blocks: BlockWork) -> float:
    """Per layer: each edge's source and destination projected by its relation (at most two rows per
    edge), the residual of the destinations, and per edge and head its score and message."""
    assert isinstance(variant, RGATModel)
    total = 0.0
    ins = [shape.in_dim] + [variant.hidden_dim] * (variant.num_layers - 1)
    outs = [variant.hidden_dim] * (variant.num_layers - 1) + [variant.heads * shape.out_dim]
    for (dst, edges), d_in, d_out in zip(blocks, ins, outs, strict=True):
        total += (2 * edges + dst) * d_in * d_out + edges * d_out * 3
    return total


ENTRY = GNNEntry("rgat", build, macs, typed=True)
