"""A trainer's running counts: the progress tally it reports (TrainerProgress, in the spec's Progress
schema through to_spec()) and the samples per second of the current window (Throughput)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from graphtrain.contract.spec import Progress


def finite_or_none(value: float | None) -> float | None:
    """`value` when it is a finite number, else None."""
    return value if value is not None and math.isfinite(value) else None


@dataclass
class TrainerProgress:
    """A trainer's running tally, reported in the spec's Progress schema (to_spec()). `metrics` and
    `state` stay in the trainer: the final metrics go to result.json, and `state` marks the final report."""

    epoch: int = 0
    epochs: int = 0
    step: int = 0
    loss: float | None = None
    samples_per_second: float | None = None
    eval_seconds: float | None = None
    eval_metric: str | None = None
    eval_value: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    state: str = "Training"
    updated_at: str = ""
    evaluation: dict[str, float] = field(default_factory=dict)  # this epoch's validation metrics, if any

    @property
    def final(self) -> bool:
        """The report of a training that has ended (its last one)."""
        return self.state != "Training"

    def summary(self) -> str:
        parts = [f"epoch {self.epoch}/{self.epochs}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        if self.eval_value is not None:
            parts.append(f"{self.eval_metric} {self.eval_value:.4f}")
        return "  ".join(parts)

    def to_spec(self) -> Progress:
        """The report every sink writes: the schema of status.progress in both executors. A value that
        is not finite (a diverging loss: NaN, inf) is reported absent, which the schema allows; the
        summary line still shows it (the schema refuses NaN, and a refused report killed the trainer)."""
        return Progress(
            epoch=self.epoch,
            epochs=self.epochs,
            step=self.step,
            loss=finite_or_none(self.loss),
            samples_per_second=finite_or_none(self.samples_per_second),
            eval_seconds=finite_or_none(self.eval_seconds),
            eval_metric=self.eval_metric,
            eval_value=finite_or_none(self.eval_value),
            summary=self.summary(),
            updated_at=self.updated_at or None,
        )


class Throughput:
    """Samples per second over the last window of training steps. stop() ends the window when the epoch's
    steps end, so the validation pass after them is not counted in the rate (it is reported apart);
    exclude() takes out time that measured the steps rather than trained (the profiler's own)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.end: float | None = None
        self.samples = 0
        self.excluded = 0.0

    def add(self, n: int) -> None:
        self.samples += n

    def exclude(self, seconds: float) -> None:
        self.excluded += seconds

    def stop(self) -> None:
        self.end = time.perf_counter()

    def rate(self, world: int = 1) -> float:
        end = self.end if self.end is not None else time.perf_counter()
        return self.samples * world / max(end - self.start - self.excluded, 1e-9)
