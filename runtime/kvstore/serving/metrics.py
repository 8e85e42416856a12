"""Prometheus metrics of a shard server (one registry per server, so tests can read their own).

Names follow the conventions: counters end in _total, durations are _seconds histograms, sizes in
bytes; table gauges are read at scrape time by a collector rather than updated on every request. A
registry made here also has the process collector (process_resident_memory_bytes, CPU seconds, open
files: the dashboards' memory panel); one given by the caller is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from graphtrain.runtime.kvstore.wire.protocol import OPS

REJECT_REASONS = ("malformed", "busy", "dropped")
DROP_REASONS = ("backlog", "stalled", "gone")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ScrapeHooks(Collector):
    """Hooks run at each scrape, before the server's counters are read (it is registered first): the
    fast lane adds its pulls to them there (fastlane.py) and yields its own families."""

    def __init__(self) -> None:
        self.hooks: list[Callable[[], Iterable[Metric]]] = []

    def collect(self) -> Iterator[Metric]:
        for hook in self.hooks:
            yield from hook()


class TableCollector(Collector):
    """Rows and bytes of every table, read at scrape time."""

    def __init__(self, tables: Callable[[], dict[str, Any]], shard: int):
        self._tables = tables  # not `describe`: prometheus_client calls a collector's describe() itself
        self.shard = str(shard)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = GaugeMetricFamily(
            "graphtrain_kvstore_table_rows", "Rows of a table held by this shard", labels=["shard", "tensor"]
        )
        size = GaugeMetricFamily(
            "graphtrain_kvstore_table_bytes",
            "Bytes of a table's rows held by this shard",
            labels=["shard", "tensor"],
        )
        for name, t in self._tables().items():
            rows.add_metric([self.shard, name], t["hi"] - t["lo"])
            size.add_metric([self.shard, name], t["bytes"])
        yield rows
        yield size


class LoadCollector(Collector):
    """Queued requests, busy workers and open connections' backlogs, read at scrape time."""

    def __init__(self, load: Callable[[], dict[str, float]], shard: int):
        self._load = load
        self.shard = str(shard)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        load = self._load()
        for key, help_text in (
            ("queued_requests", "Requests waiting for a worker"),
            ("busy_workers", "Workers handling a request"),
            ("parked_streams", "Pull replies waiting for their client to read"),
            ("live", "1 while every thread of the server makes progress (the liveness verdict)"),
        ):
            g = GaugeMetricFamily(f"graphtrain_kvstore_{key}", help_text, labels=["shard"])
            g.add_metric([self.shard], float(load.get(key, 0)))
            yield g


class ServerMetrics:
    def __init__(
        self,
        shard: int,
        describe: Callable[[], dict[str, Any]],
        registry: CollectorRegistry | None = None,
        load: Callable[[], dict[str, float]] | None = None,
    ):
        if registry is None:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
        self.registry = registry
        self.scrape_hooks = ScrapeHooks()
        registry.register(self.scrape_hooks)
        labels = ["shard", "op"]
        self.requests = Counter(
            "graphtrain_kvstore_requests_total",
            "Requests served, by op and outcome",
            [*labels, "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "graphtrain_kvstore_request_seconds",
            "Request handling time",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rows_pulled = Counter(
            "graphtrain_kvstore_rows_pulled_total", "Rows sent by pull", ["shard"], registry=self.registry
        )
        self.rows_pushed = Counter(
            "graphtrain_kvstore_rows_pushed_total",
            "Rows received by push and push_grad",
            ["shard", "kind"],
            registry=self.registry,
        )
        self.optimizer = Histogram(
            "graphtrain_kvstore_optimizer_seconds",
            "Time applying sparse optimizer steps",
            ["shard"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "graphtrain_kvstore_rejected_requests_total",
            "Requests refused before reaching a handler (malformed; busy: the connection had too many "
            "queued; dropped: from a connection that was dropped)",
            ["shard", "reason"],
            registry=self.registry,
        )
        self.handshakes = Counter(
            "graphtrain_kvstore_handshakes_total",
            "Connections' handshakes, by result (refused: a wrong token; failed: no credentials or not ZMTP)",
            ["shard", "result"],
            registry=self.registry,
        )
        self.dropped_peers = Counter(
            "graphtrain_kvstore_dropped_peers_total",
            "Connections whose replies were dropped (backlog: too many unread; stalled: nothing read for "
            "too long; gone: disconnected with replies pending)",
            ["shard", "reason"],
            registry=self.registry,
        )
        self.nonfinite = Counter(
            "graphtrain_kvstore_nonfinite_rows_total",
            "Gradient rows holding NaN or infinity, by action (refused with their push, or skipped)",
            ["shard", "action"],
            registry=self.registry,
        )
        self.worker_restarts = Counter(
            "graphtrain_kvstore_worker_restarts_total",
            "Request workers restarted after their thread ended unexpectedly",
            ["shard"],
            registry=self.registry,
        )
        s = str(shard)
        self.shard = s
        for op in OPS:  # label values pre-initialised, so dashboards see zeros rather than gaps
            for outcome in ("ok", "error"):
                self.requests.labels(s, op, outcome)
            self.latency.labels(s, op)
        self.rows_pulled.labels(s)
        for kind in ("overwrite", "gradient"):
            self.rows_pushed.labels(s, kind)
        self.optimizer.labels(s)
        for reason in REJECT_REASONS:
            self.bad_requests.labels(s, reason)
        for result in ("accepted", "refused", "failed"):
            self.handshakes.labels(s, result)
        for reason in DROP_REASONS:
            self.dropped_peers.labels(s, reason)
        for action in ("refused", "skipped"):
            self.nonfinite.labels(s, action)
        self.worker_restarts.labels(s)
        self.registry.register(TableCollector(describe, shard))
        if load is not None:
            self.registry.register(LoadCollector(load, shard))
