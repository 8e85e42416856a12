"""The executor-level training metrics: what both executors export about each training they run, from
its status (the operator for every GraphTraining it reconciled, the local launcher for its one run).

Defined once here, beside the status schema they read, so that the two executors cannot disagree on a
name, a label or a meaning: both register metrics.py's Collector over training_samples() (this module
imports no prometheus_client, so the spec side stays light). Values are read at scrape time from the
latest status, so a scrape always agrees with status.json or the GraphTraining's status.

Every family is a gauge. `graphtrain_training_phase` has one sample per phase (1 for the current one,
0 for the others), so `sum by (phase)` counts trainings by phase and a phase that no training is in
reads 0, not absent. `graphtrain_training_last_progress_timestamp_seconds` is absent until the first
progress report: an alert on `time() - ... > N` must not fire for a training that has not started.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import NamedTuple

from graphtrain.contract.spec import GraphTrainingStatus, Phase

TRAINING_LABELS = ("namespace", "training")
# Scrape jobs, as a local run's targets file and the chart's monitors name them (dashboards select by them)
JOB_SHARD = "graphtrain-shard"
JOB_TRAINER = "graphtrain-trainer"
JOB_LAUNCHER = "graphtrain-launcher"
JOB_API = "graphtrain-api"


@dataclass(frozen=True)
class Family:
    """A gauge family: its name, help text and label names (in the order of its label values)."""

    name: str
    help: str
    labels: tuple[str, ...] = TRAINING_LABELS


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


PHASE = Family(
    "graphtrain_training_phase",
    "1 for the training's current phase, 0 for every other phase",
    (*TRAINING_LABELS, "phase"),
)
RESTARTS = Family("graphtrain_training_restarts", "Trainer restarts so far (status.restarts)")
SHARD_RESTARTS = Family(
    "graphtrain_training_shard_restarts",
    "Times a shard server was restarted (status.shards[].restarts)",
    (*TRAINING_LABELS, "shard"),
)
EPOCH = Family("graphtrain_training_epoch", "Epochs completed (status.progress.epoch)")
PROGRESS_RATIO = Family(
    "graphtrain_training_progress_ratio", "Epochs completed over epochs planned (0 while unknown)"
)
LAST_PROGRESS = Family(
    "graphtrain_training_last_progress_timestamp_seconds",
    "Unix time of the training's last progress report (status.progress.updatedAt)",
)
FAMILIES = (PHASE, RESTARTS, SHARD_RESTARTS, EPOCH, PROGRESS_RATIO, LAST_PROGRESS)


def unix_seconds(stamp: str | None) -> float | None:
    """An RFC 3339 time as unix seconds; None when absent or unreadable (a naive time is UTC)."""
    if not stamp:
        return None
    try:
        when = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def training_samples(namespace: str, name: str, status: GraphTrainingStatus) -> list[Sample]:
    """The samples of one training, from its status."""
    training = {"namespace": namespace, "training": name}
    samples = [
        Sample(PHASE.name, {**training, "phase": phase.value}, 1.0 if status.phase == phase else 0.0)
        for phase in Phase
    ]
    samples.append(Sample(RESTARTS.name, training, float(status.restarts)))
    samples += [
        Sample(SHARD_RESTARTS.name, {**training, "shard": str(s.index)}, float(s.restarts))
        for s in status.shards
    ]
    progress = status.progress
    epoch = progress.epoch if progress is not None else 0
    epochs = progress.epochs if progress is not None else 0
    samples.append(Sample(EPOCH.name, training, float(epoch)))
    samples.append(Sample(PROGRESS_RATIO.name, training, epoch / epochs if epochs else 0.0))
    stamp = unix_seconds(progress.updated_at) if progress is not None else None
    if stamp is not None:
        samples.append(Sample(LAST_PROGRESS.name, training, stamp))
    return samples


def grouped(samples: list[Sample]) -> list[tuple[Family, list[tuple[list[str], float]]]]:
    """Every family (one without samples too) with its samples' label values in the family's label
    order: what a Collector turns into gauge families, one add_metric per sample."""
    by_name: dict[str, list[tuple[list[str], float]]] = {f.name: [] for f in FAMILIES}
    families = {f.name: f for f in FAMILIES}
    for s in samples:
        by_name[s.name].append(([s.labels[label] for label in families[s.name].labels], s.value))
    return [(families[name], values) for name, values in by_name.items()]
