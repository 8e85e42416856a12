"""A steady training step replayed as one CUDA graph (issue 45, item 4; `training.cudaGraph`).

A KGE step on a GPU holding its tables is some 60 small kernels and their launches: host time that the
device waits through. Captured once as a torch.cuda.CUDAGraph, each later step is one replay. What that
needs, and where it is kept:
- fixed shapes and addresses: the step reads its batch from static device buffers, filled from two pinned
  host buffers in turn (an asynchronous copy, so the host never waits for the device to take it);
- no host reads inside: the lookups' range checks and the sparse step's refusals leave their verdicts on
  the device and are read a step late (optim/late.py); the loss is read when the loop reports it;
- the first `warmup` steps run eagerly on a side stream (torch's rule before a capture: autograd and the
  libraries make their lazy allocations there), each a real step of the epoch; the next is captured and
  then replayed, so every batch is trained exactly once;
- what the step does in Python (the tables' step counts) happens once at capture: `on_replay` repeats it
  for every later replay.

On a CPU there is no graph: the same function runs eagerly over the same buffers, with the same late
checks (the tests' twin).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch

from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.optim.late import LateFlags
from graphtrain.runtime.train.reporter import log

WARMUP_STEPS = 3


def refusal(device: torch.device, tables: Sequence[object], world: int, projected: bool) -> str:
    """Why a KGE step over `tables` cannot be captured on `device`, or "": see tables_refusal; and no
    projection after the step (RotatE's relations have one)."""
    why = tables_refusal(device, tables, world)
    if why:
        return why
    if projected:
        return "the model's relations are projected after each step (RotatE): not captured"
    return ""


def tables_refusal(device: torch.device, tables: Sequence[object], world: int) -> str:
    """Why a step over `tables` cannot be captured on `device`, or "": its tables must be held whole by
    the one trainer (sharding: collective, a fixed vocabulary), float32, refusing non-finite gradients,
    and on a GPU stepped by the CUDA core (torch's reference would read its checks back); no table, no
    core needed."""
    if device.type == "cuda" and tables:
        from graphtrain.runtime.native import cuda
        from graphtrain.runtime.native.backend import CoreBackend, choose_for_optimizer

        if not cuda.available(device.index or 0):
            return f"the CUDA core cannot step the tables: {cuda.unavailable_reason(device.index or 0)}"
        if choose_for_optimizer(device) is not CoreBackend.CUDA:
            return (
                "the tables' sparse steps must run on the CUDA core (GRAPHTRAIN_OPTIM_BACKEND asks another)"
            )
    if world != 1:
        return f"a captured step needs one trainer holding its tables whole; this run has {world}"
    for t in tables:
        if not isinstance(t, CollectiveEmbedding):
            return (
                f"embeddings[{getattr(t, 'name', '?')}] must have sharding: collective (rows on the trainer)"
            )
        if t.dynamic or t.dtype != torch.float32:
            return f"embeddings[{t.name}] must be float32 with a fixed vocabulary"
        if t.config is None or t.config.nonfinite != "refuse":
            return f"embeddings[{t.name}].nonFiniteGrads must be refuse"
    return ""


class GraphedStep:
    """`step()` (reading `inputs`, returning the loss) run as a CUDA graph after `warmup` eager steps."""

    def __init__(
        self,
        step: Callable[[], torch.Tensor],
        inputs: Sequence[torch.Tensor],
        late: LateFlags,
        on_replay: Callable[[], None] = lambda: None,
        warmup: int = WARMUP_STEPS,
    ):
        self.step, self.inputs, self.late, self.on_replay = step, list(inputs), late, on_replay
        self.device = self.inputs[0].device
        self.cuda = self.device.type == "cuda"
        self.warmup = warmup
        self.runs = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self._loss: torch.Tensor | None = None
        # two pinned copies of the inputs, used in turn: a buffer is rewritten once its last copy up is done
        # (its event: two steps back, so the host hardly ever waits on it)
        self._staging = [
            [torch.empty_like(t, device="cpu", pin_memory=self.cuda) for t in self.inputs] for _ in (0, 1)
        ]
        self._copied = [torch.cuda.Event() for _ in (0, 1)] if self.cuda else []
        # the eager warm-up steps' stream (torch's rule before a capture)
        self._side = torch.cuda.Stream(self.device) if self.cuda else None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def shapes(self) -> list[tuple[int, ...]]:
        return [tuple(t.shape) for t in self.inputs]

    def __call__(self, batch: Sequence[torch.Tensor], index: int) -> torch.Tensor:
        """Train on `batch` (tensors of the inputs' shapes: on the host, or already on the device, as a
        batch sampled there) as step `index`; returns its loss (on the device, unread). Raises what the
        step before it flagged (optim/late.py)."""
        turn = self.runs % 2
        staging = self._staging[turn]
        for src, dst in zip(batch, self.inputs, strict=True):
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(
                    f"a captured step takes inputs of shapes {self.shapes()}, got {tuple(src.shape)}"
                )
        with torch.cuda.device(self.device) if self.cuda else contextlib.nullcontext():
            if self.cuda:
                self._copied[turn].synchronize()  # this buffer's copy up two steps back is done
            for buf, src, dst in zip(staging, batch, self.inputs, strict=True):
                if src.device == dst.device:  # on the device already: in stream order, no host copy
                    dst.copy_(src)
                    continue
                buf.copy_(src)
                dst.copy_(buf, non_blocking=self.cuda)
            if self.cuda:
                self._copied[turn].record(torch.cuda.current_stream(self.device))
            if not self.cuda:
                loss = self.step()
            elif self.runs < self.warmup:
                loss = self._eager_on_side_stream()
            else:
                if self.graph is None:
                    self._capture()
                else:
                    self.on_replay()
                assert self.graph is not None and self._loss is not None
                self.graph.replay()
                loss = self._loss
        self.runs += 1
        out = loss.detach().clone()  # the graph's loss is overwritten by the next replay
        self.late.collect(index)
        return out

    def settle(self) -> None:
        """Raise for the last step launched, if it flagged (before evaluation, a checkpoint, the end)."""
        self.late.check()

    def _eager_on_side_stream(self) -> torch.Tensor:
        side = self._side
        assert side is not None
        main = torch.cuda.current_stream(self.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            loss = self.step()
        main.wait_stream(side)
        return loss

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        # thread_local: torch's default ("global") makes any other thread's unsafe CUDA call during the
        # capture (the loader thread's pin_memory, its sampler's waits and cudaMalloc, with
        # training.prefetch) fail there and invalidate the capture; this thread is held to the same rules
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._loss = self.step()
        self.graph = graph
        log(f"training.cudaGraph: the step is captured after {self.runs} eager ones and replayed from now on")
