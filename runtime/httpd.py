"""A process' metrics port: Prometheus /metrics plus /livez and /readyz for Kubernetes probes.

prometheus_client's own server answers /metrics only; a liveness probe needs an answer that does not
depend on the token (an httpGet probe carries none) and that reflects whether the process still makes
progress, not merely whether a port is open. The checks are callables returning (ok, reason): 200 with
the reason when ok, 503 otherwise. The endpoint reads state only; it never takes a request's lock.

Bounded as the operator's endpoints are (operator/endpoints.py, same numbers): each connection may stay
silent TIMEOUT seconds (a client that sends half a request is dropped after it), at most
MAX_CONNECTIONS are served at once (one over the cap is closed at once) and the kernel queues BACKLOG;
idle connections held a thread each before, 300 of them 300 threads, on the port the probes use.
Why two implementations: the operator may import only the spec package of the runtime
(.importlinter), and an HTTP server is no part of the executors' contract; the runtime's serves a WSGI
app (prometheus_client's), the operator's plain routes.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

Check = Callable[[], tuple[bool, str]]
Request = socket.socket | tuple[bytes, socket.socket]
TIMEOUT = 5.0  # seconds a connection may stay silent (a probe or a scrape sends its request at once)
MAX_CONNECTIONS = 32  # served at once; probes and a scraper need a handful
BACKLOG = 64  # accepted by the kernel before the server takes them


class _Quiet(WSGIRequestHandler):
    server: BoundedWSGIServer

    def setup(self) -> None:
        self.timeout = self.server.connection_timeout  # StreamRequestHandler sets it on the socket
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class' name
        pass  # a scrape every few seconds must not fill the log


class BoundedWSGIServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most `max_connections` at once, each silent for `timeout` seconds at
    most; a connection over the cap is closed at once."""

    daemon_threads = True
    request_queue_size = BACKLOG
    block_on_close = False

    def __init__(self, address: tuple[str, int], timeout: float, max_connections: int):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.connection_timeout = timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, _Quiet)

    def process_request(self, request: Request, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Request, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Request, client_address: Any) -> None:
        """A client that went silent or away is routine (dropped); anything else is printed."""
        if not isinstance(sys.exc_info()[1], OSError):  # TimeoutError, ConnectionResetError, ...
            super().handle_error(request, client_address)


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
    registry: CollectorRegistry,
    host: str,
    port: int,
    checks: dict[str, Check] | None = None,
    timeout: float = TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> tuple[BoundedWSGIServer, int]:
    """Serve on a daemon thread; returns (server, bound port) (port 0: any free one).

    Raises:
        OSError: the address cannot be bound.
    """
    httpd = BoundedWSGIServer((host, port), timeout, max_connections)
    httpd.set_app(app(registry, checks or {}))
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd, httpd.server_port
