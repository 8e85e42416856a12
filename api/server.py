"""Serving the app with uvicorn, bounded: at most `limit_concurrency` requests at once (more get 503
from uvicorn at once rather than queueing without end), idle keep-alive connections closed after a few
seconds, no access log on the hot path (/metrics counts every request).

uvicorn alone has no deadline for a request to arrive, and counts idle connections against
limit_concurrency: 256 connections that each sent half a request made every later request a 503, the
probes' too (a liveness restart on demand), and they were never closed. GuardedProtocol (uvicorn's
httptools protocol, given to it as `http`) adds the two missing bounds:
- a request must arrive and its answer be taken within REQUEST_SECONDS of the connection's start or of
  the previous answer (a half-sent request, or a client that never reads its answer, is cut off);
- a request's line and headers may take MAX_HEAD_BYTES, no more (httptools has no limit);
- at most MAX_OPEN connections are kept: a new one beyond that closes the oldest with no request in
  progress, so idle sockets cannot hold the port and limit_concurrency counts real requests.

BackgroundServer runs it on a thread beside another job (`graphtrain run --api`): started on port 0 or
a given one, `port` is the one bound, for the caller to announce (e.g. as a Prometheus target).
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

LIMIT_CONCURRENCY = 1024  # requests in progress (idle connections are evicted before they count)
MAX_OPEN = 512  # connections kept open
KEEP_ALIVE_SECONDS = 5
REQUEST_SECONDS = 10.0
MAX_HEAD_BYTES = 64 * 1024  # request line and headers (a GET has no body)
START_TIMEOUT = 10.0
# The collector's first generation runs every GC_THRESHOLD allocations instead of 700: with a snapshot
# of 100 trainings replaced every 2 s, full collections over every live object were the API's tail
# latency (paced at 200 requests/s: p99 143 ms with the default, 15 ms with this; bench/RESULTS.md).
GC_THRESHOLD = (100_000, 50, 1000)
BACKLOG = 2048  # uvicorn's own default

# each server's connections, oldest first (uvicorn keeps them in a set)
_open: weakref.WeakKeyDictionary[Any, OrderedDict[GuardedProtocol, None]] = weakref.WeakKeyDictionary()


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's protocol with a deadline per request and eviction of idle connections (see above)."""

    _guard: asyncio.TimerHandle | None = None
    _head_bytes = 0  # received since the last answer: the request line and headers being sent

    def data_received(self, data: bytes) -> None:
        """Bytes of a request not yet parsed count against MAX_HEAD_BYTES: httptools keeps an
        unfinished header in memory without a limit (one endless header held ~100 MB per connection
        before the deadline cut it), and no token is checked before the request is parsed."""
        if not self.busy:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self.transport.abort()
                return
        super().data_received(data)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        order = _open.setdefault(self.server_state, OrderedDict())
        order[self] = None
        while len(order) > MAX_OPEN:
            victim = next((c for c in order if c is not self and not c.busy), None)
            if victim is None:
                break
            order.pop(victim)
            victim.transport.abort()
        self._arm()

    @property
    def busy(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
        self._guard = self.loop.call_later(REQUEST_SECONDS, self._expire)

    def _expire(self) -> None:
        self.transport.abort()  # too slow to send its request or to read its answer

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_bytes = 0
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._guard is not None:
            self._guard.cancel()
        order = _open.get(self.server_state)
        if order is not None:
            order.pop(self, None)
        super().connection_lost(exc)


def config(app: Any, host: str, port: int, limit_concurrency: int = LIMIT_CONCURRENCY) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=GuardedProtocol,
        limit_concurrency=limit_concurrency,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=5,
        access_log=False,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
    )


def tune_gc() -> None:
    """Fewer, larger collections in a process that serves the API (see GC_THRESHOLD)."""
    gc.set_threshold(*GC_THRESHOLD)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: any free port), bound before uvicorn starts: a port in use
    is one line from the caller (uvicorn logged it and exited 3), and port 0's choice can be told.

    Raises:
        OSError: the address cannot be bound.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def serve(app: Any, sock: socket.socket, limit_concurrency: int = LIMIT_CONCURRENCY) -> None:
    """Serve on `sock` (from bind()) until interrupted (SIGINT/SIGTERM)."""
    host, port = sock.getsockname()[:2]
    tune_gc()
    uvicorn.Server(config(app, host, port, limit_concurrency)).run(sockets=[sock])


class BackgroundServer:
    """The app served on a daemon thread; stop() ends it (bounded wait)."""

    def __init__(self, app: Any, host: str, port: int):
        self.server = uvicorn.Server(config(app, host, port))
        self.thread = threading.Thread(target=self.server.run, name="graphtrain-api", daemon=True)

    def start(self) -> BackgroundServer:
        """Start and wait until it listens.

        Raises:
            OSError: it did not start within START_TIMEOUT s (e.g. the port is taken).
        """
        tune_gc()
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise OSError(f"the API did not start on {self.server.config.host}:{self.server.config.port}")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        sockets = self.server.servers[0].sockets if self.server.servers else []
        return int(sockets[0].getsockname()[1]) if sockets else self.server.config.port

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
