"""The operator's health and metrics endpoints: one small HTTP server on its own thread for each.

- health (`--health-address`, default 0.0.0.0:8081): GET /healthz answers 200 while the process is
  sound, a standby too (a liveness probe restarts it otherwise), /readyz 200 once it is ready: a leader
  whose handlers started, a standby that reached the API server (a Deployment of two replicas must not
  wait for the standby to lead before it counts as rolled out).
- metrics (`--metrics-address`, default 0.0.0.0:8080): GET /metrics in the Prometheus text format from
  the operator's own registry: `graphtrain_operator_leader` (1 while this replica runs the handlers)
  and the process and platform collectors.

Port 0 takes a free port; the bound address is logged and returned, so tests and people see it.
Each connection has a socket timeout (a client that sends half a request is dropped after it) and at
most MAX_CONNECTIONS are served at once: one over the cap is closed at once, so idle connections
cannot pile up threads (6000 idle half-requests held ~490 threads before).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import prometheus_client as prom

log = logging.getLogger("graphtrain.operator")
Check = Callable[[], tuple[bool, str]]  # (fine?, why)
Route = Callable[[], tuple[int, str, bytes]]  # status, content type, body
TIMEOUT = 5.0  # seconds a connection may stay silent (a probe sends its request at once)
MAX_CONNECTIONS = 32  # served at once; probes and a scraper need a handful
BACKLOG = 64  # accepted by the kernel before the server takes them


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


def probe(check: Check) -> Route:
    def route() -> tuple[int, str, bytes]:
        fine, why = check()
        return (200 if fine else 503), "text/plain; charset=utf-8", (why + "\n").encode()

    return route


class OperatorMetrics:
    """The operator's metrics, in a registry of their own (tests make as many as they like)."""

    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        prom.ProcessCollector(registry=self.registry)
        prom.PlatformCollector(registry=self.registry)
        self.leader = prom.Gauge(
            "graphtrain_operator_leader",
            "1 while this operator replica holds the leader lease and runs the handlers, else 0",
            registry=self.registry,
        )
        self.leader.set(0)

    def route(self) -> tuple[int, str, bytes]:
        return 200, prom.CONTENT_TYPE_LATEST, prom.generate_latest(self.registry)


@dataclass
class Server:
    name: str
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(
    name: str,
    address: tuple[str, int],
    routes: dict[str, Route],
    timeout: float = TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> Server:
    """Serve `routes` (GET path -> handler) on `address` from a daemon thread, each connection on its
    own thread for at most `timeout` silent seconds, at most `max_connections` at once.

    Raises:
        OSError: the address cannot be bound.
    """

    slots = threading.BoundedSemaphore(max_connections)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            route = routes.get(self.path.split("?", 1)[0])
            status, content_type, body = route() if route else (404, "text/plain", b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - probes are not news
            pass

    Handler.timeout = timeout  # StreamRequestHandler sets it on the connection's socket

    class HTTPServer(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        daemon_threads = True
        request_queue_size = BACKLOG
        block_on_close = False

        def process_request(
            self, request: socket.socket | tuple[bytes, socket.socket], client: object
        ) -> None:
            """A thread for the connection if a slot is free, else close it at once."""
            if not slots.acquire(blocking=False):
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client)
            except BaseException:
                slots.release()
                raise

        def process_request_thread(
            self, request: socket.socket | tuple[bytes, socket.socket], client: object
        ) -> None:
            try:
                super().process_request_thread(request, client)
            finally:
                slots.release()

    httpd = HTTPServer(address, Handler)
    thread = threading.Thread(target=httpd.serve_forever, name=f"{name}-endpoint", daemon=True)
    thread.start()
    server = Server(name, httpd, thread)
    log.info("%s endpoint on %s (%s)", name, server.url, ", ".join(sorted(routes)))
    return server
