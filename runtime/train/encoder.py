"""A GNN's inputs and its module, as every task that encodes nodes needs them (node classification
reads class scores out of it, link prediction node embeddings): the graph's dense features, a feature
bag's learnable rows (model.featureBag), a node embedding (model.nodeEmbedding, over every node or over
some node types: inputs.node_input), their sparse optimizers, and the registered model built for the
input width and the output width the task asks for.

Features beside an embedding are passed apart (`split_inputs`), so backward computes no gradient for
them; a feature bag takes the features' place (it learns).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from graphtrain.contract.spec import DuplicateRule, GNNModel, GraphTrainingSpec, MixedPrecision, gnn
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph, FeatureBags
from graphtrain.runtime.graph.loader import MeanInput, MiniBatch
from graphtrain.runtime.models import GNNShape, gnn_entry
from graphtrain.runtime.models.graphsage import GraphSAGE
from graphtrain.runtime.models.layers import fitted
from graphtrain.runtime.models.padding import bf16_products, implicit_bf16, padded_blocks, row_bucket
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.partition.typed_ids import NodeRows
from graphtrain.runtime.tensor import DistEmbedding, DistTensor, PartitionBook
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.inputs import bag_input, node_input
from graphtrain.runtime.train.tables import Table, collective, embedding_table, table_init


class GNNEncoder:
    """The inputs of a spec's GNN over `graph` and the model (`module`), whose
    output is `out_dim` wide."""

    def __init__(
        self,
        spec: GraphTrainingSpec,
        graph: DistGraph,
        device: torch.device,
        out_dim: int,
        bare_output: bool = False,
    ):
        """`bare_output`: the task's loss reads the encoder's output with no GEMMs of its own (node
        classification), so its whole backward may run under bf16_products (see `implicit`)."""
        self.graph, self.device = graph, device
        m: GNNModel = gnn(spec.model)
        self.variant = m
        self.bag_combiner = str(m.feature_bag.combiner) if m.feature_bag is not None else None
        self.feat = graph.ndata.get("feat") if m.use_features and m.feature_bag is None else None
        if m.use_features and m.feature_bag is None and self.feat is None:
            raise GraphtrainError(
                "model.useFeatures is set but the partition holds no dense features "
                "(sparse ones need model.featureProjection or model.featureBag)"
            )
        tables = {t.name: t for t in spec.embeddings}
        self.emb: Table | None = None
        self.words: Table | None = None  # model.featureBag's table: a row per feature column
        opts = []
        if m.feature_bag is not None:
            self.bags = FeatureBags(graph.config)
            table = tables[m.feature_bag.embedding]
            book = PartitionBook.even(self.bags.num_columns, graph.client.num_shards)
            self.words = embedding_table(
                table, self.bags.num_columns, table_init(spec, table.name), book, graph.client, device
            )
            opts.append(SparseOptimizer([self.words], OptimConfig.from_spec(table)))
            # each word looked up once per batch, unless its gradients are averaged per occurrence
            self.per_word = table.duplicate_grads == DuplicateRule.sum
        if m.node_embedding:
            table = tables[m.node_embedding]
            # a row per node, or per node of the table's node types (typed_ids.py)
            self.emb_rows = NodeRows.of(graph.config.data, table.name, table.node_types)
            self.emb = embedding_table(
                table,
                self.emb_rows.num_rows,
                table_init(spec, table.name),
                PartitionBook(self.emb_rows.bounds),
                graph.client,
                device,
            )
            opts.append(SparseOptimizer([self.emb], OptimConfig.from_spec(table)))
        self.sparse_opts = opts
        self.collective_tables = collective([self.words, self.emb])  # in the order pull looks them up
        feat_dim = self.feat.shape[1] if self.feat is not None else 0
        in_dim = feat_dim + sum(t.dim for t in (self.words, self.emb) if t is not None)
        self.split_inputs = self.emb is not None and self.feat is not None
        shape = GNNShape(
            in_dim,
            out_dim,
            frozen=feat_dim if self.split_inputs else 0,
            num_relations=max(1, len(graph.canonical_etypes)),
            edge_dim=graph.edge_dim(),
        )
        self.module = gnn_entry(m.KIND).build(m, shape).to(device)
        self.bfloat16 = spec.training.mixed_precision == MixedPrecision.bfloat16
        # bfloat16 as float32 GEMMs done in bfloat16 on padded blocks, not under autocast (padding.py)
        self.implicit = implicit_bf16(
            self.bfloat16,
            device.type,
            getattr(self.module, "pads_blocks", False),
            bare_output,
            device.type == "cpu" and torch.cpu._is_amx_tile_supported(),
        )

        # the features reach a GraphSAGE input layer as its mean and destination rows (mean_input)
        self.reads_means = (
            device.type == "cpu"
            and isinstance(self.module, GraphSAGE)
            and isinstance(self.feat, DistTensor)
            and (not self.bfloat16 or self.implicit)  # autocast reads the rows themselves
        )

    def start(self, step: int) -> None:
        """The tables' step counts go on from the checkpoint's (their optimizers' bias correction)."""
        for table in (self.words, self.emb):
            if table is not None:
                table.steps = step

    def features(self, mb: MiniBatch) -> torch.Tensor | None:
        """The input features of a batch's input nodes, on the model's device (None without them)."""
        if self.feat is None:
            return None
        return to_device(self.feat[mb.input_nodes], self.device)

    def mean_input(self, mb: MiniBatch, feat: Table | None) -> MeanInput | None:
        """The batch's features as a GraphSAGE input layer on the host reads them: its destinations' rows
        and their mean over the sampled in-neighbours, summed from the shards' tables where every shard
        lies in this process or host (DistTensor.local_sums). A WordNet batch then copies out 3,745 rows
        and writes their means, rather than copying all 13,659 input rows and reading them again.
        Padded blocks (bf16_products) get their padded destination count, the added means zero.
        `feat`: the features' table as the calling thread reads it (the loader's has its own client).
        None where it does not apply: the caller pulls every input row."""
        block = mb.blocks[0] if mb.blocks else None
        if not self.reads_means or block is None or block.mean is None or not isinstance(feat, DistTensor):
            return None
        rows = min(row_bucket(block.num_dst), block.num_src) if self.implicit else block.num_dst
        mean = _local_mean(feat, mb, rows)
        if mean is None:
            return None
        return MeanInput(feat[mb.input_nodes[:rows]], mean)

    def emb_means(self, mb: MiniBatch) -> bool:
        """Whether a training batch's embedding reaches the input layer as its mean and destination rows,
        read where the rows lie (emb_mean), as the features do: a GraphSAGE on the host in float32 whose
        only learnable input is a server table of float32 rows over every node, mapped in this host. A
        WordNet 2x2 batch then copies out ~1,950 rows of 128 rather than ~7,400 (1.0 ms of a trainer's
        22 ms step)."""
        block = mb.blocks[0] if mb.blocks else None
        emb = self.emb
        return (
            self.device.type == "cpu"
            and isinstance(self.module, GraphSAGE)
            and not self.bfloat16
            and self.words is None
            and isinstance(emb, DistEmbedding)
            and emb.table.dtype == torch.float32
            and not emb.table.keyed
            and self.emb_rows.types is None
            and emb.direct_pieces() is None
            and torch.is_grad_enabled()
            and block is not None
            and block.mean is not None
            and block.mean_t is not None
        )

    def emb_mean(self, mb: MiniBatch) -> torch.Tensor | None:
        """The mean of the batch's embedding rows over each input-layer destination's sampled
        in-neighbours (emb_means), summed where the shards' rows lie; None where they do not."""
        assert isinstance(self.emb, DistEmbedding)
        return _local_mean(self.emb.table, mb, mb.blocks[0].num_dst)

    def emb_input(self, mb: MiniBatch, dst: torch.Tensor, mean: torch.Tensor) -> MeanInput:
        """The embedding as the input layer reads it (emb_means): its destinations' rows `dst`, their
        `mean`, and the leaf that takes the input nodes' gradient, which the step pushes."""
        assert isinstance(self.emb, DistEmbedding)
        return MeanInput(dst.float(), mean, self.emb.stand_in(torch.from_numpy(mb.input_nodes)))

    def pull(self, mb: MiniBatch, ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """The learnable input of the batch's input nodes: their feature bags, then their embedding rows
        (None without either). Collective tables are looked up in this order on every trainer.
        `ids`: the input nodes where the embedding looks them up, when that is not the host. The
        embedding's rows pulled with the batch's features are in mb.data["emb_rows"], when they were."""
        parts = []
        if self.words is not None:
            assert self.bag_combiner is not None
            parts.append(
                bag_input(
                    self.words, self.bags, mb.input_nodes, self.bag_combiner, self.device, self.per_word
                )
            )
        if self.emb is not None:
            pulled = mb.data.get("emb_rows")  # a server table over every node: the input nodes' rows
            if pulled is not None:
                given = ids if ids is not None else torch.from_numpy(mb.input_nodes)
                parts.append(to_device(self.emb(given, pulled), self.device))
            else:
                parts.append(node_input(self.emb, self.emb_rows, mb.input_nodes, self.device, ids))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def layer_inputs(self, mb: MiniBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(input, frozen) of the first layer for a batch's input nodes, as forward passes them."""
        e, x = self.pull(mb), self.features(mb)
        if e is None:
            assert x is not None
            return x, None
        return (e, x) if self.split_inputs else (e, None)

    def forward(
        self,
        model: torch.nn.Module,
        mb: MiniBatch,
        e: torch.Tensor | MeanInput | None,
        x: torch.Tensor | MeanInput | None,
    ) -> torch.Tensor:
        """The model's output for a batch's seeds from its features `x` and/or its learnable input `e`
        (`model`: the module)."""
        blocks = padded_blocks(mb.blocks) if self.implicit else mb.blocks
        with self.precision():
            if e is None:
                out = model(blocks, x)
            else:
                out = model(blocks, e, x) if self.split_inputs else model(blocks, e)
        if self.implicit:  # the seeds' rows: padded blocks add some
            out = fitted(out, mb.blocks[-1].num_dst)
        return out.float()  # the task's decoder and loss in float32 (a no-op without autocast)

    def precision(self) -> contextlib.AbstractContextManager:
        """training.mixedPrecision over a training forward: autocast, whose backward runs outside it in
        the dtypes autocast recorded (torch's recipe), or bf16_products (`implicit`), which the task's
        backward runs under too (`products`). Evaluation and inference (layerwise) stay float32."""
        if self.implicit:
            return bf16_products()
        if not self.bfloat16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def products(self) -> contextlib.AbstractContextManager:
        """What a training step's backward runs under: bf16_products when the forward did."""
        return bf16_products() if self.implicit else contextlib.nullcontext()

    def idle_lookups(self, rounds: int) -> None:
        """Take part in `rounds` collective lookups with no batch (a trainer with fewer evaluation batches
        than another: a collective table's lookups pair up across trainers)."""
        for _ in range(rounds):
            for table in self.collective_tables:
                table.gather(torch.empty(0, dtype=torch.int64, device=self.device))


def _local_mean(table: DistTensor, mb: MiniBatch, rows: int) -> torch.Tensor | None:
    """`rows` rows of the input layer's mean of `table`'s rows (block.mean over the batch's input nodes;
    rows past the block's destinations, padded_blocks' additions, have no in-edges: zeros), summed where
    the shards' rows lie (DistTensor.local_sums); None where they do not."""
    block = mb.blocks[0]
    assert block.mean is not None
    crow = block.mean.crow_indices().numpy()
    if rows > block.num_dst:
        crow = np.concatenate([crow, np.full(rows - block.num_dst, crow[-1])])
    ids = mb.input_nodes[block.mean.col_indices().numpy()]
    return table.local_sums(crow, ids, block.mean.values().numpy())
