"""The FastAPI application: routers, middleware and error handlers wired together, nothing else.

create_app(source, settings): the status source is the app's dependency (routers take it through
access.get_source, which applies the request's token's namespaces), so tests pass a fake source, not a
patched global.
Middleware, outermost first: request metrics (every request counted, refused ones too), bearer-token
authentication (before routing, validation and the source), then the routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from graphtrain.api import auth, problems
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

    if settings.tokens is not None:
        open_paths = auth.OPEN_PATHS | ({"/metrics"} if settings.metrics_open else set())
        app.add_middleware(auth.BearerAuth, tokens=settings.tokens, open_paths=frozenset(open_paths))
    routes = [r for router in ROUTERS for r in router.routes] + [
        r for r in app.routes if isinstance(r, Route)
    ]
    api_metrics = ApiMetrics(settings.registry)
    api_metrics.initialise(routes)
    app.add_middleware(RequestMetrics, metrics=api_metrics, routes=routes)

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
    return app
