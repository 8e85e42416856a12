"""The one Prometheus collector of the executor-level training metrics (telemetry.py's families).

The operator exports them for every GraphTraining it reconciled, the local launcher for its one run:
both register a TrainingCollector over a function that returns the trainings' latest statuses, so the
values are read at scrape time and a scrape always agrees with the status the executor last wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from graphtrain.contract import telemetry
from graphtrain.contract.spec import GraphTrainingStatus

# (namespace, name, status) of each training to export
Statuses = Callable[[], Iterable[tuple[str, str, GraphTrainingStatus]]]


class TrainingCollector(Collector):
    """Every training family, one sample set per training `statuses()` returns (a family without
    trainings is still exported, without samples)."""

    def __init__(self, statuses: Statuses):
        self._statuses = statuses

    def collect(self) -> Iterator[GaugeMetricFamily]:
        samples = [s for ns, name, st in self._statuses() for s in telemetry.training_samples(ns, name, st)]
        for family, values in telemetry.grouped(samples):
            gauge = GaugeMetricFamily(family.name, family.help, labels=list(family.labels))
            for labels, value in values:
                gauge.add_metric(labels, value)
            yield gauge
