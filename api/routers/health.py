"""Liveness (/healthz: the process answers) and readiness (/readyz: its status source answers too).
Both are open: probes carry no token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from graphtrain.api import models
from graphtrain.api.access import get_source
from graphtrain.api.problems import problem_responses
from graphtrain.api.sources.base import StatusSource

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=models.Health, summary="The server answers")
async def healthz() -> models.Health:
    """On the event loop, needing no worker thread: the liveness probe answers while every worker
    waits on a slow source (a sync route queued behind them)."""
    return models.Health()


@router.get(
    "/readyz",
    response_model=models.Health,
    summary="The server and its status source answer",
    responses=problem_responses(503),
)
def readyz(source: Annotated[StatusSource, Depends(get_source)]) -> models.Health:
    source.check()  # SourceUnavailable -> 503 problem details
    return models.Health()
