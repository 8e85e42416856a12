"""What create_app needs besides its source: authentication and where its metrics go."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from graphtrain.api.auth import TokenFile


@dataclass
class Settings:
    """tokens None: no authentication (the CLI allows it on loopback only, auth.check_bind).
    metrics_open: /metrics needs no token (e.g. a NetworkPolicy admits only Prometheus).
    registry: the app's own metrics registry (one per app: tests build many apps)."""

    tokens: TokenFile | None = None
    metrics_open: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    title: str = "graphtrain status API"
