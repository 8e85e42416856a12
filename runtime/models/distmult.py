"""DistMult (Yang et al. 2015): a diagonal bilinear score <h, r, t>. tails and heads score against a
set of entities, batched over any leading dimensions (joint negatives: one set per chunk)."""

from __future__ import annotations

import torch

from graphtrain.contract.spec import KGEModel
from graphtrain.runtime.models.entry import KGEEntry


def score(h: torch.Tensor, r: torch.Tensor, t: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return (h * r * t).sum(-1)


def tails(h: torch.Tensor, r: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return (h * r) @ ents.mT


def heads(r: torch.Tensor, t: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return (r * t) @ ents.mT


ENTRY = KGEEntry("distmult", score, tails, heads, macs_per_triple=lambda dim: 2.0 * dim)
