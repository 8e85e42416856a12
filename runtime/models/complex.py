"""ComplEx (Trouillon et al. 2016): entities and relations are complex vectors, the score of (h, r, t)
is Re(<h, r, conj(t)>), so a relation can be antisymmetric where DistMult's cannot. A row of width
2d holds d complex numbers, real parts first. PyKEEN's ComplEx with the same rows (its embedding_dim
is d), unconstrained. tails and heads score against a set of entities, batched over any leading
dimensions (joint negatives: one set per chunk)."""

from __future__ import annotations

import torch

from graphtrain.contract.spec import KGEModel
from graphtrain.runtime.models.entry import KGEEntry


def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(real, imaginary) of rows laid out as [real parts, imaginary parts]."""
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


def times(a: torch.Tensor, b: torch.Tensor, conj_b: bool = False) -> torch.Tensor:
    """The elementwise complex product a * b (or a * conj(b)) of two row layouts, as a row layout."""
    (ar, ai), (br, bi) = halves(a), halves(b)
    if conj_b:
        bi = -bi
    return torch.cat([ar * br - ai * bi, ar * bi + ai * br], dim=-1)


def score(h: torch.Tensor, r: torch.Tensor, t: torch.Tensor, model: KGEModel) -> torch.Tensor:
    # Re(sum h r conj(t)) = <Re(h r), Re(t)> + <Im(h r), Im(t)>: the real dot product of the layouts
    return (times(h, r) * t).sum(-1)


def tails(h: torch.Tensor, r: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return times(h, r) @ ents.mT


def heads(r: torch.Tensor, t: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    # Re(sum h x) with x = r conj(t) is <Re(h), Re(x)> - <Im(h), Im(x)>
    xr, xi = halves(times(r, t, conj_b=True))
    return torch.cat([xr, -xi], dim=-1) @ ents.mT


ENTRY = KGEEntry("complex", score, tails, heads, macs_per_triple=lambda dim: 3.0 * dim, unit_rows=False)
