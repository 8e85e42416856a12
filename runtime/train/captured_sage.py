"""GraphSAGE node classification's step captured as a CUDA graph (issue 45, item 4; training.cudaGraph).

A GraphSAGE step's shapes follow its batch: each layer's node and edge counts change at every step, so
it could not be captured as the KGE step is (train/graphed.py). Here the batch is packed at a fixed
capacity (models/fixed_blocks.py: exact, its added nodes and edges change no real row or gradient):
- the capacity is learned from the first LEARN_STEPS full batches, trained eagerly, with headroom;
- from then on every full batch within it is copied into the captured step's buffers (device to
  device when it was sampled on the GPU) and replayed: the lookup of the node embedding's rows, the
  model, its loss and backward, the table's sparse step and the dense step, one launch;
- a batch beyond the capacity, and the epoch's last partial batch, is trained eagerly (counted, and
  said once in the log).
The checks stay on the device and are read a step late (optim/late.py), as in the KGE step. The dense
optimizer is made capturable on a GPU (its step count on the device). On a CPU the same function runs
eagerly over the same buffers: the tests' twin.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import torch

from graphtrain.contract.spec import DuplicateRule, GraphTrainingSpec
from graphtrain.runtime.graph.loader import MiniBatch
from graphtrain.runtime.models import fixed_blocks as fb
from graphtrain.runtime.models.graphsage import GraphSAGE
from graphtrain.runtime.models.layers import fitted
from graphtrain.runtime.optim.late import LateFlags
from graphtrain.runtime.train import graphed
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.encoder import GNNEncoder
from graphtrain.runtime.train.graphed import GraphedStep
from graphtrain.runtime.train.metrics import StageClock
from graphtrain.runtime.train.reporter import log

LEARN_STEPS = 8  # full batches trained eagerly while the capacity is learned


class SageTask(Protocol):
    """What the captured step reads of its task (node_classification.NodeClassification)."""

    spec: GraphTrainingSpec
    enc: GNNEncoder
    model: torch.nn.Module
    dist: Dist
    device: torch.device
    loader: Any  # its batch_size: a full batch's seeds
    dense_opt: torch.optim.Optimizer
    sparse_opts: list[Any]
    updates: int

    def settle(self, clock: Any = None) -> None: ...

    def _ids(self, table: Any, mb: MiniBatch) -> torch.Tensor: ...


def refusal(task: SageTask) -> str:
    """Why `task`'s step cannot be captured, or "": a GraphSAGE model (an untyped graph, no edge
    weights), no feature bag, on a GPU not torch's Adagrad as the dense optimizer, and a node embedding,
    if any, over every
    node, held whole by the one trainer (graphed.tables_refusal) and summing duplicate gradients (the
    capacity's added ids repeat a real one)."""
    enc = task.enc
    if not isinstance(task.model, GraphSAGE):
        return "a GraphSAGE model on an untyped graph, without model.edgeWeight (R-GCN's layer otherwise)"
    if enc.words is not None:
        return "model.featureBag is not captured (its bags' sizes change with every batch)"
    if task.device.type == "cuda" and str(task.spec.training.dense_optimizer) == "adagrad":
        return "training.denseOptimizer adagrad keeps its step count on the host: adam or sgd"
    tables = [enc.emb] if enc.emb is not None else []
    why = graphed.tables_refusal(task.device, tables, task.dist.world)
    if why:
        return why
    if enc.emb is not None:
        table = next(t for t in task.spec.embeddings if t.name == enc.emb.name)
        if table.duplicate_grads != DuplicateRule.sum:
            return f"embeddings[{table.name}].duplicateGrads must be sum"
        if enc.emb_rows.types is not None:
            return f"embeddings[{table.name}] must have a row for every node (no nodeTypes)"
    return ""


class CapturedSage:
    """The captured step of a NodeClassification task (whose `step` asks it first)."""

    def __init__(self, task: SageTask, learn: int = LEARN_STEPS):
        self.task, self.learn = task, learn
        self.batch = task.loader.batch_size
        self.seen: list[fb.Sizes] = []
        self.cap: fb.Capacity | None = None
        self.graphed: GraphedStep | None = None
        self.late = LateFlags(task.device)
        self.eager_beyond = 0  # full batches beyond the capacity, trained eagerly

    def step(self, mb: MiniBatch, clock: StageClock) -> tuple[torch.Tensor, int] | None:
        """Train on `mb` by the captured step and return (loss, seeds), or None: the task trains it
        eagerly (learning the capacity, a partial batch, a batch beyond the capacity)."""
        if len(mb.seeds) != self.batch:
            self.settle()
            return None
        need = fb.sizes(mb.blocks)
        if self.cap is None:  # learning: these batches are trained eagerly
            self.seen.append(need)
            if len(self.seen) == self.learn:
                self.cap = fb.capacity_for(self.seen, self.batch)
            return None
        if not fb.fits(need, self.cap):
            self._beyond(need)
            return None
        inputs = self._inputs(mb, self.cap)
        if self.graphed is None:
            self.graphed = self._make(inputs, self.cap)
        self.task.settle()  # nothing is pending with one trainer; an eager step's dense step is taken
        emb = self.task.enc.emb
        loss = self.graphed(inputs, (emb.steps if emb is not None else self.task.updates) + 1)
        self.task.updates += 1
        clock.lap("forward_backward")
        return loss, len(mb.seeds)

    def settle(self) -> None:
        """Raise for the last captured step, if it flagged (before an eager step, an evaluation, a
        checkpoint)."""
        if self.graphed is not None:
            self.graphed.settle()

    # ------------------------------------------------------------------------------- internals

    def _beyond(self, need: fb.Sizes) -> None:
        self.settle()
        self.eager_beyond += 1
        n = self.eager_beyond
        if self.task.dist.rank == 0 and n == 10 ** (len(str(n)) - 1):  # the 1st, 10th, 100th, ...
            assert self.cap is not None
            replayed = self.graphed.runs if self.graphed is not None else 0
            log(
                f"training.cudaGraph: a batch of nodes {list(need.nodes)} and edges {list(need.edges)} is "
                f"beyond the captured capacity ({list(self.cap.nodes)}, {list(self.cap.edges)}): trained "
                f"eagerly ({n:,} such so far, {replayed:,} captured steps)"
            )

    def _inputs(self, mb: MiniBatch, cap: fb.Capacity) -> list[torch.Tensor]:
        """The batch as the captured step reads it: the embedding's ids (the added ones repeat a real
        id), the features (added rows of zeros), the labels, the blocks' buffers."""
        task, enc = self.task, self.task.enc
        out = []
        if enc.emb is not None:  # host ids stay there: GraphedStep copies them up through pinned memory
            out.append(fb.padded_rows(task._ids(enc.emb, mb), cap.nodes[0], repeat_first=True))
        if enc.feat is not None:
            out.append(fb.padded_rows(mb.data["x"], cap.nodes[0]))
        out.append(mb.data["y"].to(task.device))
        return out + fb.pack(mb.blocks, cap)

    def _make(self, inputs: list[torch.Tensor], cap: fb.Capacity) -> GraphedStep:
        task = self.task
        buffers = [torch.zeros_like(t, device=task.device) for t in inputs]
        if task.device.type == "cuda":  # its step count on the device: nothing read by the host
            for group in task.dense_opt.param_groups:
                if "capturable" in group:  # Adam's (SGD has no state to count)
                    group["capturable"] = True
            # eager steps stay (the warm-up, batches beyond the capacity): torch's warning is not for them
            task.dense_opt._warned_capturable_if_run_uncaptured = True  # type: ignore[attr-defined]
        emb = task.enc.emb

        def replayed() -> None:  # what the step does in Python, once at capture
            if emb is not None:
                emb.steps += 1

        if task.dist.rank == 0:
            log(
                f"training.cudaGraph: GraphSAGE batches packed at nodes {list(cap.nodes)}, edges "
                f"{list(cap.edges)} (learned over {len(self.seen)} batches)"
            )
        return GraphedStep(lambda: self._graph_step(buffers, cap), buffers, self.late, replayed)

    def _precision(self) -> contextlib.AbstractContextManager:
        """training.mixedPrecision over the forward, as the eager step's (encoder.precision), but on a
        GPU autocast keeps no cache of cast weights: torch's rule for a captured region (the cache's
        copies would be the capture's, and a replay would read weights cast before the last step)."""
        enc = self.task.enc
        if enc.bfloat16 and self.task.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
        return enc.precision()

    def _graph_step(self, buffers: list[torch.Tensor], cap: fb.Capacity) -> torch.Tensor:
        """A whole step over the buffers: lookup, model, loss, backward, the sparse step and the dense
        step, every check left on the device."""
        task, enc = self.task, self.task.enc
        emb = enc.emb
        self.late.begin()
        if emb is not None:
            emb.late = self.late  # type: ignore[union-attr]
        try:
            rest = list(buffers)
            e = emb(rest.pop(0)) if emb is not None else None
            x = rest.pop(0) if enc.feat is not None else None
            y = rest.pop(0)
            blocks = fb.unpack(rest, cap)
            task.dense_opt.zero_grad(set_to_none=True)
            with self._precision():
                if e is None:
                    out = task.model(blocks, x)
                else:
                    out = task.model(blocks, e, x) if enc.split_inputs else task.model(blocks, e)
            loss = torch.nn.functional.cross_entropy(fitted(out, self.batch).float(), y)
            with enc.products():
                loss.backward()
            if emb is not None:
                self.late.screen(f"gradients of {emb.name!r}", emb.pending()[1])  # type: ignore[union-attr]
            for opt in task.sparse_opts:  # gated by every check before it: a flagged step changes no table
                opt.step()
            task.dense_opt.step()
        finally:
            if emb is not None:
                emb.late = None  # type: ignore[union-attr]
        return loss.detach()
