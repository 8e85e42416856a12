"""What the tasks that learn node pairs share (link prediction, edge classification): each trainer's
share of the target pairs, the blocks of a batch's endpoints without its own pairs, and every node's
embedding over the whole graph, layer by layer.

- **Shares.** Each trainer takes an equal, contiguous share of the targets ordered by destination, so
  mostly destinations of one partition (the new ids run partition by partition), and every trainer
  takes the same number of steps, as DDP needs.
- **Exclusion.** A batch's target pairs leave the graph its GNN samples (exclude self), with their
  reverses as well (reverse), or nothing leaves (none): the leak a model must not learn from.
- **embed_all.** Each layer over every node once (its in-edges sampled whole, one block per chunk of
  nodes), each trainer a contiguous share of the nodes, the layer's rows gathered on every trainer before
  the next reads them, as DGL's distributed inference computes it. A node's k-hop neighbourhood is never
  expanded, so a hub costs its edges once per layer, not once per batch that reaches it.
"""

from __future__ import annotations

import numpy as np
import torch

from graphtrain.contract.spec import Exclude
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.loader import MiniBatch, pair_keys, sample_blocks
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.encoder import GNNEncoder

EVAL_NODES = 4096  # nodes embedded per evaluation batch


class EncoderAndHead(torch.nn.Module):
    """The encoder and the task's head on its embeddings (link prediction's decoder, edge
    classification's classifier, under that name) as one module: one DDP wrapper, one dense optimizer,
    one dense.pt. forward is the encoder's; the head's parameters are reached through its name (DDP
    all-reduces every parameter's gradient as backward produces it, wherever it was used)."""

    def __init__(self, encoder: torch.nn.Module, name: str, head: torch.nn.Module):
        super().__init__()
        self.encoder = encoder
        self.add_module(name, head)

    def forward(self, *args: object) -> torch.Tensor:
        return self.encoder(*args)


def exclusion(exclude: Exclude | None, reverse_edges: bool) -> Exclude:
    """task.exclude, or its default: reverse when graph.reverseEdges made every edge two-way (a target
    pair's reverse would carry it into its own neighbourhood), else self."""
    if exclude is not None:
        return exclude
    return Exclude.reverse if reverse_edges else Exclude.self


def share(rows: np.ndarray, dst_column: int, dist: Dist, what: str) -> np.ndarray:
    """This trainer's equal, contiguous share of `rows` ordered by their `dst_column`.

    Raises:
        GraphtrainError: fewer rows than trainers (naming `what` they are)."""
    n = len(rows) // dist.world
    if n == 0:
        raise GraphtrainError(
            f"trainers.replicas: {len(rows)} {what} cannot be shared by {dist.world} trainers"
        )
    ordered = rows[np.argsort(rows[:, dst_column], kind="stable")]
    start = dist.rank * len(rows) // dist.world
    return np.ascontiguousarray(ordered[start : start + n])


def sample_without(
    graph: DistGraph,
    seeds: np.ndarray,
    pairs: tuple[np.ndarray, np.ndarray],
    exclude: Exclude,
    fanouts: list,
    seed: int,
) -> MiniBatch:
    """The blocks of `seeds` (sorted, distinct) without the edges between the (source, destination)
    `pairs`, and their reverses too, as `exclude` says."""
    keys = None
    if exclude != Exclude.none:
        src, dst = pairs
        if exclude == Exclude.reverse:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        keys = pair_keys(src, dst, graph.num_nodes)
    return sample_blocks(graph, seeds, fanouts, seed, exclude=keys)


@torch.no_grad()
def embed_all(
    enc: GNNEncoder, module: torch.nn.Module, dist: Dist, num_layers: int, out_dim: int
) -> torch.Tensor:
    """Every node's embedding (num_nodes, out_dim) on the host, with every neighbour, layer by layer
    (the module docstring); `module`: the encoder's model, not its DDP wrapper."""
    graph, device = enc.graph, enc.device
    module.eval()
    n, rank, world = graph.num_nodes, dist.rank, dist.world
    lo, hi = rank * n // world, (rank + 1) * n // world
    starts = range(lo, hi, EVAL_NODES)
    rounds = int(max(dist.gather_max([len(starts)]))) if enc.collective_tables else len(starts)
    enc.idle_lookups(rounds - len(starts))  # the first layer's lookups, paired across trainers
    h: torch.Tensor | None = None
    for layer in range(num_layers):
        parts = []
        for i in starts:
            mb = sample_blocks(graph, np.arange(i, min(i + EVAL_NODES, hi), dtype=np.int64), [-1])
            block = to_device(mb.blocks, device)[0]
            if h is None:
                first, frozen = enc.layer_inputs(mb)
                out = module.layer(0, block, first, frozen)
            else:
                out = module.layer(layer, block, to_device(h[torch.from_numpy(mb.input_nodes)], device))
            parts.append(out.float().cpu())
        mine = torch.cat(parts) if parts else torch.empty(0, out_dim if h is None else h.shape[1])
        h = dist.gather_rows(mine)
    module.train()
    assert h is not None
    return h
