"""Dense checkpoints: a model's and its optimizer's state, tensors only, written with torch.save and
read with torch.load(weights_only=True), so no arbitrary object is ever unpickled. A checkpoint whose
shapes do not fit the spec's model is one line naming the first parameter, not torch's size mismatch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from graphtrain.runtime.data.cache import atomic_file
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.train.gradsync import GradSync
from graphtrain.runtime.train.lean_step import LeanStep
from graphtrain.runtime.train.reporter import log


def save_dense(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Model and optimizer state (tensors only), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)


def read_dense(path: Path) -> dict[str, Any]:
    """What save_dense wrote at `path` (weights_only: tensors and plain values, nothing else).

    Raises:
        GraphtrainError: no such file, or not one save_dense wrote: named with the reader's error type,
            never its traceback (torch's own message for a pickled object advises loading it without
            weights_only, which would run its code)."""
    if not path.is_file():
        raise GraphtrainError(f"{path}: missing (a GNN's checkpoint holds its dense model there)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise GraphtrainError(f"{path}: cannot read the dense model ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise GraphtrainError(f"{path}: not a graphtrain dense checkpoint (no model state)")
    return state


def load_dense(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Restore what save_dense wrote (read_dense).

    Raises:
        GraphtrainError: see read_dense; the checkpoint's model has other shapes than `model` (one line
            naming the first parameter; a checkpoint with a model record is checked by field before this).
    """
    state = read_dense(path)
    mismatch = shape_mismatch(state["model"], model.state_dict())
    if mismatch:
        raise GraphtrainError(
            f"{path}: the checkpoint's dense model does not fit the spec's ({mismatch}): give the spec the "
            "run trained with (its model.hiddenDim, model.numLayers, model.useFeatures and embedding dims)"
        )
    model.load_state_dict(state["model"])
    chosen = [(group.get("fused"), group.get("capturable")) for group in optimizer.param_groups]
    optimizer.load_state_dict(state["optimizer"])
    for group, (fused, capturable) in zip(optimizer.param_groups, chosen, strict=True):
        group["fused"] = fused  # this device's choice (dense_optimizer), not the saving trainer's
        if capturable is not None:  # nor its captured step's (train/captured_sage.py sets it again)
            group["capturable"] = capturable


def shape_mismatch(saved: dict[str, Any], current: dict[str, Any]) -> str:
    """The first difference between two state dicts' keys or shapes, in words; "" when they fit."""
    for name in sorted(set(saved) | set(current)):
        if name not in current:
            return f"{name} is in the checkpoint, not in the model"
        if name not in saved:
            return f"{name} is in the model, not in the checkpoint"
        a, b = tuple(saved[name].shape), tuple(current[name].shape)
        if a != b:
            return f"{name}: checkpoint {list(a)}, spec {list(b)}"
    return ""


def collapsed(rows: torch.Tensor) -> bool:
    """Whether two or more output rows are all the same row: each column's largest value is its
    smallest (no rows x columns temporary; a NaN never compares equal, so it is not a collapse)."""
    return rows.dim() == 2 and rows.shape[0] > 1 and torch.equal(rows.amax(0), rows.amin(0))


def dense_optimizer(kind: str, params: Any, lr: float) -> torch.optim.Optimizer:
    """The dense optimizer, fused (one kernel per parameter: 0.25 ms instead of 0.54 ms per GraphSAGE
    step on one thread; same update rule). Adagrad's fused kernel is CPU-only in torch releases before
    its CUDA one (older ones refuse a CUDA parameter at the first step): torch's default elsewhere."""
    params = list(params)
    cls = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}.get(kind, torch.optim.Adam)
    fused = kind != "adagrad" or all(p.device.type == "cpu" for p in params)
    return cls(params, lr=lr, fused=True if fused else None)


class DenseTask:
    """The end of a GNN task's step and its checkpoint part, where the task's own state is its module
    (`model`) and the dense optimizer (dense.pt), and its tables' sparse optimizers push to the shard
    servers (node classification, link prediction, edge classification).

    With several trainers the dense step is taken when the weights are next read (settle: the next
    step's forward, a checkpoint, an evaluation), once the gradients' average (gradsync.py) is in; the
    sparse pushes and the next batch's sampling overlap the wait for the slowest trainer."""

    model: torch.nn.Module
    dense_opt: torch.optim.Optimizer
    dense_step: LeanStep  # dense_opt's step and zero_grad, lean (lean_step.py)
    grad_sync: GradSync
    sparse_opts: list[Any]
    encode: Callable[[], Any]  # every node's output, layer by layer over the whole graph (layerwise.Layers)
    updates = 0  # dense steps taken by this process: what the model's state is
    _stepping = False  # a step's update is in, its dense step not yet taken
    _encoded: tuple[int, Any] | None = None
    _told_collapsed = False
    # what backward runs under: the encoder's products() where its forward ran GEMMs in bfloat16
    products: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    def dense_parts(self, model: torch.nn.Module, world: int, kind: str, lr: float) -> None:
        """The model (every trainer from rank 0's weights), its gradients' averaging and its optimizer."""
        self.model = model
        self.grad_sync = GradSync(model, world)
        self.dense_opt = dense_optimizer(kind, model.parameters(), lr)
        self.dense_step = LeanStep(self.dense_opt)

    def outputs(self, layers: Any) -> dict[str, Any]:
        """The inference columns of this trainer's share of the nodes (`graphtrain infer`): the
        encoder's embedding."""
        return {"embedding": layers.mine.numpy()}

    def encoded(self) -> Any:
        """encode(), once per model state: the validation and the test pass after the last step (and
        `graphtrain infer`'s outputs and metrics) share one computation."""
        self.settle()
        if self._encoded is None or self._encoded[0] != self.updates:
            self._encoded = (self.updates, self.encode())
            self._tell_collapsed(getattr(self._encoded[1], "mine", None))
        return self._encoded[1]

    def _tell_collapsed(self, rows: torch.Tensor | None) -> None:
        """One log line (rank 0, once) when the model gives every node the same output: its hidden
        units are all off (a ReLU network pushed past its range), so every metric after it is a tie
        or a constant guess, which reads as a plausible score (a tied rank's MRR, the majority class)."""
        if self._told_collapsed or rows is None or not collapsed(rows) or getattr(self, "dist", None) is None:
            return
        self._told_collapsed = True
        if self.dist.rank == 0:
            log(
                "warning: the model's output is the same for every node (it has collapsed: no hidden unit "
                "is on), so its metrics are ties: lower training.denseLr; on a graph of many relation "
                "types, model.kind rgcn with model.numBases"
            )

    def update(self, loss: torch.Tensor, clock: Any) -> None:
        """Backward, the dense gradients' average started, the sparse gradients pushed (the servers
        apply them while the dense step and the next batch's sampling run), then the dense step: at once
        for one trainer, else when the weights are next read (settle). Laps forward_backward, push,
        forward_backward."""
        self.settle()  # a task whose step did not settle first
        self.dense_step.zero_grad()
        with self.products():
            loss.backward()
        self.grad_sync.start()
        self._stepping = True
        clock.lap("forward_backward")
        if self.sparse_opts:
            for opt in self.sparse_opts:
                opt.step(wait=False)
            clock.lap("push")
        if self.grad_sync.world == 1:
            self.settle()
            clock.lap("forward_backward")  # the dense step: the model's part of the step

    def settle(self, clock: Any = None) -> None:
        """Take the dense step the last update left: wait for the gradients' average, then step (lapped
        as forward_backward when a clock is given)."""
        if not self._stepping:
            return
        self._stepping = False
        self.grad_sync.finish()
        self.dense_step.step()
        self.updates += 1
        if clock is not None:
            clock.lap("forward_backward")

    def check_pending(self) -> None:
        """Nothing: a GNN step checks as it goes."""

    def save_state(self, directory: Path) -> None:
        self.settle()
        save_dense(directory / "dense.pt", self.model, self.dense_opt)

    def load_state(self, directory: Path) -> None:
        if self._stepping:  # a step the checkpoint replaces: its average completes (every rank takes
            self._stepping = False  # part in it), its dense step is not taken
            self.grad_sync.finish()
        load_dense(directory / "dense.pt", self.model, self.dense_opt)
        self._encoded = None
