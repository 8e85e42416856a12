"""A GNN's output for every node, layer by layer over the whole graph, as DGL's distributed inference
computes it: training's evaluation (node classification, link prediction, edge tasks) and
`graphtrain infer` run this one function, so their scores agree.

- **Shares.** Each trainer computes a contiguous share of the nodes, inside its own partition's range
  when the trainers divide evenly among the partitions (`node_share`): it writes, and mostly reads, the
  rows of the shard it sits beside.
- **Layers on the shard servers.** Each layer's rows go to a scratch tensor on the shard servers
  (`scratch:layer<i>`, never checkpointed: kvstore/tables/state.py), and the next layer pulls the rows of its
  blocks' input nodes from there after a barrier. No trainer holds the whole graph's rows, so a layer
  costs each trainer its share, not num_nodes x width (DGL keeps them in DistTensors alike).
- **Every neighbour.** Each chunk of nodes is one block of all its in-edges; a node's k-hop
  neighbourhood is never expanded, so a hub costs its edges once per layer, not once per batch that
  reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.loader import sample_blocks
from graphtrain.runtime.storage.shard import SCRATCH_PREFIX
from graphtrain.runtime.tensor import DistTensor
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.encoder import GNNEncoder

CHUNK = 4096  # nodes per block
PULL_CHUNK = 262_144  # rows per pull when a caller reads a whole layer back
SCRATCH = f"{SCRATCH_PREFIX}layer"  # the servers neither checkpoint nor restore it


def node_share(bounds: np.ndarray, rank: int, world: int) -> tuple[int, int]:
    """Trainer `rank`'s contiguous share [lo, hi) of the nodes: an even piece of its own partition's
    range when `world` is a multiple of the partitions (trainer r beside partition r // (world/parts), as
    the launchers place them), else an even piece of all nodes. The shares cover every node once."""
    parts, n = len(bounds) - 1, int(bounds[-1])
    if parts >= 1 and world % parts == 0:
        per = world // parts
        p, i = divmod(rank, per)
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        return lo + i * (hi - lo) // per, lo + (i + 1) * (hi - lo) // per
    return rank * n // world, (rank + 1) * n // world


@dataclass
class Layers:
    """The result of `layerwise`: every layer's rows on the shard servers (`tensors[i]`: layer i's
    output) and this trainer's share [lo, hi) of the last one, on the host (`mine`)."""

    tensors: list[DistTensor]
    lo: int
    hi: int
    mine: torch.Tensor

    @property
    def last(self) -> DistTensor:
        return self.tensors[-1]

    def rows(self, layer: int, lo: int, hi: int) -> torch.Tensor:
        """Rows [lo, hi) of layer `layer`'s output, pulled in chunks."""
        t = self.tensors[layer]
        parts = [t[np.arange(a, min(a + PULL_CHUNK, hi))] for a in range(lo, hi, PULL_CHUNK)]
        return torch.cat(parts) if parts else torch.empty(0, *t.shape[1:])

    def everything(self) -> torch.Tensor:
        """Every node's last-layer row (num_nodes, width) on the host: what ranking against every
        candidate needs (link prediction's evaluation)."""
        return self.rows(len(self.tensors) - 1, 0, self.last.shape[0])


@torch.no_grad()
def layerwise(enc: GNNEncoder, module: torch.nn.Module, dist: Dist, num_layers: int) -> Layers:
    """Every node's output of `module` (the encoder's model) with every neighbour,
    layer by layer (the module docstring). Collective: every trainer calls it."""
    graph: DistGraph = enc.graph
    device = enc.device
    was_training = module.training
    module.eval()
    # every trainer's last pushes are applied before any row is read: without this a trainer that
    # finished first evaluated rows its peer's last step had not reached yet (an inference from the
    # checkpoint, taken after such a barrier, then ranked differently: seen once in CI)
    graph.client.settle()
    dist.barrier()
    lo, hi = node_share(graph.book.bounds, dist.rank, dist.world)
    starts = range(lo, hi, CHUNK)
    rounds = int(max(dist.gather_max([len(starts)]))) if enc.collective_tables else len(starts)
    enc.idle_lookups(rounds - len(starts))  # the first layer's lookups, paired across trainers
    tensors: list[DistTensor] = []
    mine = torch.empty(0)
    try:
        for layer in range(num_layers):
            parts = []
            for i in starts:
                mb = sample_blocks(graph, np.arange(i, min(i + CHUNK, hi), dtype=np.int64), [-1])
                block = to_device(mb.blocks, device)[0]
                if layer == 0:
                    first, frozen = enc.layer_inputs(mb)
                    out = module.layer(0, block, first, frozen)
                else:
                    h = to_device(tensors[-1][mb.input_nodes], device)
                    out = module.layer(layer, block, h)
                parts.append(out.float().cpu())
            width = int(max(dist.gather_max([parts[0].shape[1] if parts else 0])))
            mine = torch.cat(parts) if parts else torch.empty(0, width)
            shape = (graph.num_nodes, width)
            t = DistTensor(shape, torch.float32, f"{SCRATCH}{layer}", book=graph.book, client=graph.client)
            if hi > lo:
                t[np.arange(lo, hi, dtype=np.int64)] = mine
            tensors.append(t)
            dist.barrier()  # every share of this layer is on the servers before any trainer reads it
    finally:
        module.train(was_training)
    return Layers(tensors, lo, hi, mine)
