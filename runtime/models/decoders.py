"""Pair decoders: how a GNN's node embeddings z_h, z_t and a relation score an edge (task
linkPrediction; DGL's and GraphStorm's decoders), and edge classification's PairClassifier (below).

- dot: <z_h, z_t> / sqrt(dim) (the relation is not read; scaled as attention scales it);
- distmult: <z_h, w_r, z_t>, a learned diagonal per relation (R-GCN's link prediction decoder), w_r
  drawn from N(0, 1/dim);
- mlp: w2 . relu(A (z_h + w_r) + B z_t + b1) + b2, one hidden layer of the embedding's width.

Each scores broadcast rows (`score`), and a row set against candidates (`tails`: (h, r) against
entities, `heads`: (r, t) against entities) batched over leading dimensions, as the knowledge-graph
models' entries do (models/entry.py), so that the joint negatives and the filtered ranking of task kge
(train/kge_math.py) serve both tasks. The mlp's candidate scores are (queries x candidates x width):
the evaluation passes candidates in chunks.
"""

from __future__ import annotations

import torch
from torch import nn


class Decoder(nn.Module):
    """A pair decoder over `dim`-wide embeddings and `num_relations` relations."""

    def __init__(self, kind: str, dim: int, num_relations: int):
        super().__init__()
        if kind not in ("dot", "distmult", "mlp"):
            raise ValueError(f"unknown link decoder {kind!r}")
        self.kind = kind
        self.rel = nn.Parameter(torch.empty(max(num_relations, 1), dim)) if kind != "dot" else None
        # The scores start O(1) for O(1) embeddings: a sum of `dim` products grows as sqrt(dim), and
        # a softmax over scores of ~10 (a dot product of 64-wide embeddings) saturates at the first step,
        # whose large gradients then drive a ReLU encoder's hidden units dead (every node the same
        # embedding, measured on Nations: loss 23 at the start, ln(14) for good after 40 steps).
        self.scale = dim**-0.5
        if self.rel is not None:
            nn.init.normal_(self.rel, std=dim**-0.5)
        if kind == "mlp":
            self.head_map = nn.Linear(dim, dim)
            self.tail_map = nn.Linear(dim, dim, bias=False)
            self.out = nn.Linear(dim, 1)

    def relation(self, r: torch.Tensor) -> torch.Tensor | None:
        """The relation rows of ids `r` (None for dot, which reads none)."""
        return None if self.rel is None else self.rel[r]

    def score(self, h: torch.Tensor, r: torch.Tensor | None, t: torch.Tensor) -> torch.Tensor:
        """Scores of rows h, t (and relation rows r), broadcast over their leading dimensions."""
        if self.kind == "dot":
            return (h * t).sum(-1) * self.scale
        assert r is not None
        if self.kind == "distmult":
            return (h * r * t).sum(-1)
        return self.out(torch.relu(self.head_map(h + r) + self.tail_map(t))).squeeze(-1)

    def tails(self, h: torch.Tensor, r: torch.Tensor | None, ents: torch.Tensor) -> torch.Tensor:
        """(..., m, n): each (h, r) of (..., m, d) against each candidate tail of (..., n, d)."""
        if self.kind == "mlp":
            assert r is not None
            a = self.head_map(h + r).unsqueeze(-2)
            return self.out(torch.relu(a + self.tail_map(ents).unsqueeze(-3))).squeeze(-1)
        q = h * self.scale if r is None else h * r
        return q @ ents.transpose(-1, -2)

    def heads(self, r: torch.Tensor | None, t: torch.Tensor, ents: torch.Tensor) -> torch.Tensor:
        """(..., m, n): each (r, t) of (..., m, d) against each candidate head of (..., n, d)."""
        if self.kind == "mlp":
            assert r is not None
            c = self.tail_map(t).unsqueeze(-2)
            return self.out(torch.relu(self.head_map(ents.unsqueeze(-3) + r.unsqueeze(-2)) + c)).squeeze(-1)
        q = t * self.scale if r is None else t * r
        return q @ ents.transpose(-1, -2)


class PairClassifier(nn.Module):
    """Edge classification's pair decoder (GraphStorm's MLP edge decoder, with the pair's product):
    class scores of an edge of type r between z_s and z_d,
    W2 relu(W1 [z_s, z_d, z_s * z_d] + b1 + w_r) + b2, one hidden layer of the embedding's width; the
    product lets a label that depends on how the two ends agree be read without a deep MLP."""

    def __init__(self, dim: int, num_relations: int, num_classes: int):
        super().__init__()
        self.hidden = nn.Linear(3 * dim, dim)
        self.rel = nn.Parameter(torch.zeros(max(num_relations, 1), dim))
        self.out = nn.Linear(dim, num_classes)

    def forward(self, s: torch.Tensor, r: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """(B, num_classes) scores of the edges (s[i], r[i], d[i]) (r: edge type ids)."""
        return self.out(torch.relu(self.hidden(torch.cat([s, d, s * d], -1)) + self.rel[r]))
