"""Authorisation: what a request may see, decided once from the Grant that auth.BearerAuth found for its
token (tokens.GRANT in the scope's state), in the one dependency every route takes its source from.

A token limited to some namespaces gets a view of the source (ScopedSource) in which the other
namespaces do not exist: lists hold only its namespaces' trainings (the filter is part of the query, so
pages and continue tokens are made over what it may see), and a training of another namespace, with
its shards, trainers, events and history, is answered exactly as one that does not exist (404, the same
words), without asking the source, so neither the answer nor its time tells that it exists.
/metrics describes the whole server (every tenant's requests): it needs a token for every namespace.

Without authentication every request sees everything; with it, a request that reaches a route without
a grant (none can: every path but the open ones passes the middleware) sees nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from fastapi import HTTPException, Request

from graphtrain.api import models
from graphtrain.api.sources.base import ListQuery, NotFound, StatusSource
from graphtrain.api.tokens import EVERY, GRANT, NOTHING, Grant

T = TypeVar("T")
SCRAPE_DENIED = "/metrics describes every namespace: it needs a token that sees every namespace"


def grant_of(request: Request) -> Grant:
    """The request's grant: every namespace without authentication, else what the middleware found
    (nothing if it found none)."""
    if not request.app.state.auth:
        return EVERY
    grant = (request.scope.get("state") or {}).get(GRANT)
    return grant if isinstance(grant, Grant) else NOTHING


class ScopedSource:
    """The source as a token limited to `namespaces` sees it."""

    def __init__(self, source: StatusSource, namespaces: frozenset[str]):
        self.source, self.namespaces = source, namespaces

    def _read(self, read: Callable[[str, str], T], namespace: str, name: str) -> T:
        """read(namespace, name) if the namespace is visible; every 404 in the same words (a source's
        own, e.g. "this server serves namespace X only", could name another namespace)."""
        try:
            if namespace not in self.namespaces:
                raise NotFound()
            return read(namespace, name)
        except NotFound:
            raise NotFound(f"no training {namespace}/{name}") from None

    def list_trainings(self, query: ListQuery) -> models.TrainingList:
        if query.namespace is not None and query.namespace not in self.namespaces:
            return models.TrainingList.of([])  # as a namespace with no trainings
        return self.source.list_trainings(replace(query, namespaces=self.namespaces))

    def get_training(self, namespace: str, name: str) -> models.TrainingResource:
        return self._read(self.source.get_training, namespace, name)

    def events(self, namespace: str, name: str) -> list[models.TrainingEvent]:
        return self._read(self.source.events, namespace, name)

    def history(self, namespace: str, name: str) -> bytes:
        return self._read(self.source.history, namespace, name)

    def check(self) -> None:
        self.source.check()


def get_source(request: Request) -> StatusSource:
    """The dependency the routers take their source from: the app's source (create_app puts it on
    app.state), seen through the request's grant."""
    source: StatusSource = request.app.state.source
    namespaces = grant_of(request).namespaces
    return source if namespaces is None else ScopedSource(source, namespaces)


def may_scrape(request: Request) -> None:
    """The dependency of /metrics: open, or a token that sees every namespace; else 403."""
    if request.app.state.metrics_open or grant_of(request).namespaces is None:
        return
    raise HTTPException(403, SCRAPE_DENIED)
