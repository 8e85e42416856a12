"""Edge classification and regression with a GNN encoder and a pair classifier (tasks
edgeClassification, edgeRegression), as a TrainingTask of the epoch loop: GraphStorm's edge
classification and regression.

- **Targets.** The labelled edges of the partition (partition/edge_targets.py), split train/valid/test
  by graph.split. Every labelled edge is an edge of the graph (its label is not): each trainer takes an
  equal, contiguous share of the training edges ordered by destination (pairs.share).
- **A batch** is every distinct endpoint of its edges as the seeds of one sampled block set, without
  the batch's own edges (task.exclude: self, or reverse as well; unset: reverse when graph.reverseEdges
  made every edge two-way), so an edge's own features do not reach the embeddings that classify it.
- **Loss**: cross-entropy of the PairClassifier's class scores (models/decoders.py); regression: its
  one output's mean squared error against the label's number.
- **Evaluation**: every node's embedding with every neighbour (layerwise.py), then the class (the
  number) of each of this trainer's share of the split's edges; accuracy (RMSE, lower is better)
  from sums over trainers.

A checkpoint keeps the encoder, the classifier and their optimizer (dense.pt) beside the shard
servers' tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from graphtrain.contract.spec import EdgeClassificationTask, EdgeRegressionTask, GraphTraining, gnn
from graphtrain.runtime import arrays
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.fanouts import layer_fanouts
from graphtrain.runtime.graph.loader import MiniBatch
from graphtrain.runtime.models.decoders import PairClassifier
from graphtrain.runtime.partition import load_maps
from graphtrain.runtime.partition.edge_targets import load_edge_targets
from graphtrain.runtime.train.dense import DenseTask
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.dist import Dist, epoch_seed, seed_everything
from graphtrain.runtime.train.edge_outputs import edge_columns
from graphtrain.runtime.train.encoder import GNNEncoder
from graphtrain.runtime.train.layerwise import Layers, layerwise
from graphtrain.runtime.train.metrics import StageClock
from graphtrain.runtime.train.pairs import EncoderAndHead, exclusion, sample_without, share
from graphtrain.runtime.train.task import Split

REPORT_EVERY = 20
EVAL_EDGES = 65536  # edges classified per evaluation pass


@dataclass
class EdgeBatch:
    """Labelled edges (B, 4) (source, edge type, destination, class; regression: the index of the
    edge's number) and the sampled blocks of their
    distinct endpoints (`mb.seeds`, sorted: a node's row in the encoder's output is its position)."""

    edges: torch.Tensor
    mb: MiniBatch


class GNNEdgeClassification(DenseTask):
    """A GNN encoder and a pair classifier (one output: a regressor) on the graph's labelled edges, as a
    TrainingTask (task.py)."""

    report_every = REPORT_EVERY

    def __init__(self, gt: GraphTraining, graph: DistGraph, dist: Dist, device: torch.device | None = None):
        self.spec, self.graph, self.dist = gt.spec, graph, dist
        self.device = device or torch.device("cpu")
        m, tr = gnn(self.spec.model), self.spec.training
        task = self.spec.task.variant if self.spec.task is not None else None
        if not isinstance(task, EdgeClassificationTask | EdgeRegressionTask):
            raise GraphtrainError("task.kind: edge tasks need task edgeClassification or edgeRegression")
        self.regression = isinstance(task, EdgeRegressionTask)
        self.metric_names = ("rmse",) if self.regression else ("accuracy",)
        self.lower_is_better = self.regression
        seed_everything(tr.seed)  # the encoder's and classifier's initial weights follow training.seed
        self.edges, self.values, self.num_classes, self.class_names = self._load(graph)
        num_classes = 1 if self.regression else self.num_classes
        self.exclude = exclusion(task.exclude, self.spec.graph.reverse_edges)
        self.dim = m.hidden_dim
        self.enc = GNNEncoder(self.spec, graph, self.device, m.hidden_dim)
        self.sparse_opts, self.collective_tables = self.enc.sparse_opts, self.enc.collective_tables
        classifier = PairClassifier(m.hidden_dim, max(1, len(graph.canonical_etypes)), num_classes)
        model = EncoderAndHead(self.enc.module, "classifier", classifier).to(self.device)
        self.dense_parts(model, dist.world, str(tr.dense_optimizer), tr.dense_lr)
        self.classifier = classifier
        self.fanouts = layer_fanouts(tr.fanouts, tr.edge_type_fanouts, graph.canonical_etypes)
        self.batch_size = dist.share(tr.batch_size)
        self.targets = torch.from_numpy(share(self.edges["train"], 2, dist, "labelled training edges"))

    def _load(
        self, graph: DistGraph
    ) -> tuple[dict[str, np.ndarray], dict[str, torch.Tensor], int, np.ndarray | None]:
        """The labelled edges per split in the partition's node ids, their numbers (regression: the
        last column then indexes them), the class count and the class names (None: the labels are
        the class indices).

        Raises:
            GraphtrainError: regression on labels that are not all numbers."""
        found = load_edge_targets(graph.config, verify=True)  # small; a changed file fails here, named
        if self.regression and not found.values:
            raise GraphtrainError("task edgeRegression: a label of the graph's edges is not a number")
        new = load_maps(graph.config, verify=False)["node_map_inverse"]
        out, values = {}, {}
        for split in ("train", "valid", "test"):
            rows = found.rows.get(split, np.empty((0, 4), np.int64))
            last = np.arange(len(rows), dtype=np.int64) if self.regression else rows[:, 3]
            out[split] = np.stack([new[rows[:, 0]], rows[:, 1], new[rows[:, 2]], last], 1).astype(np.int64)
            values[split] = torch.from_numpy(found.values.get(split, np.empty(0, np.float32)))
        return out, values, found.num_classes, found.class_names

    # ---------------------------------------------------------------------------------- batches

    def start(self, step: int, resumed: bool) -> None:
        self.enc.start(step)

    def steps_per_epoch(self) -> int:
        return -(-len(self.targets) // self.batch_size)

    def batches(self, epoch: int, start: int) -> Iterator[EdgeBatch]:
        """This trainer's edges in the epoch's seeded order, each batch's blocks sampled with its own
        seed (the batches before `start` skipped: a resumed epoch goes on as a whole pass)."""
        tr = self.spec.training
        gen = torch.Generator().manual_seed(epoch_seed(tr.seed, self.dist.rank, epoch))
        order = torch.randperm(len(self.targets), generator=gen)
        b = self.batch_size
        for i in range(start, self.steps_per_epoch()):
            edges = self.targets[order[i * b : (i + 1) * b]]
            seed = (tr.seed * 1_000_003 + self.dist.rank) * 1_000_003 + epoch * 100_003 + i
            yield EdgeBatch(edges, self._sample(edges.numpy(), seed % 2**31))

    def _sample(self, edges: np.ndarray, seed: int) -> MiniBatch:
        seeds = arrays.unique(np.concatenate([edges[:, 0], edges[:, 2]]))
        return sample_without(self.graph, seeds, (edges[:, 0], edges[:, 2]), self.exclude, self.fanouts, seed)

    # ---------------------------------------------------------------------------------- the step

    def step(self, batch: EdgeBatch, clock: StageClock) -> tuple[torch.Tensor, int]:
        """Embed the batch's endpoints (pull, forward), classify its edges, the loss and its backward,
        the sparse gradients pushed, the dense step."""
        self.settle(clock)  # the last step's dense step, once its gradients' average is in
        mb, edges = batch.mb, batch.edges
        mb.blocks = to_device(mb.blocks, self.device)
        e = self.enc.pull(mb)
        if e is not None:
            clock.lap("pull")
        z = self.enc.forward(self.model, mb, e, self.enc.features(mb))
        seeds = torch.from_numpy(mb.seeds)
        src = to_device(torch.searchsorted(seeds, edges[:, 0].contiguous()), self.device)
        dst = to_device(torch.searchsorted(seeds, edges[:, 2].contiguous()), self.device)
        scores = self.classifier(z[src], to_device(edges[:, 1], self.device), z[dst])
        if self.regression:
            target = to_device(self.values["train"][edges[:, 3]], self.device)
            loss = nn.functional.mse_loss(scores.squeeze(1), target)
        else:
            loss = nn.functional.cross_entropy(scores, to_device(edges[:, 3], self.device))
        self.update(loss, clock)
        return loss, len(edges)

    # ---------------------------------------------------------------------------------- evaluation

    def encode(self) -> Layers:
        """Every node's embedding with every neighbour, on the shard servers (layerwise.py)."""
        module = self.model.encoder
        return layerwise(self.enc, module, self.dist, gnn(self.spec.model).num_layers)

    @torch.no_grad()
    def scores(self, layers: Layers, edges: np.ndarray) -> torch.Tensor:
        """Each (source, edge type, destination) row of `edges`: its class probabilities (regression:
        its number, one column), from the node embeddings of `layers` (their endpoints' rows pulled),
        in passes of EVAL_EDGES."""
        out = [torch.empty(0, 1 if self.regression else self.num_classes)]
        for i in range(0, len(edges), EVAL_EDGES):
            part = torch.from_numpy(edges[i : i + EVAL_EDGES])
            zs, zd = (to_device(layers.last[part[:, j]], self.device) for j in (0, 2))
            scores = self.classifier(zs, to_device(part[:, 1], self.device), zd)
            out.append((scores if self.regression else torch.softmax(scores, 1)).float().cpu())
        return torch.cat(out)

    def predict(self, layers: Layers, edges: np.ndarray) -> torch.Tensor:
        """The predicted class (regression: number) of each row of `edges` (scores)."""
        scores = self.scores(layers, edges)
        return scores[:, 0] if self.regression else scores.argmax(1)

    def edge_outputs(self, layers: Layers) -> dict[str, np.ndarray]:
        """The inference columns of the labelled edge types' edges into this trainer's nodes
        (edge_outputs.py)."""
        return edge_columns(self, layers)

    def evaluate(self, split: Split) -> dict[str, float]:
        """Accuracy (RMSE) on the split's labelled edges, each trainer a share, from sums."""
        layers = self.encoded()
        edges = self.edges[split]
        lo = self.dist.rank * len(edges) // self.dist.world
        hi = (self.dist.rank + 1) * len(edges) // self.dist.world
        mine = edges[lo:hi]
        predicted = self.predict(layers, mine)
        if self.regression:
            error = float(((predicted - self.values[split][mine[:, 3]]) ** 2).sum())
            total_error, total = self.dist.sum([error, len(mine)])
            return {"rmse": (total_error / max(total, 1)) ** 0.5}
        correct = int((predicted == torch.from_numpy(mine[:, 3])).sum())
        total_correct, total = self.dist.sum([correct, len(mine)])
        return {"accuracy": total_correct / max(total, 1)}
