"""The StatusSource protocol the routers depend on, its errors, and the paging both snapshot-style
sources share.

A source answers with the API's models (api/models.py, built on the spec's), so the routers only pick
what a route returns; /history's answer comes as its JSON bytes (models.history_answer), which a
source keeps per stored version: decoding a history costs 3-10 ms, sending kept bytes nothing. Sources
block (files, HTTP to the API server): the routers are plain `def` functions, which FastAPI runs in its
thread pool.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from graphtrain.api import models
from graphtrain.api.selectors import Requirement, matches
from graphtrain.contract.spec import Phase


class NotFound(LookupError):
    """No such training (the message names it)."""


class SourceUnavailable(RuntimeError):
    """The source could not answer (API server down, refused or slow; runs directory unreadable)."""


class InvalidParameter(ValueError):
    """A request parameter the source refuses (e.g. a continue token it did not issue)."""

    def __init__(self, parameter: str, message: str):
        super().__init__(f"{parameter}: {message}")
        self.parameter, self.message = parameter, message


@dataclass(frozen=True)
class ListQuery:
    """A list request, validated: the selector parsed, the limit in range. namespaces: those the
    request may see (its token's, access.py), None for every one; a source lists no other."""

    namespace: str | None = None
    selector: tuple[Requirement, ...] = ()
    phase: Phase | None = None
    limit: int = 100
    continue_token: str | None = None
    namespaces: frozenset[str] | None = None


class StatusSource(Protocol):
    """What the API reads. Every method may raise SourceUnavailable; those naming a training raise
    NotFound when there is no such training."""

    def list_trainings(self, query: ListQuery) -> models.TrainingList: ...

    def get_training(self, namespace: str, name: str) -> models.TrainingResource: ...

    def events(self, namespace: str, name: str) -> list[models.TrainingEvent]: ...

    def history(self, namespace: str, name: str) -> bytes:
        """The /history answer, ready to send: models.history_answer's bytes (a source keeps them, not
        the decoded entries, for as long as the stored history is unchanged)."""

    def check(self) -> None:
        """Return when the source answers (readiness); raise SourceUnavailable otherwise."""


# ------------------------------------------------------------------------- paging of a snapshot


def encode_continue(namespace: str, name: str) -> str:
    """An opaque token: the list resumes after this training (in namespace, name order)."""
    raw = json.dumps({"after": [namespace, name]}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, str]:
    """Raises InvalidParameter(continue) for any token encode_continue did not make."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        after = json.loads(raw)["after"]
        if isinstance(after, list) and len(after) == 2 and all(isinstance(part, str) for part in after):
            return after[0], after[1]
    except (binascii.Error, ValueError, KeyError, TypeError):
        pass
    raise InvalidParameter("continue", "not a continue token this server issued")


def page(summaries: Iterable[models.TrainingSummary], query: ListQuery) -> models.TrainingList:
    """One page of a whole, in-memory list: the query's filters, then `limit` items in namespace/name
    order after the continue token's position, and the token of the next page if there is one."""
    after = decode_continue(query.continue_token) if query.continue_token else None
    chosen = sorted(
        (
            s
            for s in summaries
            if (query.namespace is None or s.metadata.namespace == query.namespace)
            and (query.namespaces is None or s.metadata.namespace in query.namespaces)
            and (query.phase is None or s.phase == query.phase)
            and matches(query.selector, s.metadata.labels)
            and (after is None or (s.metadata.namespace, s.metadata.name) > after)
        ),
        key=lambda s: (s.metadata.namespace, s.metadata.name),
    )
    items = chosen[: query.limit]
    more = len(chosen) > query.limit
    token = encode_continue(items[-1].metadata.namespace, items[-1].metadata.name) if more else None
    return models.TrainingList.of(items, token)
