"""R-GCN (Schlichtkrull et al. 2018; DGL's RelGraphConv): a weight per relation, or (model.numBases) a
learned combination of shared bases, over each relation's mean of a node's sampled in-neighbours, plus a
self-loop (relational.py holds the layer, which GraphSAGE on a typed graph shares)."""

from __future__ import annotations

from torch import nn

from graphtrain.contract.spec import GNNModel, RGCNModel
from graphtrain.runtime.models.entry import BlockWork, GNNEntry, GNNShape
from graphtrain.runtime.models.relational import RGCN, relational_macs


def build(variant: GNNModel, shape: GNNShape) -> nn.Module:
    assert isinstance(variant, RGCNModel)
    return RGCN(variant, shape, variant.num_bases, variant.self_loop, variant.edge_weight)


def macs(variant: GNNModel, shape: GNNShape, blocks: BlockWork) -> float:
    assert isinstance(variant, RGCNModel)
    return relational_macs(variant, shape, blocks, variant.num_bases)


ENTRY = GNNEntry("rgcn", build, macs, typed=True)
