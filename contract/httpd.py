"""The small HTTP endpoints of every process: Prometheus /metrics, /livez, /readyz, /healthz.

One implementation for the operator (health and metrics ports) and the runtime (a shard server's,
trainer's or launcher's metrics port): the operator imports this module and nothing else of the
runtime (.importlinter allows it: stdlib and prometheus_client only).

Why asyncio and not a thread per connection: the kubelet's probes are served here, and a probe that
cannot get through restarts the process. With a thread per connection and a cap on them, 32 idle
half-requests (anyone who can reach the port) kept every probe out for their timeout: a liveness
failure, hence a restart, on demand. Here an idle connection costs a file descriptor and a few KB, not
a thread; one event loop reads requests, each with TIMEOUT seconds to arrive; the routes run on a small
pool (a metrics scrape or a check never blocks the loop). At MAX_CONNECTIONS open connections, a new one
evicts the oldest that has not finished sending its request: the attacker's idle sockets go, the probe
(whose request arrives with its connection) gets through. A route's answer is written with TIMEOUT
seconds to drain, so a client that never reads is dropped too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]  # (fine?, why)
Route = Callable[[], tuple[int, str, bytes]]  # status, content type, body
TIMEOUT = 5.0  # seconds a request may take to arrive, and its answer to be read
MAX_CONNECTIONS = 256  # open at once; beyond it the oldest unfinished request is dropped
BACKLOG = 128  # accepted by the kernel before the loop takes them
MAX_HEADER_BYTES = 16 * 1024  # request line and headers; a body is never read (GET only)
ROUTE_WORKERS = 4  # routes running at once


def probe(check: Check) -> Route:
    """A probe's route: 200 with the check's reason when it is fine, 503 otherwise; a check that
    raises is a failed probe, not a crashed endpoint."""

    def route() -> tuple[int, str, bytes]:
        try:
            fine, why = check()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            fine, why = False, f"check failed: {type(exc).__name__}"
        return (200 if fine else 503), "text/plain; charset=utf-8", (why + "\n").encode()

    return route


def metrics(registry: CollectorRegistry) -> Route:
    """GET /metrics: the registry in the Prometheus text format."""
    return lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry))


@dataclass
class Server:
    """A running endpoint; close() stops it (idempotent)."""

    name: str
    address: tuple[str, int]
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    pool: concurrent.futures.ThreadPoolExecutor
    _server: asyncio.base_events.Server | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def close(self) -> None:
        if self.loop.is_closed() or not self.thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)


class _Connections:
    """The open connections, oldest first, and whether each still waits for its request."""

    def __init__(self, cap: int):
        self.cap = cap
        self.open: OrderedDict[asyncio.StreamWriter, bool] = OrderedDict()  # writer -> still reading

    def admit(self, writer: asyncio.StreamWriter) -> None:
        """Track `writer`; at the cap, drop the oldest connection still sending its request (or the
        oldest of all when every one is being answered)."""
        if len(self.open) >= self.cap:
            victim = next((w for w, reading in self.open.items() if reading), next(iter(self.open)))
            self.open.pop(victim)
            victim.transport.abort()
        self.open[writer] = True


def _response(status: int, content_type: str, body: bytes, head: bool) -> bytes:
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    allow = "Allow: GET, HEAD\r\n" if status == 405 else ""  # RFC 9110: a 405 says what is allowed
    header = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{allow}Connection: close\r\n\r\n"
    ).encode()
    return header if head else header + body


async def _handle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    routes: dict[str, Route],
    conns: _Connections,
    pool: concurrent.futures.Executor,
    timeout: float,
) -> None:
    conns.admit(writer)
    try:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            return  # silent, gone, or a header too long: dropped without an answer
        if writer in conns.open:
            conns.open[writer] = False  # answering: not evicted before an idle one
        parts = head.split(b"\r\n", 1)[0].split()
        method, target = (parts[0], parts[1].decode("latin-1")) if len(parts) == 3 else (b"", "")
        route = routes.get(target.split("?", 1)[0])
        if method not in (b"GET", b"HEAD"):
            answer = (405 if method else 400), "text/plain", b"GET only\n"
        elif route is None:
            answer = 404, "text/plain", b"not found\n"
        else:
            try:
                answer = await asyncio.get_running_loop().run_in_executor(pool, route)
            except Exception as exc:  # noqa: BLE001 - a broken route is a 500, never a dead endpoint
                answer = 500, "text/plain", f"{type(exc).__name__}\n".encode()
        writer.write(_response(*answer, head=method == b"HEAD"))
        with contextlib.suppress(TimeoutError, OSError):  # one that does not read is dropped below
            await asyncio.wait_for(writer.drain(), timeout)
    finally:
        conns.open.pop(writer, None)
        if writer.transport.get_write_buffer_size():
            writer.transport.abort()  # unread: no lingering with its answer in our buffer
        else:
            writer.close()


def serve(
    name: str,
    address: tuple[str, int],
    routes: dict[str, Route],
    timeout: float = TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> Server:
    """Serve `routes` (GET path -> route) on `address` ((host, 0): any free port) from an event loop on
    a daemon thread of its own.

    Raises:
        OSError: the address cannot be bound.
    """
    loop = asyncio.new_event_loop()
    pool = concurrent.futures.ThreadPoolExecutor(ROUTE_WORKERS, thread_name_prefix=f"{name}-route")
    conns = _Connections(max_connections)
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    try:
        server = loop.run_until_complete(
            asyncio.start_server(
                lambda r, w: _handle(r, w, routes, conns, pool, timeout),
                address[0],
                address[1],
                family=family,
                backlog=BACKLOG,
                limit=MAX_HEADER_BYTES,
                reuse_address=True,
            )
        )
    except BaseException:
        loop.close()
        pool.shutdown(wait=False)
        raise
    host, port = server.sockets[0].getsockname()[:2]

    def run() -> None:
        try:
            loop.run_forever()
        finally:
            server.close()
            for writer in list(conns.open):
                writer.transport.abort()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    thread = threading.Thread(target=run, name=f"{name}-http", daemon=True)
    thread.start()
    return Server(name, (str(host), int(port)), loop, thread, pool, server)


def serve_metrics(
    registry: CollectorRegistry,
    host: str,
    port: int,
    checks: dict[str, Check] | None = None,
    timeout: float = TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> Server:
    """A process' metrics port: /metrics from `registry` and each check as a probe route (/livez,
    /readyz); `server.port` is the bound port.

    Raises:
        OSError: the address cannot be bound.
    """
    routes = {"/metrics": metrics(registry), **{path: probe(c) for path, c in (checks or {}).items()}}
    return serve("metrics", (host, port), routes, timeout, max_connections)
