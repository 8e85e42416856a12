"""GAT (Velickovic et al. 2018; DGL's GATConv): multi-head attention over each node's sampled
in-neighbours, a residual projection of the node itself, ELU and dropout between layers, the heads
concatenated between layers and averaged at the output.

A layer: z = h W (heads x width per head); each edge u -> v scores LeakyReLU(a_l z_u + a_r z_v) per
head; the scores are softmaxed over v's in-edges (layers.edge_softmax, with attention dropout) and
weight the sum of z_u (layers.attention_sum: a sparse product per head). The residual (DGL's
`residual=True`) keeps a node with few or no sampled neighbours informed by its own input. With edge
features (model.edgeFeatures) each edge's features enter as W_e f_uv: in its score (a_e W_e f_uv) and
in its message (z_u + W_e f_uv), so a label carried by an edge reaches the node it points to.

model.hiddenDim is the concatenated width of a hidden layer: each of model.heads heads is
hiddenDim / heads wide.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from graphtrain.contract.spec import GATModel, GNNModel
from graphtrain.runtime.graph.loader import Block
from graphtrain.runtime.models.entry import BlockWork, GNNEntry, GNNShape
from graphtrain.runtime.models.layers import (
    LayerStack,
    attention_sum,
    autocasting,
    block_csr,
    edge_softmax,
    fitted,
    padded,
)
from graphtrain.runtime.models.thin import thin_product
from graphtrain.runtime.native.nn import elu_dropout


class GATConv(nn.Module):
    """One attention layer: `heads` heads of `width` each (concatenated: heads x width).

    The same function as DGL's GATConv (z = h W, scores a_l z_u + a_r z_v, out_v = sum alpha z_u), in the
    order that reads fewer rows: a score is h_u . (W_h a_l,h), so the attention needs no z, and the
    weighted sum commutes with W (sum alpha h_u W = (sum alpha h_u) W), so each head's weighted sum of
    the raw inputs is taken over the edges first and transformed once per destination. On a sampled
    block (sources several times the destinations, a few edges per source) that is a GEMM over the
    destinations instead of every source: the input layer of a WordNet batch transforms ~20k rows
    instead of ~70k. `frozen` leading input columns (data beside a learnable embedding) get no gradient.
    """

    def __init__(
        self,
        in_dim: int,
        width: int,
        heads: int,
        negative_slope: float = 0.2,
        attention_dropout: float = 0.0,
        edge_dim: int = 0,
    ):
        super().__init__()
        self.heads, self.width = heads, width
        self.fc = nn.Linear(in_dim, heads * width, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, width))
        self.attn_r = nn.Parameter(torch.empty(1, heads, width))
        self.res = nn.Linear(in_dim, heads * width, bias=False)
        self.bias = nn.Parameter(torch.zeros(heads * width))
        self.edge_fc = nn.Linear(edge_dim, heads * width, bias=False) if edge_dim else None
        self.attn_e = nn.Parameter(torch.empty(1, heads, width)) if edge_dim else None
        self.negative_slope, self.attention_dropout = negative_slope, attention_dropout
        gain = nn.init.calculate_gain("relu")  # DGL's GATConv.reset_parameters
        for p in (self.fc.weight, self.res.weight, self.attn_l, self.attn_r):
            nn.init.xavier_normal_(p, gain=gain)
        if self.edge_fc is not None and self.attn_e is not None:
            nn.init.xavier_normal_(self.edge_fc.weight, gain=gain)
            nn.init.xavier_normal_(self.attn_e, gain=gain)

    def _per_head(self) -> torch.Tensor:
        """W as (heads, in, width)."""
        return self.fc.weight.view(self.heads, self.width, -1).transpose(1, 2)

    def forward(self, block: Block, h: torch.Tensor, frozen: torch.Tensor | None = None) -> torch.Tensor:
        """(destinations, heads, width); `h` the learnable input columns (all of them without `frozen`).
        Under autocast (training.mixedPrecision) the attention runs in float32 outside it, on the CPU
        core's kernels, and only the transforms (bmm, baddbmm, addmm) take bfloat16."""
        w = self._per_head()  # (heads, in, width)
        f = 0 if frozen is None else frozen.shape[1]
        if autocasting(h):
            with torch.autocast(h.device.type, enabled=False):
                summed, alpha, ef = self._attend(block, h.float(), None if frozen is None else frozen.float())
        else:
            summed, alpha, ef = self._attend(block, h, frozen)
        n = block.num_dst  # under autocast on a CPU the GEMMs run on padded rows (layers.padded)
        out = torch.bmm(padded(summed, 1), w)
        if ef is not None:
            summed = torch.zeros((n, self.heads, ef.shape[1]), dtype=ef.dtype, device=ef.device)
            summed.index_add_(0, block.dst, alpha.unsqueeze(-1) * ef.unsqueeze(1))
            we = self.edge_fc.weight.view(self.heads, self.width, -1).transpose(
                1, 2
            )  # (heads, edge_dim, width)
            out = torch.baddbmm(out, padded(summed).transpose(0, 1), we)
        # the sums accumulate inside the GEMMs (baddbmm, addmm): no pass of their own over the outputs
        hd = h[:n]  # one slice of h, reused: each slice's backward fills a whole-size gradient
        res = torch.addmm(self.bias, padded(hd), self.res.weight[:, f:].t())
        if frozen is not None:
            res = torch.addmm(res, padded(frozen[:n]), self.res.weight[:, :f].t())
        return fitted(out.transpose(0, 1) + res.view(-1, self.heads, self.width), n)

    def _attend(
        self, block: Block, h: torch.Tensor, frozen: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Each head's attention-weighted sum of the inputs (heads, destinations, in), the attention
        (edges, heads) and the block's edge features (None without model.edgeFeatures)."""
        # a score's weights on h, (2 heads, in): the source's side, then the destination's; per head
        # (2, width) @ (width, in), a product over W's rows as they lie
        sides = torch.cat([self.attn_l, self.attn_r]).transpose(0, 1)  # (heads, 2, width)
        lr = torch.bmm(sides, self.fc.weight.view(self.heads, self.width, -1)).transpose(0, 1).flatten(0, 1)
        # both sides' scores of every source in one pass over the inputs (the destinations are its first rows)
        scores = thin_product(h, lr, frozen)
        score = scores[block.src, : self.heads] + scores[block.dst, self.heads :]
        ef = None
        if self.edge_fc is not None and self.attn_e is not None:
            if block.efeat is None:
                raise ValueError("model.edgeFeatures is set but the block carries no edge features")
            we = self.edge_fc.weight.view(self.heads, self.width, -1)  # (heads, width, edge_dim)
            score = score + block.efeat @ (we * self.attn_e.view(self.heads, self.width, 1)).sum(1).t()
            ef = block.efeat
        crow, _ = block_csr(block)
        score = functional.leaky_relu(score, self.negative_slope)
        alpha = edge_softmax(score, block.dst, block.num_dst, crow)
        alpha = functional.dropout(alpha, self.attention_dropout, self.training)
        # each head's weighted sum of the inputs, then (forward) its transform: (heads, dst, in) @ (heads,
        # in, width); the frozen columns summed into the same tensor, so one GEMM per head transforms both
        fz = None if frozen is None else frozen.unsqueeze(1)
        return attention_sum(alpha, h.unsqueeze(1), block, head_major=True, frozen=fz), alpha, ef


class GAT(LayerStack):
    """Stacked GATConv layers: heads concatenated (ELU, dropout) between layers, averaged at the output."""

    def __init__(self, variant: GATModel, shape: GNNShape):
        super().__init__()
        heads, layers = variant.heads, variant.num_layers
        if variant.hidden_dim % heads:
            raise ValueError(f"model.hiddenDim {variant.hidden_dim} is not a multiple of model.heads {heads}")
        width = variant.hidden_dim // heads
        edge_dim = shape.edge_dim if variant.edge_features else 0
        ins = [shape.in_dim] + [variant.hidden_dim] * (layers - 1)
        outs = [width] * (layers - 1) + [shape.out_dim]
        self.layers = nn.ModuleList(
            GATConv(a, b, heads, variant.negative_slope, variant.attention_dropout, edge_dim)
            for a, b in zip(ins, outs, strict=True)
        )
        self.dropout = variant.dropout

    def _run(
        self, blocks: list[Block], x: torch.Tensor, frozen: torch.Tensor | None, last: bool
    ) -> torch.Tensor:
        if not last and not blocks:  # a one-layer model's hidden output is its input
            return x if frozen is None else torch.cat([frozen, x], dim=1)
        h = x
        for i, block in enumerate(blocks[: len(self.layers) if last else len(self.layers) - 1]):
            h = self.layer(i, block, h, frozen)
        return h

    def layer(
        self, i: int, block: Block, h: torch.Tensor, frozen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer i over one block: its heads averaged at the output, else concatenated (ELU, dropout)."""
        out = self.layers[i](block, h, frozen) if i == 0 else self.layers[i](block, h)
        if i == len(self.layers) - 1:
            return out.mean(1)
        return elu_dropout(out.flatten(1), self.dropout, self.training)


def build(variant: GNNModel, shape: GNNShape) -> nn.Module:
    assert isinstance(variant, GATModel)
    return GAT(variant, shape)


def macs(variant: GNNModel, shape: GNNShape, blocks: BlockWork) -> float:
    """Per layer: the projection of every source (and the residual of the destinations), and per edge
    and head its score and its share of the weighted sum."""
    assert isinstance(variant, GATModel)
    total = 0.0
    ins = [shape.in_dim] + [variant.hidden_dim] * (variant.num_layers - 1)
    outs = [variant.hidden_dim] * (variant.num_layers - 1) + [variant.heads * shape.out_dim]
    for (dst, edges), d_in, d_out in zip(blocks, ins, outs, strict=True):
        src = dst + edges  # at most: the destinations and one new node per edge
        total += (src + dst) * d_in * d_out + edges * d_out * 2
    return total


ENTRY = GNNEntry("gat", build, macs)
