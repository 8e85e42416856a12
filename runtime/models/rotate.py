"""RotatE (Sun et al. 2019): a relation rotates the head in the complex plane, the score of (h, r, t)
is -||h * r - t|| with |r_i| = 1, which models symmetry, antisymmetry, inversion and composition. A
row of width 2d holds d complex numbers, real parts first. As PyKEEN does, each relation element is
put back on the unit circle after every step and at the start (ENTRY.unit_relations: the optimizer's
unit_complex constraint); the score also reads it through r / |r|, so a row that is not on the circle
yet (a dynamic vocabulary's new key) still scores as a rotation. tails and heads score against a
set of entities, batched over any leading dimensions: the distance of complex vectors is the L2
distance of their row layouts, and a unit rotation preserves it (||h r - t|| = ||h - t conj(r)||),
so both sides are one cdist."""

from __future__ import annotations

import torch

from graphtrain.contract.spec import KGEModel
from graphtrain.runtime.models.complex import times
from graphtrain.runtime.models.entry import KGEEntry
from graphtrain.runtime.optim.functional import unit_complex


def score(h: torch.Tensor, r: torch.Tensor, t: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return -torch.linalg.vector_norm(times(h, unit_complex(r)) - t, ord=2, dim=-1)


def tails(h: torch.Tensor, r: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return -torch.cdist(times(h, unit_complex(r)), ents, p=2)


def heads(r: torch.Tensor, t: torch.Tensor, ents: torch.Tensor, model: KGEModel) -> torch.Tensor:
    return -torch.cdist(times(t, unit_complex(r), conj_b=True), ents, p=2)


ENTRY = KGEEntry(
    "rotate", score, tails, heads, macs_per_triple=lambda dim: 4.0 * dim, unit_rows=False, unit_relations=True
)
