"""A process' metrics port: Prometheus /metrics plus /livez and /readyz for Kubernetes probes.

prometheus_client's own server answers /metrics only; a liveness probe needs an answer that does not
depend on the token (an httpGet probe carries none) and that reflects whether the process still makes
progress, not merely whether a port is open. The checks are callables returning (ok, reason): 200 with
the reason when ok, 503 otherwise. The endpoint reads state only; it never takes a request's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

Check = Callable[[], tuple[bool, str]]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class' name
        pass  # a scrape every few seconds must not fill the log


def app(registry: CollectorRegistry, checks: dict[str, Check]) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        check = checks.get(environ.get("PATH_INFO", ""))
        if check is None:
            return metrics(environ, start_response)
        try:
            ok, reason = check()
        except Exception as exc:  # noqa: BLE001 - a failing check is a failed probe, not a crash
            ok, reason = False, f"check failed: {type(exc).__name__}"
        body = (reason + "\n").encode()
        start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
        return [body]

    return wsgi


def serve(
    registry: CollectorRegistry, host: str, port: int, checks: dict[str, Check] | None = None
) -> tuple[Any, int]:
    """Serve on a daemon thread; returns (server, bound port) (port 0: any free one)."""
    httpd = make_server(host, port, app(registry, checks or {}), ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd, httpd.server_port
