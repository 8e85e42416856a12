"""A trainer's reports and log lines. After every step window and every epoch the epoch loop hands its
tally to the Reporter, which stamps it, logs a line for it (rank 0), sets the trainer's gauges
(train/metrics.py) and gives it to every sink (sinks.py); at the end of an epoch rank 0 first appends
it to the progress history (kept by the same sinks) and to metrics.csv and TensorBoard (history.py).
A trainer's log lines start with an ISO-8601 timestamp.
"""

from __future__ import annotations

import datetime as dt
import sys

from graphtrain.contract import reporting
from graphtrain.contract.spec import Progress
from graphtrain.runtime.train.history import MetricsLog
from graphtrain.runtime.train.metrics import TrainerMetrics
from graphtrain.runtime.train.sinks import ProgressSink
from graphtrain.runtime.train.tally import TrainerProgress


def log(text: str) -> None:
    """One line of a trainer's log (stderr), stamped with the local time in ISO-8601."""
    stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    print(f"{stamp} {text}", file=sys.stderr, flush=True)


def line(p: TrainerProgress, entry: Progress, epoch_end: bool) -> str:
    """What the trainer log says of a report: a finished epoch's line, the final report's summary (the
    epochs done and the test metric: `epoch 200/200 ...`, not a 201st epoch running), else the line of
    the epoch running (its tally counts the epochs done, so that one is epoch + 1)."""
    if epoch_end:
        return reporting.epoch_line(entry)
    return p.summary() if p.final else reporting.in_epoch_line(p)


class Reporter:
    """Stamps each report, logs a line for it (rank 0, when asked to), sets the trainer's gauges and
    hands it to every sink; at the end of an epoch, rank 0 appends it to the history first (and to
    metrics.csv and TensorBoard through `metrics_log`)."""

    def __init__(
        self,
        rank: int,
        sinks: list[ProgressSink],
        echo: bool = True,
        metrics: TrainerMetrics | None = None,
        metrics_log: MetricsLog | None = None,
    ):
        self.rank = rank
        self.sinks = sinks
        self.echo = echo and rank == 0
        self.metrics = metrics
        self.metrics_log = metrics_log if rank == 0 else None
        self.history: list[Progress] | None = None  # rank 0's, read from the sinks at the first epoch end

    def report(self, p: TrainerProgress, epoch_end: bool = False, evaluated: bool = False) -> None:
        """`epoch_end`: an epoch just finished (rank 0 appends the report to the history, with its eval
        metric only if `evaluated` this epoch: an epoch between evaluations repeated the last one's)."""
        p.updated_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        report = p.to_spec()
        if self.metrics is not None:
            self.metrics.reported(report)
        stale = {"eval_metric": None, "eval_value": None}
        entry = report if evaluated or not epoch_end else report.model_copy(update=stale)
        if self.echo:
            log(f"[trainer] {line(p, entry, epoch_end)}")
        history = None
        if epoch_end and self.rank == 0:
            if self.history is None:
                self.history = next((h for h in (s.load_history() for s in self.sinks) if h), [])
            history = self.history = reporting.append_history(self.history, entry)
            if self.metrics_log is not None:
                self.metrics_log.epoch(entry, p.evaluation if evaluated else {})
        if p.final and self.metrics_log is not None:
            self.metrics_log.final(report.step, p.metrics)
        for sink in self.sinks:
            sink.write(report, p.final, history)
