"""Serving the app with uvicorn, bounded: at most `limit_concurrency` requests at once (more get 503
from uvicorn at once rather than queueing without end), idle keep-alive connections closed after a few
seconds, no access log on the hot path (/metrics counts every request).

BackgroundServer runs it on a thread beside another job (`graphtrain run --api`): started on port 0 or
a given one, `port` is the one bound, for the caller to announce (e.g. as a Prometheus target).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

LIMIT_CONCURRENCY = 256
KEEP_ALIVE_SECONDS = 5
START_TIMEOUT = 10.0


def config(app: Any, host: str, port: int, limit_concurrency: int = LIMIT_CONCURRENCY) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        limit_concurrency=limit_concurrency,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=5,
        access_log=False,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
    )


def serve(app: Any, host: str, port: int, limit_concurrency: int = LIMIT_CONCURRENCY) -> None:
    """Serve until interrupted (SIGINT/SIGTERM)."""
    uvicorn.Server(config(app, host, port, limit_concurrency)).run()


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
