"""The launcher's own metrics: the executor-level training metrics of its one run (spec.telemetry, the
names the operator exports for every GraphTraining), read at scrape time from the status it last built,
and its process' collectors. Served on 127.0.0.1, port 0; the port goes into the run's targets file."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import prometheus_client as prom
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from graphtrain.runtime import spec as S
from graphtrain.runtime.spec import telemetry


class TrainingCollector(Collector):
    """The training's gauges from `status()` (None before the first status: families without samples).
    The operator has its own (operator/endpoints.py): it may import nothing of the runtime but the spec."""

    def __init__(self, namespace: str, name: str, status: Callable[[], S.GraphTrainingStatus | None]):
        self.namespace, self.name, self._status = namespace, name, status

    def collect(self) -> Iterator[GaugeMetricFamily]:
        st = self._status()
        samples = telemetry.training_samples(self.namespace, self.name, st) if st is not None else []
        for family, values in telemetry.grouped(samples):
            gauge = GaugeMetricFamily(family.name, family.help, labels=list(family.labels))
            for labels, value in values:
                gauge.add_metric(labels, value)
            yield gauge


def registry(
    namespace: str, name: str, status: Callable[[], S.GraphTrainingStatus | None]
) -> prom.CollectorRegistry:
    reg = prom.CollectorRegistry()
    prom.ProcessCollector(registry=reg)
    reg.register(TrainingCollector(namespace, name, status))
    return reg
