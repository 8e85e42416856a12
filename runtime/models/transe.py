"""TransE (Bordes et al. 2013): a relation is a translation, the score of (h, r, t) is -||h + r - t||_p.
PyKEEN's convention, so runs compare with it setting for setting (bench/e2e.py). tails and heads score
against a set of entities, batched over any leading dimensions (joint negatives: one set per chunk)."""

from __future__ import annotations

import torch

from graphtrain.contract.spec import KGEModel, TransEModel
from graphtrain.runtime.models.entry import KGEEntry


def _p(model: KGEModel) -> int:
    assert isinstance(model, TransEModel)
    return int(model.norm)


def score(h: torch.Tensor, r: torch.Tensor, t: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return -torch.linalg.vector_norm(h + r - t, ord=_p(model), dim=-1)


def tails(h: torch.Tensor, r: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return -torch.cdist(h + r, ents, p=_p(model))


def heads(r: torch.Tensor, t: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return -torch.cdist(t - r, ents, p=_p(model))


ENTRY = KGEEntry("transe", score, tails, heads, macs_per_triple=lambda dim: 3.0 * dim)
