"""What the tasks that learn node pairs share (link prediction, edge classification): each trainer's
share of the target pairs and the blocks of a batch's endpoints without its own pairs (every node's
embedding over the whole graph, for their evaluation, is layerwise.py's).

- **Shares.** Each trainer takes an equal, contiguous share of the targets ordered by destination, so
  mostly destinations of one partition (the new ids run partition by partition), and every trainer
  takes the same number of steps, as the gradients' average needs.
- **Exclusion.** A batch's target pairs leave the graph its GNN samples (exclude self), with their
  reverses as well (reverse), or nothing leaves (none): the leak a model must not learn from.
"""

from __future__ import annotations

import numpy as np
import torch

from graphtrain.contract.spec import Exclude
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.loader import MiniBatch, pair_keys, sample_blocks
from graphtrain.runtime.train.dist import Dist


class EncoderAndHead(torch.nn.Module):
    """The encoder and the task's head on its embeddings (link prediction's decoder, edge
    classification's classifier, under that name) as one module: one gradient average (gradsync.py),
    one dense optimizer, one dense.pt. forward is the encoder's; the head's parameters are reached
    through its name (every parameter's gradient is averaged, wherever it was used)."""

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
