"""Knowledge-graph embedding training (TransE, DistMult, ComplEx, RotatE) with entity and relation
DistEmbeddings.

Each trainer takes its edge_split of the training triples (the in-edges of the partitions, so mostly
triples whose tail its own shard holds), draws `task.negatives` corruptions per positive (or, with the
joint sampler, one shared set per chunk of positives: kge_math.joint_draw), pulls the unique entity rows
of the batch once (one request per owning shard) and pushes their deduplicated gradients to the servers,
where the sparse optimizer runs while the next batch is drawn (the next pull waits for it); a table
whose optimizer steps every row (optimizer.rows: all, as PyKEEN's dense Adam) is read and pushed whole,
zeros where the batch had none. TransE's and DistMult's entity rows
are kept on the unit sphere (the row_norm constraint of the optimizer config, as PyKEEN normalises them
after each step) and both tables start there; ComplEx's rows and RotatE's entities are free, and RotatE's
relation elements stay unit complex numbers (the unit_complex constraint), as in PyKEEN (models/: each
entry's unit_rows and unit_relations). There are no dense parameters, so no gradient average.
LinkPrediction is a TrainingTask of the epoch loop (loop.py runs its epochs, reports, checkpoints and
early stopping); an epoch's triples come in a seeded order, their negatives from the same generator.

Evaluation ranks the true head and tail of each valid/test triple against every entity, filtered by
all known triples, each trainer on its share of the queries, sums all-reduced. Large graphs are
evaluated on a seeded sample of EVAL_MAX_TRIPLES triples (gene-kg has 113k test triples against
877k entities), reported as such (`*_triples` in the result). The validation filtered MRR picks the best
epoch (its checkpoint marked BEST) and drives early stopping; the test metrics are the last model's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from graphtrain.contract.spec import GraphTraining, KGETask, NegativeSampler, RowsStepped, kge
from graphtrain.runtime import arrays
from graphtrain.runtime.data.graph import KnowledgeGraph
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph, edge_split
from graphtrain.runtime.models import kge_entry
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.optim.functional import unit_complex
from graphtrain.runtime.optim.late import LateFlags
from graphtrain.runtime.partition import load_maps, load_triples
from graphtrain.runtime.tensor import PartitionBook
from graphtrain.runtime.train import graphed, kge_math
from graphtrain.runtime.train.device import to_device
from graphtrain.runtime.train.dist import Dist, epoch_seed, seed_everything
from graphtrain.runtime.train.graphed import GraphedStep
from graphtrain.runtime.train.metrics import StageClock
from graphtrain.runtime.train.tables import Table, collective, embedding_table, normalise_rows, table_init
from graphtrain.runtime.train.task import Split

REPORT_EVERY = 50
EVAL_MAX_TRIPLES = 2000  # the standard splits ranked whole, as PyKEEN ranks them (Kinships: 1,074)
EVAL_BATCH = 256
PULL_CHUNK = 262_144


def load_kg(graph: DistGraph) -> KnowledgeGraph:
    """The knowledge graph's train/valid/test triples in the partition's new entity ids, from the
    partition itself (it keeps every split beside the training graph: a trainer reads no dataset and
    no input file, so it needs neither the data directory nor the user's files).

    Raises:
        GraphtrainError: the partition holds no triples (not made from a knowledge graph, or by a
            graphtrain before the splits were kept there).
    """
    cfg = graph.config
    meta = cfg.data.get("kg")
    if not meta:
        raise GraphtrainError(
            f"{cfg.path}: the partition holds no knowledge-graph triples (it was made from a graph, or by an "
            "older graphtrain): partition the spec's graph again"
        )
    triples = load_triples(cfg, verify=False)
    new = load_maps(cfg, verify=False)["node_map_inverse"]

    def relabel(t: np.ndarray) -> np.ndarray:
        return np.stack([new[t[:, 0]], t[:, 1], new[t[:, 2]]], 1).astype(np.int64)

    return KnowledgeGraph(
        name=str(cfg.data.get("graph_name", "graph")),
        num_entities=graph.num_nodes,
        num_relations=int(meta["num_relations"]),
        train=relabel(triples["train"]),
        valid=relabel(triples["valid"]),
        test=relabel(triples["test"]),
    )


def eval_sample(triples: np.ndarray, seed: int) -> np.ndarray:
    """`triples`, or a seeded sample of EVAL_MAX_TRIPLES of them in their order (a large split)."""
    if len(triples) <= EVAL_MAX_TRIPLES:
        return triples
    keep = np.random.default_rng(seed).choice(len(triples), EVAL_MAX_TRIPLES, replace=False)
    return triples[np.sort(keep)]


class Triples(NamedTuple):
    """A batch: positive triples (B, 3) and their negatives' entity ids: with the uniform sampler (B,
    negatives), each the entity its corruption puts in the positive's place (kge_math.corrupt_ids); with the
    joint one (chunks, negatives) shared by each chunk (kge_math.joint_draw)."""

    pos: torch.Tensor
    neg: torch.Tensor


def _every(count: int, like: torch.Tensor) -> torch.Tensor:
    """Ids 0..count-1 where `like` is: a whole table's rows (optimizer.rows: all)."""
    return torch.arange(count, dtype=torch.int64, device=like.device)


def _lookup(ids: torch.Tensor, whole: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows to read, each id's position among them): the distinct ids, or with `whole` every row of a
    table of `whole` rows (its ids are then their own positions). On the host the distinct ids are
    numpy's sort's (arrays.unique_inverse: torch.unique's intra-op sort was 7.6 % of a gene-kg step)."""
    if whole is None and ids.device.type == "cpu":
        uniq, inverse = arrays.unique_inverse(ids.numpy())
        return torch.from_numpy(uniq), torch.from_numpy(inverse)
    if whole is None:
        uniq, inverse = torch.unique(ids, return_inverse=True)
        return uniq, inverse
    return _every(whole, ids), ids


class LinkPrediction:
    """A knowledge-graph embedding model, as a TrainingTask of the epoch loop (task.py)."""

    metric_names: tuple[str, ...] = ("mrr", "hits@1", "hits@3", "hits@10")
    report_every = REPORT_EVERY

    def __init__(self, gt: GraphTraining, graph: DistGraph, dist: Dist, device: torch.device | None = None):
        self.device = device or torch.device("cpu")  # where scores are computed (train/device.py)
        self.spec, self.graph, self.dist = gt.spec, graph, dist
        m, tr = kge(self.spec.model), self.spec.training
        task = self.spec.task.variant if self.spec.task is not None else KGETask()
        assert isinstance(task, KGETask)
        seed_everything(tr.seed)
        self.kge_model, self.task, self.entry = m, task, kge_entry(m.KIND)
        self.joint = task.sampler == NegativeSampler.joint
        self.kg = load_kg(graph)
        tables = {t.name: t for t in self.spec.embeddings}
        ent, rel = tables[m.entity_embedding], tables[m.relation_embedding]  # type: ignore[index]
        if ent.dim != rel.dim:
            raise GraphtrainError(
                f"embeddings[{ent.name}].dim {ent.dim} and embeddings[{rel.name}].dim {rel.dim} differ: "
                "model.entityEmbedding and model.relationEmbedding need the same dim"
            )
        self.ent = embedding_table(
            ent, graph.num_nodes, table_init(self.spec, ent.name), graph.book, graph.client, self.device
        )
        rel_book = PartitionBook.even(self.kg.num_relations, graph.client.num_shards)
        self.rel = embedding_table(
            rel, self.kg.num_relations, table_init(self.spec, rel.name), rel_book, graph.client, self.device
        )
        self.collective_tables = collective([self.ent, self.rel])
        # optimizer.rows: all: every row read and pushed at every step, so every row is stepped (zero
        # gradients where the batch had none), as torch.optim.Adam steps a dense table (PyKEEN's)
        self.whole = (
            graph.num_nodes if ent.optimizer.rows == RowsStepped.all else None,
            self.kg.num_relations if rel.optimizer.rows == RowsStepped.all else None,
        )
        ent_config = OptimConfig.from_spec(ent)
        if self.entry.unit_rows:  # entities back on the unit sphere after every step
            ent_config = dataclasses.replace(ent_config, row_norm=1.0)
        self.ent_opt = SparseOptimizer([self.ent], ent_config)
        rel_config = OptimConfig.from_spec(rel)
        if self.entry.unit_relations:  # relation elements back on the unit circle after every step
            rel_config = dataclasses.replace(rel_config, unit_complex=True)
        self.rel_opt = SparseOptimizer([self.rel], rel_config)
        self.triples = torch.from_numpy(edge_split(graph.config, dist.rank, dist.world))
        self.batch_size = dist.share(tr.batch_size)
        self.filter = kge_math.FilterIndex(
            np.concatenate([self.kg.train, self.kg.valid, self.kg.test]),
            graph.num_nodes,
            self.kg.num_relations,
        )
        self.push_wait = False  # True: each push waits for its shards (the tests' unpipelined step)
        self.late: LateFlags | None = None
        self.graphed = self._make_graphed()

    # ---------------------------------------------------------------------------------- start

    def start(self, step: int, resumed: bool) -> None:
        """Fresh rows start where the model keeps them (PyKEEN's *_norm initialisers and its constrainers
        at reset): TransE's and DistMult's on the unit sphere, RotatE's relation elements on the unit
        circle; restored ones are there, and the tables' step counts go on from the checkpoint's."""
        if not resumed and (self.entry.unit_rows or self.entry.unit_relations):
            if self.entry.unit_rows:
                for table in (self.ent, self.rel):
                    normalise_rows(table, self.dist.rank, PULL_CHUNK)
            if self.entry.unit_relations:
                normalise_rows(self.rel, self.dist.rank, PULL_CHUNK, unit_complex)
            self.dist.barrier()
        self.ent.steps = self.rel.steps = step

    # ------------------------------------------------------------------------------- training

    def steps_per_epoch(self) -> int:
        return -(-len(self.triples) // self.batch_size)

    def batches(self, epoch: int, start: int) -> Iterator[Triples]:
        """This trainer's triples in the epoch's seeded order, each batch with its negatives drawn from the
        same generator. The negatives of the batches before `start` are drawn too (and dropped): the
        generator then stands where a whole pass has it, so the batches from there are that pass's."""
        tr, task = self.spec.training, self.task
        gen = torch.Generator().manual_seed(epoch_seed(tr.seed, self.dist.rank, epoch))
        order = torch.randperm(len(self.triples), generator=gen)
        b = self.batch_size
        for i in range(self.steps_per_epoch()):
            pos = self.triples[order[i * b : (i + 1) * b]]
            if self.joint:
                neg = kge_math.joint_draw(len(pos), task.negatives, task.chunk, self.graph.num_nodes, gen)
            else:
                neg = kge_math.corrupt_ids(pos, task.negatives, self.graph.num_nodes, gen)
            if i >= start:
                yield Triples(pos, neg)

    def step(self, batch: Triples, clock: StageClock) -> tuple[torch.Tensor, int]:
        """The batch's entity and relation rows pulled once each (stage pull), its scores, loss and
        backward (forward_backward), and the gradients pushed to the shard servers (push). With
        training.cudaGraph a full batch is replayed as one CUDA graph (graphed.py): one stage."""
        if self.graphed is not None:
            if len(batch.pos) == self.batch_size:
                loss = self.graphed(batch, self.ent.steps + 1)
                clock.lap("forward_backward")
                return loss, len(batch.pos)
            self.graphed.settle()  # the last captured step's checks read before an eager step
        pos, neg = batch
        ents = torch.cat([pos[:, ::2].reshape(-1), self._negative_ids(neg)])
        if self._where_they_lie():
            rows, r = self._rows_on_device(ents, pos[:, 1], clock)
        else:
            rows, r = self._rows_deduplicated(ents, pos[:, 1], clock)
        loss = self._loss(pos, neg, rows, r)
        loss.backward()
        clock.lap("forward_backward")
        # pushed without waiting (server tables): the shards apply them while the loop draws the next
        # batch, and this client's next pull waits for them, so no read misses an update (write order
        # kept). The small relation table first: the entity push waits for what was sent before it.
        self.rel_opt.step(wait=self.push_wait)
        self.ent_opt.step(wait=self.push_wait)
        clock.lap("push")
        return loss, len(pos)

    def _negative_ids(self, neg: torch.Tensor) -> torch.Tensor:
        """Each negative's own entity only (the joint draw's, or the one its corruption put in): its other
        one is its positive's, whose row is broadcast (kge_math.sided_scores)."""
        return neg.reshape(-1)

    def _loss(
        self, pos: torch.Tensor, neg: torch.Tensor, rows: torch.Tensor, r: torch.Tensor
    ) -> torch.Tensor:
        """The batch's loss from its entity rows (positives' heads and tails, then negatives) and its
        relations' rows."""
        m, task = self.kge_model, self.task
        b, k = len(pos), task.negatives
        # split, not slices: its gradient is one cat, where a slice's is a zero fill of all rows
        pe, ne = rows.split([2 * b, rows.shape[0] - 2 * b])
        h, t = pe.view(b, 2, -1).unbind(1)
        pos_s = self.entry.score(h, r, t, m)
        if self.joint:
            neg_s = self._joint_scores(pos, neg, (h, r, t), ne.view(-1, k, rows.shape[1]))
        else:
            score = lambda x, y, z: self.entry.score(x, y, z, m)  # noqa: E731
            neg_s = kge_math.sided_scores(score, (h, r, t), ne.view(b, k, -1))
        return kge_math.loss(str(task.loss), pos_s, neg_s, task.margin)

    def _graph_step(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        """A whole step over the captured step's buffers (on the device): lookups, loss, backward and
        both tables' sparse steps, every check left on the device (optim/late.py)."""
        assert self.late is not None
        self.late.begin()
        self.ent.late = self.rel.late = self.late  # type: ignore[union-attr]
        try:
            ents = torch.cat([pos[:, ::2].reshape(-1), self._negative_ids(neg)])
            rows, r = self._lookup(ents, pos[:, 1], pos)
            loss = self._loss(pos, neg, rows, r)
            loss.backward()
            for table in (self.ent, self.rel):  # both tables' gradients checked before either steps
                self.late.screen(f"gradients of {table.name!r}", table.pending()[1])
            self.ent_opt.step()  # each gated by every check before it: a flagged step changes no table
            self.rel_opt.step()
        finally:
            self.ent.late = self.rel.late = None  # type: ignore[union-attr]
        return loss.detach()

    def _make_graphed(self) -> GraphedStep | None:
        """The captured step of training.cudaGraph (its buffers shaped as a full batch), or None.

        Raises:
            GraphtrainError: the spec asks for it where a step cannot be captured.
        """
        if not self.spec.training.cuda_graph:
            return None
        why = graphed.refusal(self.device, [self.ent, self.rel], self.dist.world, self.entry.unit_relations)
        if why:
            raise GraphtrainError(f"training.cudaGraph: {why}")
        b, k = self.batch_size, self.task.negatives
        half = kge_math.head_side(b)  # joint: each side's chunks (kge_math.joint_draw)
        rows = kge_math.chunks(half, self.task.chunk) + kge_math.chunks(b - half, self.task.chunk)
        neg_shape = (rows, k) if self.joint else (b, k)
        pos = torch.zeros((b, 3), dtype=torch.int64, device=self.device)
        neg = torch.zeros(neg_shape, dtype=torch.int64, device=self.device)
        self.late = LateFlags(self.device)

        def replayed() -> None:  # what the step does in Python, once at capture
            self.ent.steps += 1
            self.rel.steps += 1

        return GraphedStep(lambda: self._graph_step(pos, neg), [pos, neg], self.late, replayed)

    def _joint_scores(
        self,
        pos: torch.Tensor,
        shared: torch.Tensor,
        triples: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        shared_rows: torch.Tensor,
    ) -> torch.Tensor:
        """(B, k) scores against the chunks' shared entities, a positive's own entity among them left out
        (scored -inf: no loss, no gradient). The check runs on the ids where the scores are."""
        m, chunk = self.kge_model, self.task.chunk
        scores = kge_math.joint_scores(
            lambda r, t, e: self.entry.heads(r, t, e, m),
            lambda h, r, e: self.entry.tails(h, r, e, m),
            triples,
            shared_rows,
            chunk,
        )
        own = kge_math.own_entity(to_device(pos, self.device), to_device(shared, self.device), chunk)
        return scores.masked_fill(own, float("-inf"))

    def _where_they_lie(self) -> bool:
        """Both tables on this trainer's GPU (standalone's, or collective ones): every occurrence is looked
        up there and the sparse step sums duplicates itself, deterministically (torch.unique and the
        backward of index_select would cost a wait for the device and atomic adds)."""
        return self.device.type == "cuda" and self.ent.device == self.rel.device == self.device

    def _rows_on_device(
        self, ents: torch.Tensor, rels: torch.Tensor, clock: StageClock
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids = to_device(torch.cat([ents, rels]), self.device)  # the batch's ids go up in one copy
        clock.lap("sample")
        rows, r = self._lookup(ids[: len(ents)], ids[len(ents) :], ids)
        clock.lap("pull")
        return rows, r

    def _lookup(
        self, ent_ids: torch.Tensor, rel_ids: torch.Tensor, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every occurrence's row, from tables on this device (`like`: a tensor there)."""
        n_ent, n_rel = self.whole
        rows = self.ent(ent_ids) if n_ent is None else self.ent(_every(n_ent, like)).index_select(0, ent_ids)
        r = self.rel(rel_ids) if n_rel is None else self.rel(_every(n_rel, like)).index_select(0, rel_ids)
        return rows, r

    def _rows_deduplicated(
        self, ents: torch.Tensor, rels: torch.Tensor, clock: StageClock
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each distinct id's row pulled once (what crosses a socket or the host): deduplicated where the
        rows are looked up, then expanded on this trainer's device."""
        uniq, inverse = _lookup(ents.to(self.ent.device), self.whole[0])
        rel_ids, rel_inv = _lookup(rels.to(self.rel.device), self.whole[1])
        clock.lap("sample")
        ent_rows, rel_rows = self.ent(uniq), self.rel(rel_ids)
        clock.lap("pull")
        # moved after the pull: the gradients come back to the host rows the sparse optimizer reads
        ent_rows, rel_rows = to_device(ent_rows, self.device), to_device(rel_rows, self.device)
        inverse, rel_inv = to_device(inverse, self.device), to_device(rel_inv, self.device)
        # index_select, not rows[inverse]: the latter's backward on CPU adds with atomics across
        # threads, so runs on 2+ threads were not reproducible (and it is 2.4x slower).
        return ent_rows.index_select(0, inverse), rel_rows.index_select(0, rel_inv)

    # ----------------------------------------------------------------------------- evaluation

    def _all_rows(self, table: Table, count: int) -> torch.Tensor:
        """Rows 0..count-1: every entity (or relation), and no more: a dynamic vocabulary's capacity may
        exceed the graph's entities, and a row past them would be scored as a candidate."""
        return torch.cat(
            [table.rows(torch.arange(lo, min(lo + PULL_CHUNK, count))) for lo in range(0, count, PULL_CHUNK)]
        )

    def eval_triples(self, split: Split) -> np.ndarray:
        """The split's triples, or a seeded sample of EVAL_MAX_TRIPLES of them."""
        return eval_sample(self.kg.valid if split == "valid" else self.kg.test, self.spec.training.seed)

    @torch.no_grad()
    def evaluate(self, split: Split) -> dict[str, float]:
        """Filtered MRR and Hits@1/3/10 over head and tail prediction (realistic ranks)."""
        triples = self.eval_triples(split)
        if self.graphed is not None:
            self.graphed.settle()  # the last captured step's checks read
        self.graph.client.settle()  # every trainer's last pushes applied before the rows are read
        self.dist.barrier()
        lo = self.dist.rank * len(triples) // self.dist.world
        hi = (self.dist.rank + 1) * len(triples) // self.dist.world
        mine = triples[lo:hi]
        # every entity scored where the model runs
        ents = to_device(self._all_rows(self.ent, self.graph.num_nodes), self.device)
        rels = to_device(self._all_rows(self.rel, self.kg.num_relations), self.device)
        sums = kge_math.RankSums()
        for i in range(0, len(mine), EVAL_BATCH):
            t = mine[i : i + EVAL_BATCH]
            h_ids, r_ids, t_ids = (to_device(torch.from_numpy(t[:, j]), self.device) for j in range(3))
            h, r, tt = ents[h_ids], rels[r_ids], ents[t_ids]
            scores = self.entry.tails(h, r, ents, self.kge_model)
            sums.add(kge_math.filtered_ranks(scores, t_ids, *self.filter.known("tail", t[:, 0], t[:, 1])))
            scores = self.entry.heads(r, tt, ents, self.kge_model)
            sums.add(kge_math.filtered_ranks(scores, h_ids, *self.filter.known("head", t[:, 2], t[:, 1])))
        out = kge_math.RankSums.metrics(self.dist.sum(sums.as_list()))
        out["triples"] = float(len(triples))
        return out

    # ---------------------------------------------------------------------------- checkpoints

    def check_pending(self) -> None:
        """A captured step's last verdicts read (train/graphed.py): no checkpoint is begun after a step
        that changed nothing unnoticed."""
        if self.graphed is not None:
            self.graphed.settle()

    def save_state(self, directory: Path) -> None:
        """Nothing beside the tables: the models have no dense part."""

    def load_state(self, directory: Path) -> None:
        """Nothing beside the tables."""
