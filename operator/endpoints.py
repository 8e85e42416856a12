"""The operator's health and metrics endpoints: one small HTTP server on its own thread for each.

- health (`--health-address`, default 0.0.0.0:8081): GET /healthz answers 200 while the process is
  sound, a standby too (a liveness probe restarts it otherwise), /readyz 200 once it is ready: a leader
  whose handlers started, a standby that reached the API server (a Deployment of two replicas must not
  wait for the standby to lead before it counts as rolled out).
- metrics (`--metrics-address`, default 0.0.0.0:8080): GET /metrics in the Prometheus text format from
  the operator's own registry: `graphtrain_operator_leader` (1 while this replica runs the handlers),
  reconciles by result and their duration, failed Kubernetes API calls by verb, the restarts it
  decided by role, the executor-level training metrics of every GraphTraining it reconciled
  (spec.telemetry, read at scrape time; dropped when the training is gone), and the process and
  platform collectors.

Port 0 takes a free port; the bound address is logged and returned, so tests and people see it.
The servers are contract/httpd.py's (one implementation for every process' probes: why asyncio, and
how idle or never-reading clients are kept from starving a probe, is said there).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import prometheus_client as prom
from pydantic import ValidationError

from graphtrain.contract import httpd
from graphtrain.contract.httpd import Check, Route, Server, probe
from graphtrain.contract.metrics import TrainingCollector
from graphtrain.contract.spec import GraphTrainingStatus

__all__ = ["Check", "Route", "Server", "probe", "serve", "parse_address", "OperatorMetrics"]

log = logging.getLogger("graphtrain.operator")


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:8080) as (host, port).

    Raises:
        ValueError: not HOST:PORT with a port in 0..65535.
    """
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 0.0.0.0:8080, 127.0.0.1:0, [::]:8080)")
    return host, int(port)


RESULTS = ("ok", "error", "skipped")  # skipped: not leading, or the training is gone
VERBS = ("get", "list", "create", "patch", "replace", "delete")
ROLES = ("trainer", "shard")
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def restarts(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, int]:
    """Restarts between two statuses (wire form) of a training, by role: the trainers' (status.restarts,
    which the operator decides) and the shard servers' (shards[].restarts, the kubelet's restarts the
    operator observed). Never negative: a status read back older counts nothing."""
    old_shards = {s.get("index"): int(s.get("restarts", 0)) for s in old.get("shards") or []}
    shard = sum(
        max(0, int(s.get("restarts", 0)) - old_shards.get(s.get("index"), 0)) for s in new.get("shards") or []
    )
    trainer = max(0, int(new.get("restarts", 0)) - int(old.get("restarts", 0)))
    return {"trainer": trainer, "shard": shard}


class OperatorMetrics:
    """The operator's metrics, in a registry of their own (tests make as many as they like)."""

    def __init__(self) -> None:
        self.registry = reg = prom.CollectorRegistry()
        prom.ProcessCollector(registry=reg)
        prom.PlatformCollector(registry=reg)
        self.leader = prom.Gauge(
            "graphtrain_operator_leader",
            "1 while this operator replica holds the leader lease and runs the handlers, else 0",
            registry=reg,
        )
        self.leader.set(0)
        self.crd_current = prom.Gauge(
            "graphtrain_operator_crd_current",
            "1 when the served GraphTraining CRD is this operator's version's (its schema digest), 0 when "
            "another (helm never upgrades a chart's CRD); NaN until the API server answered",
            registry=reg,
        )
        self.crd_current.set(float("nan"))  # not 0: unknown is not outdated (the alert asks == 0)
        self.reconciles = prom.Counter(
            "graphtrain_operator_reconciles_total",
            "Reconciles by result (skipped: not leading, or the training is gone)",
            ["result"],
            registry=reg,
        )
        self.reconcile_seconds = prom.Histogram(
            "graphtrain_operator_reconcile_seconds",
            "Time of one reconcile: observe, plan, apply",
            buckets=RECONCILE_BUCKETS,
            registry=reg,
        )
        self.api_errors = prom.Counter(
            "graphtrain_operator_api_errors_total",
            "Kubernetes API calls that failed, by verb (the 404s and 409s the operator expects excluded)",
            ["verb"],
            registry=reg,
        )
        self.restarts = prom.Counter(
            "graphtrain_operator_restarts_total",
            "Restarts by role: of trainers (decided by the operator), of shard servers (observed)",
            ["role"],
            registry=reg,
        )
        self.cache_behind_total = prom.Counter(
            "graphtrain_operator_cache_behind",
            "Reconciles whose plan on the child cache would have ended or restarted work that the API "
            "server's list of the children did not bear out (a watch behind: Plan.confirm)",
            registry=reg,
        )
        for result in RESULTS:  # pre-initialised: a rate reads 0, not absent
            self.reconciles.labels(result)
        for verb in VERBS:
            self.api_errors.labels(verb)
        for role in ROLES:
            self.restarts.labels(role)
        self._statuses: dict[tuple[str, str], GraphTrainingStatus] = {}
        self._lock = threading.Lock()
        reg.register(TrainingCollector(self._snapshot))

    def _snapshot(self) -> list[tuple[str, str, GraphTrainingStatus]]:
        with self._lock:
            return [(ns, name, st) for (ns, name), st in self._statuses.items()]

    def reconciled(self, result: str, seconds: float) -> None:
        self.reconciles.labels(result).inc()
        self.reconcile_seconds.observe(seconds)

    def api_error(self, verb: str) -> None:
        self.api_errors.labels(verb).inc()

    def cache_behind(self) -> None:
        self.cache_behind_total.inc()

    def training(self, namespace: str, name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """A reconcile of the training decided status `new` (wire form, merged over `old` as the status
        patch is: a None removes the field, as a suspension's `shards`): count its restarts and export
        it (a status that does not parse keeps the last one)."""
        for role, n in restarts(old, new).items():
            if n:
                self.restarts.labels(role).inc(n)
        merged = {k: v for k, v in {**old, **new}.items() if v is not None}  # None: removed (merge patch)
        try:
            status = GraphTrainingStatus.model_validate(merged)
        except ValidationError:
            log.warning("%s/%s: status not exported (it does not parse)", namespace, name)
            return
        with self._lock:
            self._statuses[(namespace, name)] = status

    def forget(self, namespace: str, name: str) -> None:
        """The training is gone: its metrics go too."""
        with self._lock:
            self._statuses.pop((namespace, name), None)

    def route(self) -> tuple[int, str, bytes]:
        return 200, prom.CONTENT_TYPE_LATEST, prom.generate_latest(self.registry)


def serve(
    name: str,
    address: tuple[str, int],
    routes: dict[str, Route],
    timeout: float = httpd.TIMEOUT,
    max_connections: int = httpd.MAX_CONNECTIONS,
) -> Server:
    """contract/httpd.py's server, its bound address logged (port 0: people and tests learn it here).

    Raises:
        OSError: the address cannot be bound.
    """
    server = httpd.serve(name, address, routes, timeout, max_connections)
    log.info("%s endpoint on %s (%s)", name, server.url, ", ".join(sorted(routes)))
    return server
