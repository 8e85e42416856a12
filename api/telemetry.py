"""The API's own metrics: graphtrain_api_requests_total{route,method,status} and
graphtrain_api_request_seconds{route,method}, recorded by an ASGI middleware outside everything else
(authentication included: refused requests are counted too).

`route` is the route's template (/api/v1/trainings/{namespace}/{name}), never the raw path: a label per
training name, or per path a scanner tries, would grow without bound. A path no route matches is
counted as route="unmatched". Every route's label values are created at startup, so a rate() over a
route that has not been asked yet is 0, not absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.routing import BaseRoute, Match

from graphtrain.api.auth import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"
STATUSES = ("200", "400", "401", "404", "422", "500", "503")  # pre-initialised for every route
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # others: "other"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter(
            "graphtrain_api_requests",
            "HTTP requests answered, by route template, method and status code.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            "graphtrain_api_request_seconds",
            "Time to answer an HTTP request, by route template and method.",
            ["route", "method"],
            buckets=BUCKETS,
            registry=registry,
        )

    def initialise(self, routes: Iterable[BaseRoute]) -> None:
        for route in routes:  # FastAPI's APIRoute and Starlette's Route both have path and methods
            path, methods = getattr(route, "path", None), getattr(route, "methods", None) or ()
            for method in sorted(set(methods) - {"HEAD"}) if path else ():
                self.seconds.labels(path, method)
                for status in STATUSES:
                    self.requests.labels(path, method, status)


def route_template(routes: Iterable[BaseRoute], scope: Scope) -> str:
    """The template of the route that serves `scope` (a method it lacks still names it: a 405)."""
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return str(getattr(route, "path", UNMATCHED))
        if match == Match.PARTIAL and partial is None:
            partial = str(getattr(route, "path", UNMATCHED))
    return partial or UNMATCHED


class RequestMetrics:
    """ASGI middleware recording each HTTP request in `metrics`; `routes`: every route of the app, flat
    (create_app lists them: FastAPI keeps included routers' routes nested)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics, routes: list[BaseRoute]):
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            # routing names the route it chose; a request refused before routing (401) is matched here
            chosen = getattr(scope.get("route"), "path", None)
            route = chosen if isinstance(chosen, str) else route_template(self.routes, scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.requests.labels(route, method, str(status)).inc()
            self.metrics.seconds.labels(route, method).observe(time.perf_counter() - start)
