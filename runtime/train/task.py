"""What a model brings to the epoch loop (loop.py), as a model brings its batches and its step to
TorchRec's train pipeline: the loop owns epochs, steps, progress reports, checkpoints, the best
validation pass, early stopping, the final test evaluation and the result; a TrainingTask says what
its batches are, what one step does, how it evaluates a split, and which state of its own a
checkpoint keeps.

Batches are a function of (training.seed, rank, epoch, index): batches(epoch, start) yields the very
batches a whole pass over that epoch makes from its start-th on. Randomness inside a step that draws
on torch's global generator (dropout) is seeded by the loop from the same place. So a trainer resumed
from a checkpoint taken mid-epoch continues that epoch as if it had not stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import torch

from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.train.metrics import StageClock

Split = Literal["valid", "test"]
BatchT = TypeVar("BatchT")


class TrainingTask(Protocol[BatchT]):
    """A model's training, as the epoch loop drives it.

    metric_names: what evaluate() returns that a validation pass reports (as val_<name>, the columns of
        metrics.csv); the first picks the best pass and drives early stopping, and test_<first> is what
        the final report carries. It is better when higher, unless the task sets `lower_is_better`.
    report_every: steps between progress reports.
    collective_tables: the task's tables sharded across the trainers (sharding: collective), which
        checkpoints write and restore beside the shard servers' tables.
    device: where the model computes (what the step profiler synchronises and profiles).
    """

    metric_names: tuple[str, ...]
    report_every: int
    collective_tables: list[CollectiveEmbedding]
    device: torch.device

    def steps_per_epoch(self) -> int:
        """This trainer's batches in one epoch (the same in every epoch)."""
        ...

    def batches(self, epoch: int, start: int) -> Iterator[BatchT]:
        """Epoch `epoch`'s batches (0-based) from its `start`-th on, as a whole pass makes them."""
        ...

    def step(self, batch: BatchT, clock: StageClock) -> tuple[torch.Tensor, int]:
        """One optimizer step on `batch`: its loss and its number of samples. `clock` has timed the wait
        for the batch as `sample`; the step laps its own stages (train/metrics.py)."""
        ...

    def evaluate(self, split: Split) -> dict[str, float]:
        """The model's metrics on `split`, over every trainer (collective), by unprefixed name."""
        ...

    def start(self, step: int, resumed: bool) -> None:
        """Training starts at `step` (0, or the checkpoint's when `resumed`: tables and state restored)."""
        ...

    def check_pending(self) -> None:
        """Raise for what the last step left unchecked (a captured step's verdicts, read a step late:
        train/graphed.py), before a checkpoint is begun."""
        ...

    def save_state(self, directory: Path) -> None:
        """Write the task's own part of a checkpoint into `directory` (rank 0; the tables are the shard
        servers')."""
        ...

    def load_state(self, directory: Path) -> None:
        """Restore save_state's part (every rank)."""
        ...


def init_spec(table: Any, seed: int = 0) -> dict[str, Any]:
    """The shard servers' init description of a spec's embedding table."""
    i = table.init
    return {"kind": str(i.kind), "low": i.low, "high": i.high, "mean": i.mean, "std": i.std, "seed": seed}
