"""A trainer's Prometheus metrics (one registry per trainer; `graphtrain train --metrics-port` serves it).

The step time is split into the stages a step goes through, timed where the loops do them:
- sample: drawing the batch (node classification: waiting for the loader's next sampled batch, whose
  features and labels its thread fetched; KGE: the batch's triples and their negatives),
- pull: the embedding rows of the batch from the shard servers (it waits for the previous step's
  pushes to be applied first, which is part of what a pull costs),
- forward_backward: the model, the loss, backward and the dense optimizer's step (with several
  trainers taken at the next step's start, after the wait for the gradients' average: gradsync.py),
- push: handing the sparse gradients to the shard servers.
A StageClock marks the end of each stage and observes pre-bound histogram children once per step: on the
host a perf_counter() per stage, on a GPU a CUDA event per stage on the trainer's stream, read once the
device has passed it. No synchronisation is added to a step, a few microseconds against milliseconds.

Counters are pre-initialised (a rate over a trainer that has not stepped yet reads 0, not absent);
`graphtrain_trainer_eval_metric` is not (a 0 accuracy before the first evaluation would be a lie).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, cast

import prometheus_client as prom
import torch
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from graphtrain.contract.spec import Progress
from graphtrain.runtime.kvstore.client.reads import messages, reads

STAGES = ("sample", "pull", "forward_backward", "push")
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class TrainerMetrics:
    def __init__(self, rank: int, registry: prom.CollectorRegistry | None = None):
        self.registry = registry or prom.CollectorRegistry()
        prom.ProcessCollector(registry=self.registry)
        prom.PlatformCollector(registry=self.registry)
        self.rank = r = str(rank)
        reg = self.registry
        self.steps = prom.Counter(
            "graphtrain_trainer_steps_total", "Optimizer steps taken", ["rank"], registry=reg
        ).labels(r)
        self.samples = prom.Counter(
            "graphtrain_trainer_samples_total",
            "Samples trained (seed nodes, or positive triples)",
            ["rank"],
            registry=reg,
        ).labels(r)
        self.step_seconds = prom.Histogram(
            "graphtrain_trainer_step_seconds",
            "Time of one whole optimizer step (the sum of its stages)",
            ["rank"],
            buckets=STEP_BUCKETS,
            registry=reg,
        ).labels(r)
        stage = prom.Histogram(
            "graphtrain_trainer_stage_seconds",
            "Time of one stage of a step: sample, pull, forward_backward or push",
            ["rank", "stage"],
            buckets=STEP_BUCKETS,
            registry=reg,
        )
        self.stages = {s: stage.labels(r, s) for s in STAGES}
        self.loss = prom.Gauge(
            "graphtrain_trainer_loss", "Training loss of the latest reported step", ["rank"], registry=reg
        ).labels(r)
        self.eval_metric = prom.Gauge(
            "graphtrain_trainer_eval_metric",
            "The latest evaluation metric (val_accuracy, val_mrr, ..., test_* at the end)",
            ["rank", "metric"],
            registry=reg,
        )
        self.epoch = prom.Gauge(
            "graphtrain_trainer_epoch", "Epochs completed", ["rank"], registry=reg
        ).labels(r)
        self.last_report = prom.Gauge(
            "graphtrain_trainer_last_report_timestamp_seconds",
            "Unix time of this trainer's last progress report",
            ["rank"],
            registry=reg,
        ).labels(r)

        self.registry.register(_Reads(r))
        self.registry.register(_Exchanged(r))

        # the running epoch's stage totals, for the trainer's log line at its end (the histograms keep
        # the whole run's; a log reader wants this epoch's mean without a Prometheus at hand)
        self.epoch_spent: dict[str, float] = {}
        self.epoch_steps = 0
        # the process' messages to the shard servers where the epoch's steps began and ended
        self._messages_at = self._messages_end = messages()

    def epoch_stages(self) -> str:
        """The running epoch's mean milliseconds per step by stage ("sample 3.1 ms, pull 2.0 ms, ..."),
        and the messages sent to shard servers per step, by path (round trips: a fast lane batch is one;
        the loader thread's included), then the totals start over ("" after an epoch without steps)."""
        steps, spent = self.epoch_steps, self.epoch_spent
        end, at = self._messages_end, self._messages_at
        self.epoch_spent, self.epoch_steps = {}, 0
        if not steps:
            return ""
        said = ", ".join(f"{s} {1000 * spent[s] / steps:.1f} ms" for s in STAGES if s in spent)
        sent = {p: (n - at.get(p, 0)) / steps for p, n in sorted(end.items()) if n > at.get(p, 0)}
        return said + ("; messages: " + ", ".join(f"{p} {n:.1f}" for p, n in sent.items()) if sent else "")

    def steps_begin(self) -> None:
        """The epoch's steps begin: messages from here on are theirs (not an evaluation's)."""
        self._messages_at = self._messages_end = messages()

    def steps_end(self) -> None:
        self._messages_end = messages()

    def epoch_reads(self) -> str:
        """The rows and seeds read so far, by shard and path ("shard 0: shared_memory 100 %, ..."):
        whether partition locality took (its own shard read through shared memory)."""
        by_shard: dict[int, dict[str, int]] = {}
        for (shard, path), n in reads().items():
            by_shard.setdefault(shard, {})[path] = n
        parts = []
        for shard, paths in sorted(by_shard.items()):
            total = sum(paths.values()) or 1
            said = ", ".join(f"{path} {100 * n / total:.0f} %" for path, n in sorted(paths.items()) if n)
            parts.append(f"shard {shard}: {said}")
        return "; ".join(parts)

    def stepped(self, samples: int) -> None:
        self.steps.inc()
        self.samples.inc(samples)

    def reported(self, progress: Progress, at: float | None = None) -> None:
        """A progress report went out: its loss, epoch and evaluation (rank 0's: every rank has the same
        all-reduced value, and a dashboard must not average copies), and when."""
        self.last_report.set(time.time() if at is None else at)
        self.epoch.set(progress.epoch)
        if progress.loss is not None:
            self.loss.set(progress.loss)
        if self.rank == "0" and progress.eval_metric and progress.eval_value is not None:
            self.eval_metric.labels(self.rank, progress.eval_metric).set(progress.eval_value)

    def clock(self, device: torch.device | None = None) -> StageClock:
        """A clock of this trainer's steps; on a GPU its marks are CUDA events (device time, no wait)."""
        return StageClock(self, cuda_mark if device is not None and device.type == "cuda" else HostMark)


class Mark(Protocol):
    """A point of a step: where the host stood (HostMark) or the device's stream got to (a CUDA event)."""

    def query(self) -> bool: ...  # reached yet (a host mark always is)

    def synchronize(self) -> None: ...  # wait until it is

    def elapsed_time(self, end: Any) -> float: ...  # milliseconds from this mark to `end`


class HostMark:
    """The host's perf_counter at the mark: a CPU trainer's stages are the host's time."""

    def __init__(self) -> None:
        self.at = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: HostMark) -> float:
        return 1e3 * (end.at - self.at)


def cuda_mark() -> Mark:
    """A timing event recorded on the current stream: a GPU trainer's stages are the device timeline's
    time between their ends, read once the device got there, so timing a step adds no wait to it (a
    synchronisation per stage would stall the queue of launches the device works through)."""
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return cast(Mark, event)


class StageClock:
    """Times a step's stages: start(), then lap(stage) as each piece of a stage ends (a stage may come in
    pieces: the dense step after the push is forward_backward's), then done() observes each stage the
    step had once, and the whole step. A stage a step does not have (no embedding: no pull, no push) is
    not observed. Each point is a mark (`marker()`): a step is observed once its last mark is reached,
    at once on the host, a step or so later on a GPU; flush() waits for every step done so far."""

    def __init__(self, metrics: TrainerMetrics, marker: Callable[[], Mark] = HostMark):
        self.metrics, self.marker = metrics, marker
        self.marks: list[tuple[str, Mark]] = [("", marker())]
        self.pending: deque[list[tuple[str, Mark]]] = deque()

    def start(self) -> None:
        self.marks = [("", self.marker())]

    def lap(self, stage: str) -> None:
        self.marks.append((stage, self.marker()))

    def done(self) -> None:
        self.pending.append(self.marks)
        self.marks = []
        while self.pending and self.pending[0][-1][1].query():
            self._observe(self.pending.popleft())

    def flush(self) -> None:
        """Observe every step done so far (at an epoch's end: its stage line needs them all)."""
        while self.pending:
            marks = self.pending.popleft()
            marks[-1][1].synchronize()
            self._observe(marks)

    def _observe(self, marks: list[tuple[str, Mark]]) -> None:
        spent: dict[str, float] = {}
        for (_, begin), (stage, end) in itertools.pairwise(marks):
            spent[stage] = spent.get(stage, 0.0) + begin.elapsed_time(end) / 1e3
        epoch = self.metrics.epoch_spent
        for stage, seconds in spent.items():
            self.metrics.stages[stage].observe(seconds)
            epoch[stage] = epoch.get(stage, 0.0) + seconds
        self.metrics.epoch_steps += 1
        self.metrics.step_seconds.observe(marks[0][1].elapsed_time(marks[-1][1]) / 1e3)


class _Reads(Collector):
    """graphtrain_trainer_rows_read_total{shard, path}: rows and sampled seeds read from each shard,
    through shared memory, in process or by a request (kvstore/client/reads.py)."""

    def __init__(self, rank: str):
        self.rank = rank

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "graphtrain_trainer_rows_read",
            "Rows and sampled seeds read from each shard, by path: shared_memory, in_process, socket (a ZMQ "
            "request) or fast_lane (a request the server's fast lane answered)",
            labels=["rank", "shard", "path"],
        )
        for (shard, path), n in sorted(reads().items()):
            family.add_metric([self.rank, str(shard), path], n)
        yield family


class _Exchanged(Collector):
    """graphtrain_trainer_collective_bytes_total{direction}: the bytes this trainer's collective tables
    moved to and from the other trainers (lookups, rows, gradients; collective/exchange.py), what
    `graphtrain plan` predicts as their all-to-all."""

    def __init__(self, rank: str):
        self.rank = rank

    def collect(self) -> Any:
        from graphtrain.runtime.collective.exchange import moved

        family = CounterMetricFamily(
            "graphtrain_trainer_collective_bytes",
            "Bytes this trainer's collective tables moved to (sent) and from (received) the other trainers",
            labels=["rank", "direction"],
        )
        for direction, n in sorted(moved().items()):
            family.add_metric([self.rank, direction], n)
        yield family
