"""GET /metrics: the app's registry in Prometheus' text format (behind the bearer token unless
settings.metrics_open: see auth.py; a token for every namespace, not one limited to some: access.py).
Its labels name routes by template, never a namespace or a training."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from graphtrain.api.access import may_scrape
from graphtrain.api.encoding import respond, takes_gzip
from graphtrain.api.problems import problem_responses

router = APIRouter(tags=["metrics"])


def get_registry(request: Request) -> CollectorRegistry:
    registry: CollectorRegistry = request.app.state.registry
    return registry


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics of this server",
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **problem_responses(401, 403),
    },
    dependencies=[Depends(may_scrape)],
)
def metrics(request: Request) -> Response:
    # gzipped when asked (Prometheus asks): ~10x fewer bytes a scrape
    return respond(generate_latest(get_registry(request)), takes_gzip(request), CONTENT_TYPE_LATEST)
