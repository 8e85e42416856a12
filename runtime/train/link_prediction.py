"""Link prediction with a GNN encoder and a pair decoder (task linkPrediction), as a TrainingTask of
the epoch loop: DistDGL's and GraphStorm's link prediction on a knowledge graph's triples.

- **Targets.** The training triples of task.targetRelations (every relation unset), from the partition
  (train/kge.load_kg): its graph holds the training triples only (and their reverses with
  graph.reverseEdges), the valid and test ones are kept beside it, so they never enter a sampled block.
  Each trainer takes an equal, contiguous share of the targets ordered by tail (pairs.share).
- **Negatives** (kge_math's draws) replace the tail (task.negativeSide tail, the default: DGL's and
  GraphStorm's samplers; better on gene-kg), or the head of half a batch and the tail of the rest
  (both: PyKEEN's and task kge's; better on WordNet): uniform (each positive its own), joint (one draw
  per chunk of positives), local (joint, from the nodes of the trainer's own partition; with fewer
  trainers than partitions, its equal run of them: own_nodes), inBatch (the
  batch's other tails). A negative equal to the positive's own entity is left out of its loss.
- **A batch** is every distinct endpoint and negative as the seeds of one sampled block set, so each
  node is embedded once; the batch's target pairs leave the graph it samples (task.exclude: self, or
  reverse as well; unset: reverse when graph.reverseEdges made every edge two-way).
- **Loss**: kge_math.loss on the decoder's scores (crossentropy: contrastive; softplus: binary
  cross-entropy; margin).
- **Evaluation**: every node's embedding with every neighbour, layer by layer (layerwise.py); then
  task kge's filtered ranking
  (realistic ranks, every known triple filtered) of each valid/test triple's head and tail against
  every entity, a seeded sample of kge.EVAL_MAX_TRIPLES of a large split, sums all-reduced.

A checkpoint keeps the encoder, the decoder and their optimizer (dense.pt) beside the shard servers'
tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from graphtrain.contract.spec import GraphTraining, LinkPredictionTask, NegativeSampler, NegativeSide, gnn
from graphtrain.runtime import arrays
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.fanouts import layer_fanouts
from graphtrain.runtime.graph.loader import MiniBatch
from graphtrain.runtime.models.decoders import Decoder
from graphtrain.runtime.partition.format import load_names
from graphtrain.runtime.train import kge_math
from graphtrain.runtime.train.dense import DenseTask
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.dist import Dist, epoch_seed, seed_everything
from graphtrain.runtime.train.encoder import GNNEncoder
from graphtrain.runtime.train.kge import eval_sample, load_kg
from graphtrain.runtime.train.layerwise import Layers, layerwise
from graphtrain.runtime.train.metrics import StageClock
from graphtrain.runtime.train.pairs import EncoderAndHead, exclusion, sample_without, share
from graphtrain.runtime.train.task import Split

REPORT_EVERY = 20
EVAL_QUERIES = 256  # triples ranked per evaluation batch
EVAL_SCORES = 1 << 24  # the mlp decoder's candidates per pass: queries x candidates x width floats


@dataclass
class LinkBatch:
    """Positive triples (B, 3), their negatives (kge_math's: (B, k, 3) uniform, (chunks, k) joint or
    local ids, (0,) inBatch), and the sampled blocks of every distinct node among them (`mb.seeds`,
    sorted: a node's row in the encoder's output is its searchsorted position)."""

    pos: torch.Tensor
    neg: torch.Tensor
    mb: MiniBatch


class GNNLinkPrediction(DenseTask):
    """A GNN encoder and a pair decoder on a knowledge graph's triples, as a TrainingTask (task.py)."""

    metric_names: tuple[str, ...] = ("mrr", "hits@1", "hits@3", "hits@10")
    report_every = REPORT_EVERY

    def __init__(self, gt: GraphTraining, graph: DistGraph, dist: Dist, device: torch.device | None = None):
        self.spec, self.graph, self.dist = gt.spec, graph, dist
        self.device = device or torch.device("cpu")
        m, tr = gnn(self.spec.model), self.spec.training
        task = self.spec.task.variant if self.spec.task is not None else None
        if not isinstance(task, LinkPredictionTask):
            raise GraphtrainError("task.kind: link prediction needs task linkPrediction")
        self.task = task
        seed_everything(tr.seed)  # the encoder's and decoder's initial weights follow training.seed
        self.kg = load_kg(graph)
        self.relations = self._target_relations(task.target_relations)
        self.exclude = exclusion(task.exclude, self.spec.graph.reverse_edges)
        # positives a batch puts on the head side: none (task.negativeSide tail), or kge_math's half
        self.heads: int | None = 0 if task.negative_side == NegativeSide.tail else None
        self.dim = m.hidden_dim  # the embedding's width: the encoder's output
        self.enc = GNNEncoder(self.spec, graph, self.device, m.hidden_dim)
        self.sparse_opts, self.collective_tables = self.enc.sparse_opts, self.enc.collective_tables
        decoder = Decoder(str(task.decoder), m.hidden_dim, self.kg.num_relations)
        model = EncoderAndHead(self.enc.module, "decoder", decoder)
        model = model.to(self.device)
        self.dense_parts(model, dist.world, str(tr.dense_optimizer), tr.dense_lr)
        self.decoder = decoder
        self.fanouts = layer_fanouts(tr.fanouts, tr.edge_type_fanouts, graph.canonical_etypes)
        self.batch_size = dist.share(tr.batch_size)
        self.targets = torch.from_numpy(share(self._of_relations(self.kg.train), 2, dist, "target triples"))
        self.own_nodes = self._own_nodes()
        self.filter = kge_math.FilterIndex(
            np.concatenate([self.kg.train, self.kg.valid, self.kg.test]),
            graph.num_nodes,
            self.kg.num_relations,
        )

    # ---------------------------------------------------------------------------------- targets

    def _target_relations(self, names: list[str] | None) -> np.ndarray | None:
        """The relation ids of task.targetRelations (None: every relation).

        Raises:
            GraphtrainError: a relation the knowledge graph lacks (naming the ones it has)."""
        if not names:
            return None
        known = load_names(self.graph.config, verify=False).get("relation_names")
        labels = (
            [str(r) for r in known] if known is not None else [str(i) for i in range(self.kg.num_relations)]
        )
        missing = [n for n in names if n not in labels]
        if missing:
            shown = ", ".join(labels[:12]) + (", ..." if len(labels) > 12 else "")
            raise GraphtrainError(f"task.targetRelations: no relation {missing[0]!r} (relations: {shown})")
        return np.asarray([labels.index(n) for n in names], dtype=np.int64)

    def _of_relations(self, triples: np.ndarray) -> np.ndarray:
        return triples if self.relations is None else triples[np.isin(triples[:, 1], self.relations)]

    def _own_nodes(self) -> tuple[int, int]:
        """[lo, hi) of the nodes of this trainer's partitions (sampler local draws there)."""
        return own_nodes(self.graph.book.bounds, self.dist.rank, self.dist.world)

    # ---------------------------------------------------------------------------------- batches

    def start(self, step: int, resumed: bool) -> None:
        self.enc.start(step)

    def steps_per_epoch(self) -> int:
        return -(-len(self.targets) // self.batch_size)

    def batches(self, epoch: int, start: int) -> Iterator[LinkBatch]:
        """This trainer's targets in the epoch's seeded order with their negatives from the same
        generator (drawn for the batches before `start` too, so the batches from there are a whole
        pass's); each batch's blocks sampled with its own seed."""
        tr = self.spec.training
        gen = torch.Generator().manual_seed(epoch_seed(tr.seed, self.dist.rank, epoch))
        order = torch.randperm(len(self.targets), generator=gen)
        b = self.batch_size
        for i in range(self.steps_per_epoch()):
            pos = self.targets[order[i * b : (i + 1) * b]]
            neg = self._negatives(pos, gen)
            if i >= start:
                seed = (tr.seed * 1_000_003 + self.dist.rank) * 1_000_003 + epoch * 100_003 + i
                yield LinkBatch(pos, neg, self._sample(pos, neg, seed % 2**31))

    def _negatives(self, pos: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        task, n = self.task, self.graph.num_nodes
        if task.sampler == NegativeSampler.uniform:
            return kge_math.corrupt(pos, task.negatives, n, gen, tails_only=self.heads == 0)
        if task.sampler == NegativeSampler.joint:
            return kge_math.joint_draw(len(pos), task.negatives, task.chunk, n, gen, heads=self.heads)
        if task.sampler == NegativeSampler.local:
            lo, hi = self.own_nodes
            return lo + kge_math.joint_draw(len(pos), task.negatives, task.chunk, hi - lo, gen, self.heads)
        return torch.empty(0, dtype=torch.int64)  # inBatch: the batch's own tails

    def _sample(self, pos: torch.Tensor, neg: torch.Tensor, seed: int) -> MiniBatch:
        """The blocks of every distinct endpoint and negative, without the batch's target pairs
        (and their reverses) as task.exclude says."""
        p = pos.numpy()
        n_ids = neg[..., [0, 2]].reshape(-1) if neg.dim() == 3 else neg.reshape(-1)
        seeds = arrays.unique(np.concatenate([p[:, 0], p[:, 2], n_ids.numpy()]))
        return sample_without(self.graph, seeds, (p[:, 0], p[:, 2]), self.exclude, self.fanouts, seed)

    # ---------------------------------------------------------------------------------- the step

    def step(self, batch: LinkBatch, clock: StageClock) -> tuple[torch.Tensor, int]:
        """Embed the batch's nodes (pull, forward), score its positives and negatives, the loss and its
        backward, the sparse gradients pushed, the dense step."""
        self.settle(clock)  # the last step's dense step, once its gradients' average is in
        mb, pos = batch.mb, batch.pos
        mb.blocks = to_device(mb.blocks, self.device)
        e = self.enc.pull(mb)
        if e is not None:
            clock.lap("pull")
        z = self.enc.forward(self.model, mb, e, self.enc.features(mb))
        seeds = torch.from_numpy(mb.seeds)
        row = lambda ids: to_device(torch.searchsorted(seeds, ids.contiguous()), self.device)  # noqa: E731
        h, t = z[row(pos[:, 0])], z[row(pos[:, 2])]
        r = self.decoder.relation(to_device(pos[:, 1], self.device))
        pos_s = self.decoder.score(h, r, t)
        neg_s = self._negative_scores(batch, z, row, (h, r, t))
        task = self.task
        loss = kge_math.loss(str(task.loss), pos_s, neg_s, task.margin)
        self.update(loss, clock)
        return loss, len(pos)

    def _negative_scores(
        self,
        batch: LinkBatch,
        z: torch.Tensor,
        row: Callable[[torch.Tensor], torch.Tensor],
        hrt: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor],
    ) -> torch.Tensor:
        """(B, k) scores of the negatives; a negative that is the positive's own entity scores -inf
        (no loss, no gradient)."""
        pos, neg, dec = batch.pos, batch.neg, self.decoder
        h, r, t = hrt
        if neg.dim() == 3:  # uniform: (B, k, 3) corrupted triples, the positive's other entity broadcast
            b, k = neg.shape[:2]
            if self.heads == 0:  # every tail replaced
                rows = z[row(neg[..., 2].reshape(-1))].view(b, k, -1)
                scores = dec.score(h.unsqueeze(1), None if r is None else r.unsqueeze(1), rows)
            else:
                rows = z[row(kge_math.replaced(neg).reshape(-1))].view(b, k, -1)
                scores = kge_math.sided_scores(dec.score, (h, r, t), rows)
            own = (neg[..., 0] == pos[:, :1]) & (neg[..., 2] == pos[:, 2:])  # never drawn: a guard
            return scores.masked_fill(to_device(own, self.device), float("-inf"))
        if neg.numel() == 0:  # inBatch: every tail of the batch, the positive's own left out
            scores = dec.tails(h, r, t)
            own = pos[:, 2:] == pos[:, 2].unsqueeze(0)
            return scores.masked_fill(to_device(own, self.device), float("-inf"))
        k, chunk = neg.shape[1], self.task.chunk
        rows = z[row(neg.reshape(-1))].view(-1, k, z.shape[1])
        rel = r if r is not None else torch.ones_like(h)  # dot: the relation-free product
        scores = kge_math.joint_scores(
            lambda rr, tt, ents: dec.heads(None if r is None else rr, tt, ents),
            lambda hh, rr, ents: dec.tails(hh, None if r is None else rr, ents),
            (h, rel, t),
            rows,
            chunk,
            heads=self.heads,
        )
        own = kge_math.own_entity(to_device(pos, self.device), to_device(neg, self.device), chunk, self.heads)
        return scores.masked_fill(own, float("-inf"))

    # ---------------------------------------------------------------------------------- evaluation

    def encode(self) -> Layers:
        """Every node's embedding with every neighbour, on the shard servers (layerwise.py)."""
        module = self.model.encoder
        return layerwise(self.enc, module, self.dist, gnn(self.spec.model).num_layers)

    def embed_all(self) -> torch.Tensor:
        """Every node's embedding (num_nodes, dim) on the host (what ranking against every candidate
        needs), once per model state (DenseTask.encoded)."""
        return self.encoded().everything()

    def eval_triples(self, split: Split) -> np.ndarray:
        """The split's triples of the target relations, or a seeded sample of EVAL_MAX_TRIPLES."""
        t = self._of_relations(self.kg.valid if split == "valid" else self.kg.test)
        return eval_sample(t, self.spec.training.seed)

    @torch.no_grad()
    def evaluate(self, split: Split) -> dict[str, float]:
        """Filtered MRR and Hits@1/3/10 over head and tail prediction against every entity."""
        ents = to_device(self.embed_all(), self.device)
        triples = self.eval_triples(split)
        lo = self.dist.rank * len(triples) // self.dist.world
        hi = (self.dist.rank + 1) * len(triples) // self.dist.world
        sums = rank_triples(self.decoder, ents, triples[lo:hi], self.filter, self.device)
        out = kge_math.RankSums.metrics(self.dist.sum(sums.as_list()))
        out["triples"] = float(len(triples))
        return out


def own_nodes(bounds: np.ndarray, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi) of the nodes of trainer `rank`'s partitions (the new ids run partition by partition,
    `bounds` their starts and the end): with at least as many trainers as partitions, the one partition
    rank * parts // world (trainer r beside it); with fewer, an equal run of whole partitions each, so
    every partition's nodes are some trainer's local negatives (a lone trainer over 2 partitions drew
    them from the first only: the second's nodes were never a negative)."""
    parts = len(bounds) - 1
    first = min(rank * parts // world, parts - 1)
    end = max((rank + 1) * parts // world, first + 1)
    return int(bounds[first]), int(bounds[end])


def rank_triples(
    decoder: Decoder,
    ents: torch.Tensor,
    triples: np.ndarray,
    index: kge_math.FilterIndex,
    device: torch.device,
) -> kge_math.RankSums:
    """The filtered ranks of each triple's tail (h, r, ?) and head (?, r, t) against every entity of
    `ents` (the mlp decoder's candidates in passes of at most EVAL_SCORES scores x width)."""
    sums = kge_math.RankSums()
    step = max(1, EVAL_SCORES // (EVAL_QUERIES * ents.shape[1])) if decoder.kind == "mlp" else len(ents)
    for i in range(0, len(triples), EVAL_QUERIES):
        t = triples[i : i + EVAL_QUERIES]
        h_ids, r_ids, t_ids = (to_device(torch.from_numpy(t[:, j]), device) for j in range(3))
        h, r, tt = ents[h_ids], decoder.relation(r_ids), ents[t_ids]
        scores = torch.cat([decoder.tails(h, r, ents[c : c + step]) for c in range(0, len(ents), step)], 1)
        sums.add(kge_math.filtered_ranks(scores, t_ids, *index.known("tail", t[:, 0], t[:, 1])))
        scores = torch.cat([decoder.heads(r, tt, ents[c : c + step]) for c in range(0, len(ents), step)], 1)
        sums.add(kge_math.filtered_ranks(scores, h_ids, *index.known("head", t[:, 2], t[:, 1])))
    return sums
