"""Graphs served by the shard servers: DistGraph, node_split, neighbour sampling and mini-batches."""

from graphtrain.runtime.graph.bags import FeatureBags
from graphtrain.runtime.graph.dist_graph import DistGraph, standalone_client
from graphtrain.runtime.graph.loader import Block, MiniBatch, NeighborLoader, sample_blocks
from graphtrain.runtime.graph.split import edge_split, node_split

__all__ = [
    "Block",
    "DistGraph",
    "FeatureBags",
    "MiniBatch",
    "NeighborLoader",
    "edge_split",
    "node_split",
    "sample_blocks",
    "standalone_client",
]
