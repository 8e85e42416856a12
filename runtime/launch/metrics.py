"""The launcher's own metrics: the executor-level training metrics of its one run (contract/metrics.py's
collector, as the operator exports them for every GraphTraining), read at scrape time from the status it
last built, and its process' collectors. Served on 127.0.0.1, port 0; the port goes into the run's
targets file."""

from __future__ import annotations

from collections.abc import Callable

import prometheus_client as prom

from graphtrain.contract.metrics import TrainingCollector
from graphtrain.contract.spec import GraphTrainingStatus


def registry(
    namespace: str, name: str, status: Callable[[], GraphTrainingStatus | None]
) -> prom.CollectorRegistry:
    """The launcher's registry: its process and the training `name` in `namespace` (no samples before
    the first status)."""
    reg = prom.CollectorRegistry()
    prom.ProcessCollector(registry=reg)

    def statuses() -> list[tuple[str, str, GraphTrainingStatus]]:
        st = status()
        return [] if st is None else [(namespace, name, st)]

    reg.register(TrainingCollector(statuses))
    return reg
