"""Prometheus metrics of a shard server (one registry per server, so tests can read their own).

Names follow the conventions: counters end in _total, durations are _seconds histograms, sizes in
bytes; table gauges are read at scrape time by a collector rather than updated on every request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from graphtrain.runtime.kvstore.protocol import OPS

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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


class ServerMetrics:
    def __init__(
        self, shard: int, describe: Callable[[], dict[str, Any]], registry: CollectorRegistry | None = None
    ):
        self.registry = registry or CollectorRegistry()
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
            "Requests refused before reaching a handler (malformed, unauthenticated)",
            ["shard", "reason"],
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
        for reason in ("malformed", "unauthenticated"):
            self.bad_requests.labels(s, reason)
        self.registry.register(TableCollector(describe, shard))
