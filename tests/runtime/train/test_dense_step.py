"""DenseTask's dense step with several trainers: taken when the weights are next read (the next step,
a checkpoint, an evaluation), never read before it; with one trainer, at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from graphtrain.runtime.train.dense import DenseTask, dense_optimizer


class Clock:
    def __init__(self) -> None:
        self.laps: list[str] = []

    def lap(self, stage: str) -> None:
        self.laps.append(stage)


class TwoTrainers:
    """GradSync's contract for a world of two trainers that computed the same gradients (their average
    is each one's): start() after backward, finish() before the step."""

    world = 2

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.pending = False

    def start(self) -> None:
        self.calls.append("start")
        self.pending = True

    def finish(self) -> None:
        self.calls.append("finish")
        self.pending = False


class Task(DenseTask):
    def __init__(self, world: int) -> None:
        torch.manual_seed(0)
        self.dense_parts(torch.nn.Linear(3, 1), 1, "sgd", 0.5)
        if world > 1:
            self.grad_sync = TwoTrainers()  # type: ignore[assignment]
        self.sparse_opts = []
        self.encode = lambda: self.model.weight.detach().clone()

    def loss(self) -> torch.Tensor:
        return self.model(torch.ones(1, 3)).sum()


def test_two_trainers_step_when_the_weights_are_read_next(tmp_path: Path) -> None:
    task = Task(2)
    before = task.model.weight.detach().clone()
    clock = Clock()
    task.update(task.loss(), clock)
    assert torch.equal(task.model.weight, before) and task.updates == 0  # the average is on its way
    assert task.grad_sync.calls == ["start"] and clock.laps == ["forward_backward"]  # type: ignore[attr-defined]
    task.save_state(tmp_path)  # a checkpoint holds the step's dense step
    stepped = before - 0.5
    assert torch.equal(task.model.weight.detach(), stepped) and task.updates == 1
    saved: dict[str, Any] = torch.load(tmp_path / "dense.pt", weights_only=True)
    assert torch.equal(saved["model"]["weight"], stepped)
    task.settle(clock)  # nothing left: no second step
    assert task.updates == 1 and clock.laps == ["forward_backward"]

    task.update(task.loss(), clock)
    assert torch.equal(task.encoded(), stepped - 0.5)  # an evaluation reads the stepped weights
    task.update(task.loss(), clock)
    task.settle(clock)  # the next step's start
    assert task.updates == 3 and clock.laps[-1] == "forward_backward"
    assert task.grad_sync.calls == ["start", "finish"] * 3  # type: ignore[attr-defined]


def test_one_trainer_steps_at_once() -> None:
    task = Task(1)
    before = task.model.weight.detach().clone()
    clock = Clock()
    task.update(task.loss(), clock)
    assert torch.equal(task.model.weight.detach(), before - 0.5) and task.updates == 1
    assert clock.laps == ["forward_backward", "forward_backward"]


def test_a_checkpoint_loaded_over_a_pending_step_drops_that_step(tmp_path: Path) -> None:
    task = Task(2)
    task.save_state(tmp_path)
    saved = task.model.weight.detach().clone()
    task.update(task.loss(), Clock())
    task.load_state(tmp_path)
    task.settle()
    assert torch.equal(task.model.weight.detach(), saved) and task.updates == 0
    assert task.grad_sync.calls == ["start", "finish"]  # type: ignore[attr-defined]


def test_a_model_whose_every_row_is_the_same_has_collapsed() -> None:
    from graphtrain.runtime.train.dense import collapsed

    same = torch.tensor([[0.5, -1.0]] * 3)
    assert collapsed(same)
    assert not collapsed(same[:1])  # one node: nothing to compare
    assert not collapsed(torch.tensor([[0.5, -1.0], [0.5, -0.999]]))
    assert not collapsed(torch.empty(0, 4))


@pytest.mark.parametrize("kind", ["adam", "sgd", "adagrad"])
def test_the_dense_optimizer_is_fused_where_torch_has_the_kernel(kind: str) -> None:
    """Fused on the CPU for every kind; on another device, Adagrad falls back to torch's default, since
    releases before its CUDA kernel refuse a CUDA parameter at the first step (the GPU image's torch)."""
    on_cpu = dense_optimizer(kind, [torch.nn.Parameter(torch.zeros(3))], 0.1)
    assert on_cpu.defaults["fused"] is True
    elsewhere = dense_optimizer(kind, [torch.nn.Parameter(torch.zeros(3, device="meta"))], 0.1)
    assert elsewhere.defaults["fused"] is (None if kind == "adagrad" else True)


def test_a_checkpoint_keeps_the_loading_devices_fused_choice(tmp_path: Path) -> None:
    """A CPU trainer's Adagrad (fused) resumed where it is not fused keeps its own choice."""
    from graphtrain.runtime.train.dense import load_dense, save_dense

    model = torch.nn.Linear(2, 2)
    save_dense(tmp_path / "dense.pt", model, dense_optimizer("adagrad", model.parameters(), 0.1))
    other = torch.optim.Adagrad(model.parameters(), lr=0.1)  # what a CUDA trainer builds
    load_dense(tmp_path / "dense.pt", model, other)
    assert other.param_groups[0]["fused"] is None


def test_a_checkpoint_keeps_the_loading_optimizers_capturable_choice(tmp_path: Path) -> None:
    """A captured step's Adam (capturable, train/captured_sage.py) resumed by an eager trainer stays
    as that trainer made it: capturable is slower where nothing is captured."""
    from graphtrain.runtime.train.dense import load_dense, save_dense

    model = torch.nn.Linear(2, 2)
    captured = torch.optim.Adam(model.parameters(), lr=0.1)
    captured.param_groups[0]["capturable"] = True
    save_dense(tmp_path / "dense.pt", model, captured)
    eager = dense_optimizer("adam", model.parameters(), 0.1)
    load_dense(tmp_path / "dense.pt", model, eager)
    assert eager.param_groups[0]["capturable"] is False


class _Runs:
    """A pickled object that would run code when unpickled without weights_only."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (print, ("ran",))


@pytest.mark.parametrize("content", ["missing", "pickle", "garbage", "no-model"])
def test_a_dense_file_that_is_not_one_is_named_in_one_line(tmp_path: Path, content: str) -> None:
    """A trainer met a missing dense.pt as "FileNotFoundError: [Errno 2]", and a pickled object as
    torch's UnpicklingError whose text advises loading it without weights_only (running its code)."""
    import pickle

    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.train.dense import read_dense

    path = tmp_path / "dense.pt"
    if content == "pickle":
        path.write_bytes(pickle.dumps({"model": _Runs()}))
    elif content == "garbage":
        path.write_bytes(b"not a torch file")
    elif content == "no-model":
        torch.save({"optimizer": {}}, path)
    with pytest.raises(GraphtrainError) as caught:
        read_dense(path)
    said = str(caught.value)
    assert said.startswith(str(path)) and "\n" not in said and "weights_only" not in said, said
