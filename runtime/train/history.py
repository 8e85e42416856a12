"""A run's metric history for people and their tools: <run_dir>/metrics.csv and TensorBoard event files
under <run_dir>/tensorboard/ (rank 0 writes both, one row and one set of scalars per finished epoch).

progress-history.json (spec.reporting) stays the API's history; this one is for spreadsheets, pandas,
`graphtrain plot` and TensorBoard. The CSV's columns are fixed for a run (epoch, step, loss, the model's
validation metrics, samples_per_second, wall_time in Unix seconds as TensorBoard keeps it); a metric
not evaluated in an epoch is an empty cell, never the last value repeated.

A resumed run continues the history: rows of epochs after the checkpoint it resumed from (trained again
now) are dropped when the log opens, and TensorBoard purges its events after that step.
"""

from __future__ import annotations

import csv
import io
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graphtrain.contract.spec import Progress
from graphtrain.runtime.data.cache import atomic_file

METRICS_FILE = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
LEADING = ("epoch", "step", "loss")
TRAILING = ("samples_per_second", "wall_time")


def columns(metrics: Sequence[str]) -> list[str]:
    """The CSV header of a run whose validation passes report `metrics`."""
    return [*LEADING, *metrics, *TRAILING]


def row(header: Sequence[str], p: Progress, values: Mapping[str, float], wall_time: float) -> list[str]:
    """One epoch's CSV row: `p` (a history entry), this epoch's validation `values` (empty if none)."""
    cells: dict[str, Any] = {
        "epoch": p.epoch,
        "step": p.step,
        "loss": p.loss,
        "samples_per_second": p.samples_per_second,
        "wall_time": round(wall_time, 3),
        **values,
    }
    return ["" if cells.get(c) is None else str(cells[c]) for c in header]


def kept_rows(text: str, header: Sequence[str], epoch: int) -> list[list[str]]:
    """The rows of an existing metrics.csv to keep before `epoch` is written again: those of earlier
    epochs; none when its header is another run's (a different model's metrics)."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0] != list(header):
        return []
    kept = []
    for r in rows[1:]:
        try:
            if int(r[0]) < epoch:
                kept.append(r)
        except (ValueError, IndexError):
            continue
    return kept


class MetricsLog:
    """Rank 0's metrics.csv and TensorBoard writer. open() once the trainer knows where it resumed."""

    def __init__(self, run_dir: Path, metrics: Sequence[str]):
        self.path = run_dir / METRICS_FILE
        self.tb_dir = run_dir / TENSORBOARD_DIR
        self.header = columns(metrics)
        self.writer: Any = None

    def open(self, epoch: int, step: int) -> None:
        """Start at `epoch` epochs and `step` steps done (0, 0 for a new run): the CSV keeps the rows of
        the epochs done, TensorBoard purges any event after `step`."""
        try:
            text = self.path.read_text()
        except OSError:
            text = ""
        rows = kept_rows(text, self.header, epoch + 1)
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([self.header, *rows])
        with atomic_file(self.path) as f:
            f.write(buf.getvalue().encode())
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # the runtime extra brings it; a bare install still trains
            print(f"warning: no TensorBoard events ({exc}): pip install tensorboard", file=sys.stderr)
            return
        if self.tb_dir.is_symlink():  # everything a run writes stays inside its run directory
            print(f"warning: no TensorBoard events: {self.tb_dir} is a symbolic link", file=sys.stderr)
            return
        self.writer = SummaryWriter(str(self.tb_dir), purge_step=step + 1 if step else None)

    def epoch(self, p: Progress, values: Mapping[str, float]) -> None:
        """Record a finished epoch: `p` (its history entry), `values` (its validation metrics, or {})."""
        now = time.time()
        with open(self.path, "a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow(row(self.header, p, values, now))
        if self.writer is not None:
            scalars = {"loss": p.loss, "samples_per_second": p.samples_per_second, **values}
            for tag, value in scalars.items():
                if value is not None:
                    self.writer.add_scalar(tag, value, p.step, walltime=now)
            self.writer.flush()

    def final(self, step: int, metrics: Mapping[str, Any]) -> None:
        """The end of training: its test metrics as TensorBoard scalars; everything flushed and closed."""
        if self.writer is None:
            return
        for tag, value in metrics.items():
            if tag.startswith("test_") and isinstance(value, float):
                self.writer.add_scalar(tag, value, step)
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
