"""The FastAPI application: routers, middleware and error handlers wired together, nothing else.

create_app(source, settings): the status source is the app's dependency (routers take it through
access.get_source, which applies the request's token's namespaces), so tests pass a fake source, not a
patched global.
Middleware, outermost first: request metrics (every request counted, refused ones too), bearer-token
authentication (before routing, validation and the source), then the routes.
/openapi.json is FastAPI's document served as the other answers are (encoding.py): serialised and
gzipped once, since it never changes at runtime (FastAPI's own route serialised it for every request
and never compressed it: 34.3 KB, 6.1 KB gzipped).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from graphtrain.api import auth, problems
from graphtrain.api.encoding import GzipAnswer, respond, takes_gzip
from graphtrain.api.routers import health, metrics, trainings
from graphtrain.api.settings import Settings
from graphtrain.api.sources.base import StatusSource
from graphtrain.api.telemetry import ApiMetrics, RequestMetrics

ROUTERS = (trainings.router, health.router, metrics.router)


def create_app(source: StatusSource, settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        """At shutdown, the source's close() if it has one (the Kubernetes source's watches)."""
        yield
        close = getattr(source, "close", None)
        if close is not None:
            await run_in_threadpool(close)

    app = FastAPI(
        title=settings.title,
        version="v1",
        description="Read-only status of GraphTrainings: Kubernetes or local runs.",
        lifespan=lifespan,
    )
    app.state.source = source
    app.state.registry = settings.registry
    app.state.auth, app.state.metrics_open = settings.tokens is not None, settings.metrics_open
    for router in ROUTERS:
        app.include_router(router)
    problems.install(app)

    serve_openapi(app, settings)
    if settings.tokens is not None:
        open_paths = auth.OPEN_PATHS | ({"/metrics"} if settings.metrics_open else set())
        app.add_middleware(auth.BearerAuth, tokens=settings.tokens, open_paths=frozenset(open_paths))
    routes = [r for router in ROUTERS for r in router.routes] + [
        r for r in app.routes if isinstance(r, Route)
    ]
    api_metrics = ApiMetrics(settings.registry)
    api_metrics.initialise(routes)
    app.add_middleware(RequestMetrics, metrics=api_metrics, routes=routes)
    return app


def serve_openapi(app: FastAPI, settings: Settings) -> None:
    """app.openapi (the document) and its route in place of FastAPI's, the answer kept with its gzip form
    (at most one per root path, as FastAPI names it in `servers`; a server has one)."""

    def openapi() -> dict[str, Any]:
        """The generated document, errors as problem details, and the bearer scheme (for /docs)."""
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            components = problems.document(doc).setdefault("components", {})
            if settings.tokens is not None:
                components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                doc["security"] = [{"bearer": []}]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    kept: dict[str, GzipAnswer] = {}

    async def document(request: Request) -> Response:
        root = request.scope.get("root_path", "").rstrip("/")
        answer = kept.get(root)
        if answer is None:
            doc = openapi()
            if root and app.root_path_in_servers:  # as FastAPI's route: the path it is served under
                doc = {**doc, "servers": [{"url": root}, *doc.get("servers", [])]}
            answer = GzipAnswer(bytes(JSONResponse(doc).body))  # as FastAPI rendered it
            if len(kept) < 4:  # root paths are the server's: one, unless a proxy varies it
                kept[root] = answer
        return respond(answer, takes_gzip(request))

    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != app.openapi_url]
    app.add_route(app.openapi_url or "/openapi.json", document, include_in_schema=False)
