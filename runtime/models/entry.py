"""What a model brings to the registry (models/__init__.py): how to build it, and its cost.

A GNN encodes a batch's seeds from their sampled blocks (graph/loader.py): `build(variant, shape)`
returns a torch module whose forward is `(blocks, x, frozen=None) -> (seeds, out_dim)`, `x` the learnable
or whole input of the input nodes and `frozen` its leading data columns when they are passed apart (see
graphsage.SAGEConv). A knowledge-graph model scores triples from entity and relation rows. Each gives
its multiply-adds per step, which `graphtrain plan` turns into time (steptime.py), so the planner reads
a model's cost from the same entry the trainers build it from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from graphtrain.contract.spec import GNNModel, KGEModel


@dataclass(frozen=True)
class GNNShape:
    """The data a GNN is built for: input width (`frozen` of it leading data columns passed apart),
    output width (classes), the graph's relation count (1: untyped) and its edge-feature width."""

    in_dim: int
    out_dim: int
    frozen: int = 0
    num_relations: int = 1
    edge_dim: int = 0

    def dims(self, variant: GNNModel) -> list[int]:
        """Layer widths: input, hidden..., output."""
        return [self.in_dim] + [variant.hidden_dim] * (variant.num_layers - 1) + [self.out_dim]


# (destination nodes, edges) of each block, input layer first: what a step's work is counted by
BlockWork = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class GNNEntry:
    """A GNN kind: `build` its module, `macs` of one forward over blocks of `BlockWork`."""

    kind: str
    build: Callable[[GNNModel, GNNShape], nn.Module]
    macs: Callable[[GNNModel, GNNShape, BlockWork], float]
    typed: bool = False  # reads each edge's relation (a typed graph's edge types)


Scores = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, KGEModel], torch.Tensor]


@dataclass(frozen=True)
class KGEEntry:
    """A knowledge-graph embedding kind: the score of (h, r, t) rows broadcast over leading dims, the
    scores of (h, r, every entity) and of (every entity, r, t) as (b, entities), and its multiply-adds
    per scored triple of width `dim`. unit_rows: both tables start on the unit sphere and the entities
    are put back there after every step (PyKEEN's TransE and DistMult); complex-valued models keep
    their rows free (PyKEEN's ComplEx and RotatE). unit_relations: each relation element is a unit
    complex number, the relation rows put back there after every step and at the start (PyKEEN's
    RotatE: complex_normalize as the relations' constrainer)."""

    kind: str
    score: Scores
    tails: Scores  # (h, r, entities)
    heads: Scores  # (r, t, entities)
    macs_per_triple: Callable[[int], float]
    unit_rows: bool = True
    unit_relations: bool = False  # relation rows of unit complex numbers, projected there after each step
