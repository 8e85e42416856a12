"""GraphSAGE node classification over a DistGraph, with node features and/or a learnable node embedding:
a TrainingTask of the epoch loop (loop.py runs its epochs, reports, checkpoints and early stopping).
Sparse features may instead be read through a learnable table (model.featureBag, inputs.py): each input
node's nonzero columns as one bag, combined by mean or sum, beside the node embedding. A node
embedding over some node types of a typed graph (embeddings[].nodeTypes) gives their nodes its rows
and the others zeros (inputs.node_input).

Each trainer takes its node_split of the training nodes; a NeighborLoader samples blocks and pulls the
input features and labels (on a background thread with training.prefetch, over its own client), while
the main thread pulls the embedding rows (they take part in autograd), runs the model, steps the dense
optimizer (gradients averaged over the trainers: gradsync.py) and the sparse one (deduplicated pushes to
the shard servers). Evaluation uses every neighbour (no sampling), layer by layer over the whole graph
(layerwise.py, which `graphtrain infer` runs too), each trainer counting its share of the nodes. A
checkpoint keeps the dense model and its optimizer (dense.pt) beside the shard servers' tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import torch

from graphtrain.contract.spec import GraphTraining, NodeClassificationTask, gnn
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph, NeighborLoader, node_split
from graphtrain.runtime.graph.device_data import data_bytes, device_node_data
from graphtrain.runtime.graph.device_sampler import device_graph, sample_blocks_on
from graphtrain.runtime.graph.fanouts import layer_fanouts
from graphtrain.runtime.graph.loader import MeanInput, MiniBatch
from graphtrain.runtime.graph.split import mask_ids
from graphtrain.runtime.kvstore.client.kvclient import KVClient
from graphtrain.runtime.partition.format import load_names
from graphtrain.runtime.storage.placement import free_bytes
from graphtrain.runtime.tensor import DistEmbedding, DistTensor, pull_together
from graphtrain.runtime.train import captured_sage
from graphtrain.runtime.train.captured_sage import CapturedSage
from graphtrain.runtime.train.dense import DenseTask
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.dist import Dist, seed_everything
from graphtrain.runtime.train.encoder import GNNEncoder
from graphtrain.runtime.train.layerwise import Layers, layerwise
from graphtrain.runtime.train.metrics import StageClock
from graphtrain.runtime.train.reporter import log
from graphtrain.runtime.train.tables import Table
from graphtrain.runtime.train.task import Split

REPORT_EVERY = 20


def target_types(task: Any, graph: DistGraph) -> np.ndarray | None:
    """The node type ids whose labelled nodes are trained and evaluated (task.targetNodeTypes); None:
    every node with a label.

    Raises:
        GraphtrainError: a target type the graph lacks, or target types on an untyped graph.
    """
    variant = task.variant if task is not None else NodeClassificationTask()
    names = getattr(variant, "target_node_types", None)
    if not names:
        return None
    if not graph.typed:
        raise GraphtrainError("task.targetNodeTypes: the graph has no node types (graph.typed, graph.nodes)")
    unknown = [t for t in names if t not in graph.ntype_names]
    if unknown:
        raise GraphtrainError(
            f"task.targetNodeTypes: no node type {unknown[0]!r} (node types: {', '.join(graph.ntype_names)})"
        )
    return np.asarray([graph.ntype_names.index(t) for t in names], dtype=np.int64)


class NodeClassification(DenseTask):
    """GraphSAGE on a graph's labelled nodes, as a TrainingTask of the epoch loop (task.py).
    `loader_client`: the loader's own connection to the shard servers (its thread fetches while the
    model computes). `device`: where the model computes (train/device.py): the loader thread copies each
    batch's blocks, features and labels there; the embedding rows follow after the pull."""

    metric_names: tuple[str, ...] = ("accuracy",)
    report_every = REPORT_EVERY

    def __init__(
        self,
        gt: GraphTraining,
        graph: DistGraph,
        loader_client: KVClient,
        dist: Dist,
        device: torch.device | None = None,
    ):
        self.spec, self.graph, self.dist = gt.spec, graph, dist
        self.device = device or torch.device("cpu")
        m, tr = gnn(self.spec.model), self.spec.training
        seed_everything(tr.seed)  # the model's initial weights follow training.seed
        if graph.num_classes is None or "label" not in graph.ndata:
            raise GraphtrainError(
                f"task nodeClassification ({m.KIND}) needs node labels: the graph has none (graph.labels)"
            )
        self.label = graph.ndata["label"]
        self.enc = GNNEncoder(self.spec, graph, self.device, int(graph.num_classes), bare_output=True)
        self.products = self.enc.products
        self.feat, self.emb, self.words = self.enc.feat, self.enc.emb, self.enc.words
        self.sparse_opts, self.collective_tables = self.enc.sparse_opts, self.enc.collective_tables
        self.dense_parts(self.enc.module, dist.world, str(tr.dense_optimizer), tr.dense_lr)
        self.targets = target_types(self.spec.task, graph)
        self.fanouts = layer_fanouts(tr.fanouts, tr.edge_type_fanouts, graph.canonical_etypes)
        self.train_ids = self._split("train")
        self.loader_graph = DistGraph(graph.config, loader_client)
        # the whole graph on this trainer's GPU when it samples there (training.sampler)
        efeat = graph.edata.get("efeat") if graph.typed else None
        on_device = device_graph(
            str(tr.sampler), self.device, loader_client, graph.num_nodes, graph.typed, efeat
        )
        if on_device is not None and dist.rank == 0:
            log(
                f"[trainer] sampling on {on_device.device}: the graph's {len(on_device.indices):,} edges "
                f"copied there (training.sampler {tr.sampler})"
            )
        # features and labels whole beside the graph, when it is there: a batch's inputs, one gather
        self.node_data: dict[str, torch.Tensor] = {}
        if on_device is not None:
            self.node_data = device_node_data(
                {"feat": self.feat, "label": self.label},
                graph.num_nodes,
                on_device.device,
                free_bytes(on_device.device),  # on the host too: it is a copy beside the shards' rows
            )
            if self.node_data and dist.rank == 0:
                log(
                    f"[trainer] node data on {on_device.device}: {', '.join(self.node_data)} "
                    f"({data_bytes(self.node_data):,} bytes) copied there"
                )
        self.loader = NeighborLoader(
            self.loader_graph,
            self.train_ids,
            self.fanouts,
            dist.share(tr.batch_size),
            seed=tr.seed + dist.rank,
            fetch=self._fetch,
            prefetch=tr.prefetch,
            sampler=partial(sample_blocks_on, on_device) if on_device else None,
            device=self.device,
        )
        # training.cudaGraph: full batches packed at a fixed capacity and replayed (captured_sage.py)
        self.captured: CapturedSage | None = None
        if tr.cuda_graph:
            why = captured_sage.refusal(self)
            if why:
                raise GraphtrainError(f"training.cudaGraph: {why}")
            self.captured = CapturedSage(self)

    # -------------------------------------------------------------------------------- batches

    def _fetch(self, mb: MiniBatch) -> None:
        """Runs on the loader thread: input features and labels of the next batch (gathered on the
        device where the node data is there, else pulled and copied up)."""
        if mb.input_device is not None and self.node_data:
            if self.feat is not None:
                mb.data["x"] = self.node_data["feat"].index_select(0, mb.input_device)
            mb.data["y"] = self.node_data["label"].index_select(0, mb.input_device[: len(mb.seeds)])
        elif self._rows_ahead():
            # inline (prefetch 0): this is the training thread, after the last step's pushes were sent.
            # Features, labels and embedding rows in one exchange, on the client the pushes went by, so
            # the rows are the ones the step's own pull would read (one round trip per shard, not two)
            assert isinstance(self.emb, DistEmbedding) and self.label is not None
            means = self._mean_input(mb, self.feat)
            pulled = [self.feat] if self.feat is not None and means is None else []
            tables = [self.label, self.emb.table, *pulled]
            # the embedding read as the features are, where it can be: its destinations' rows only
            emb_means = self.captured is None and self.enc.emb_means(mb)
            emb_ids = mb.input_nodes[: mb.blocks[0].num_dst] if emb_means else mb.input_nodes
            got = pull_together(tables, [mb.seeds, emb_ids] + [mb.input_nodes] * len(pulled))
            mb.data["y"], mb.data["emb_rows"] = to_device(got[0], self.device), got[1]
            if emb_means:  # after the pull, which waited for this trainer's pushes in flight
                mean = self.enc.emb_mean(mb)
                if mean is not None:
                    mb.data["emb_mean"] = mean
                else:  # not all mapped here after all: every input row, as below
                    mb.data["emb_rows"] = self.emb.table.pull(mb.input_nodes)
            if self.feat is not None:
                mb.data["x"] = means if means is not None else to_device(got[2], self.device)
        else:
            g = self.loader_graph
            if self.feat is not None:
                feat = g.ndata["feat"]
                means = self._mean_input(mb, feat)
                mb.data["x"] = means if means is not None else to_device(feat[mb.input_nodes], self.device)
            mb.data["y"] = to_device(g.ndata["label"][mb.seeds], self.device)
        mb.blocks = to_device(mb.blocks, self.device)

    def _mean_input(self, mb: MiniBatch, feat: Any) -> MeanInput | None:
        """The features as the input layer's mean and destination rows, read from `feat` (this thread's
        view of the table: GNNEncoder.mean_input), but not for a captured step (it copies the rows into
        its fixed buffers)."""
        return None if self.captured is not None else self.enc.mean_input(mb, feat)

    def _rows_ahead(self) -> bool:
        """Whether a batch's embedding rows are pulled with its features and labels (_fetch): batches
        made inline, a server table over every node, whose rows cross a socket or shared memory."""
        emb = self.emb
        return (
            self.spec.training.prefetch == 0
            and isinstance(emb, DistEmbedding)
            and emb.direct_pieces() is None
            and not emb.table.keyed
            and self.enc.emb_rows.types is None
            and isinstance(self.label, DistTensor)
            and (self.feat is None or isinstance(self.feat, DistTensor))
            and all(t.client is emb.client for t in (self.label, self.feat) if t is not None)
        )

    def _ids(self, table: Table, mb: MiniBatch) -> torch.Tensor:
        """The batch's input nodes where `table` looks them up: the device's copy when its rows are on
        the model's device (no upload), else the host's."""
        if mb.input_device is not None and table.device == mb.input_device.device == self.device:
            return mb.input_device
        return torch.from_numpy(mb.input_nodes)

    def _pull(self, mb: MiniBatch) -> torch.Tensor | MeanInput | None:
        """The learnable input of the batch's input nodes (encoder.pull), the embedding's rows looked up
        on the device when they are there; or the embedding as its mean and destination rows, when
        _fetch read it so (encoder.emb_means)."""
        if "emb_mean" in mb.data:
            return self.enc.emb_input(mb, mb.data["emb_rows"], mb.data["emb_mean"])
        emb = self.emb
        ids = self._ids(emb, mb) if emb is not None and self.enc.emb_rows.types is None else None
        return self.enc.pull(mb, ids)

    def _model_forward(
        self,
        model: torch.nn.Module,
        mb: MiniBatch,
        e: torch.Tensor | MeanInput | None,
        x: torch.Tensor | MeanInput | None,
    ) -> torch.Tensor:
        """Class scores of a batch from its features `x` and/or its embedding rows `e`."""
        return self.enc.forward(model, mb, e, x)

    # ------------------------------------------------------------------------------- training

    def start(self, step: int, resumed: bool) -> None:
        """The tables' step counts go on from the checkpoint's (their optimizers' bias correction)."""
        self.enc.start(step)

    def steps_per_epoch(self) -> int:
        return len(self.loader)

    def batches(self, epoch: int, start: int) -> Iterator[MiniBatch]:
        return self.loader.batches(epoch, start)

    def step(self, mb: MiniBatch, clock: StageClock) -> tuple[torch.Tensor, int]:
        """The embedding rows of the batch (stage pull), the model, its loss and backward, and the dense
        step (forward_backward, in two pieces); the sparse gradients pushed between them (push). With
        training.cudaGraph a full batch within the capacity is one replay (captured_sage.py): one stage."""
        if self.captured is not None:
            done = self.captured.step(mb, clock)
            if done is not None:
                return done
        self.settle(clock)  # the last step's dense step, once its gradients' average is in
        e = self._pull(mb)
        if e is not None:
            clock.lap("pull")
        logits = self._model_forward(self.model, mb, e, mb.data.get("x"))
        loss = torch.nn.functional.cross_entropy(logits, mb.data["y"])
        self.update(loss, clock)
        return loss, len(mb.seeds)

    def encode(self) -> Layers:
        """Every node's class scores with every neighbour, layer by layer (layerwise.py)."""
        self.check_pending()
        return layerwise(self.enc, self.model, self.dist, gnn(self.spec.model).num_layers)

    def check_pending(self) -> None:
        """Raise for what the last captured step flagged (read a step late: optim/late.py)."""
        if self.captured is not None:
            self.captured.settle()

    @torch.no_grad()
    def evaluate(self, split: Split) -> dict[str, float]:
        """Accuracy on `split`: every node's scores with every neighbour (layerwise.py, what `graphtrain
        infer` predicts with), each trainer counting the split's nodes of its share, summed."""
        layers = self.encoded()
        ids = self.in_share(split, layers.lo, layers.hi)
        pred = layers.mine[torch.from_numpy(ids - layers.lo)].argmax(1)
        correct = int((pred == self.label[ids]).sum())
        total_correct, total = self.dist.sum([correct, len(ids)])
        return {"accuracy": total_correct / max(total, 1)}

    def outputs(self, layers: Layers) -> dict[str, Any]:
        """The inference columns of this trainer's nodes: the predicted class and each class'
        probability, and the last hidden layer's output as the embedding (predict --embeddings')."""
        probs = torch.softmax(layers.mine, 1).numpy()
        names = load_names(self.graph.config, verify=False)
        classes = names.get("class_names", np.arange(probs.shape[1]))
        cols: dict[str, Any] = {"predicted": classes[probs.argmax(1)]}
        cols.update({f"p_{c}": probs[:, j] for j, c in enumerate(classes.tolist())})
        if len(layers.tensors) >= 2:
            cols["embedding"] = layers.rows(len(layers.tensors) - 2, layers.lo, layers.hi).numpy()
        return cols

    def in_share(self, split: Split, lo: int, hi: int) -> np.ndarray:
        """The nodes of `split` (train, valid, test) of the target node types in [lo, hi)."""
        ids = mask_ids(self.graph.config, "val" if split == "valid" else split)
        ids = ids[(ids >= lo) & (ids < hi)]
        if self.targets is None:
            return ids
        return ids[np.isin(self.graph.node_types(ids), self.targets)]

    def _split(self, mask: str) -> np.ndarray:
        """This trainer's share of the nodes of `mask` (train, val, test) of the target node types."""
        ids = node_split(self.graph.config, mask, self.dist.rank, self.dist.world)
        if self.targets is None:
            return ids
        return ids[np.isin(self.graph.node_types(ids), self.targets)]
