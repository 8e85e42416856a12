"""The trainings resource: list (filters, pagination), one training, and its shards, trainers, events
and progress history.

Path parameters are DNS labels (Kubernetes' names for namespaces and GraphTrainings), checked here, so
nothing else (a path like ../../etc, a label selector like `a,b!=c`) reaches a source.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel

from graphtrain.api import models
from graphtrain.api.access import get_source
from graphtrain.api.encoding import respond, takes_gzip
from graphtrain.api.problems import problem_responses
from graphtrain.api.selectors import SelectorError, parse
from graphtrain.api.sources.base import InvalidParameter, ListQuery, StatusSource
from graphtrain.contract.spec import Phase

DNS_LABEL = models.DNS_LABEL
MAX_LIMIT = 500
EVENTS_LIMIT = 100  # events a training's /events answers unless asked for more (MAX_LIMIT)


def known_parameters(request: Request) -> None:
    """A query parameter the route does not take is a 400 naming it, not ignored: a misspelt filter
    (`labelselector=`, `ns=`) would otherwise answer an unfiltered list that looks like a filtered one.
    The route's own parameters are read from the route (its dependencies' included), not listed here."""
    takes = _query_names(getattr(request.scope.get("route"), "dependant", None))
    for key in request.query_params:
        if key not in takes:
            raise InvalidParameter(
                key, f"not a parameter of this route (it takes: {', '.join(takes) or 'none'})"
            )


def _query_names(dependant: Any) -> list[str]:
    """The query parameters a route's dependant takes, its sub-dependencies' included, by their names
    in the URL (aliases)."""
    if dependant is None:
        return []
    own = [q.alias for q in dependant.query_params]
    return own + [n for d in dependant.dependencies for n in _query_names(d) if n not in own]


router = APIRouter(
    prefix="/api/v1",
    tags=["trainings"],
    responses=problem_responses(400, 401, 503, 500),
    dependencies=[Depends(known_parameters)],
)

Source = Annotated[StatusSource, Depends(get_source)]
Gzip = Annotated[bool, Depends(takes_gzip)]  # the request takes gzip (encoding.py)


def answer(model: BaseModel, gzip_ok: bool) -> Response:
    """The model as JSON, serialised once by pydantic (gzipped if the request takes it and it is large
    enough). `response_model` still documents each route; FastAPI's own path would dump the model,
    validate the dict against it again (the spec models' rules included) and encode it a second time:
    3x the cost of a request for one training."""
    return respond(model.model_dump_json(by_alias=True).encode(), gzip_ok)


Namespace = Annotated[str, Path(pattern=DNS_LABEL, max_length=63, description="The namespace.")]
Name = Annotated[str, Path(pattern=DNS_LABEL, max_length=63, description="The GraphTraining's name.")]
ONE = problem_responses(404, 422)


def list_query(
    in_namespace: Annotated[
        str | None,
        Query(alias="namespace", pattern=DNS_LABEL, max_length=63, description="Only this namespace."),
    ] = None,
    label_selector: Annotated[
        str | None,
        Query(alias="labelSelector", max_length=4096, description="A Kubernetes label selector."),
    ] = None,
    phase: Annotated[Phase | None, Query(description="Only trainings in this phase.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many items.")] = 100,
    continue_token: Annotated[
        str | None,
        Query(alias="continue", max_length=4096, description="The previous page's `continue` value."),
    ] = None,
) -> ListQuery:
    """The list filters, validated: a bad selector is a 400 naming labelSelector."""
    try:
        selector = parse(label_selector or "")
    except SelectorError as exc:
        raise InvalidParameter("labelSelector", str(exc)) from None
    return ListQuery(
        namespace=in_namespace,
        selector=selector,
        phase=phase,
        limit=limit,
        continue_token=continue_token or None,
    )


@router.get(
    "/trainings",
    response_model=models.TrainingList,
    summary="List trainings",
    responses=problem_responses(400, 422),
)
def list_trainings(
    source: Source, gzip_ok: Gzip, query: Annotated[ListQuery, Depends(list_query)]
) -> Response:
    """Trainings in namespace/name order, `limit` at a time; pass `continue` back for the next page. A
    page may hold fewer than `limit` items before the last (the phase filter, applied after paging
    on the Kubernetes API server)."""
    return answer(source.list_trainings(query), gzip_ok)


@router.get(
    "/namespaces/{namespace}/trainings",
    response_model=models.TrainingList,
    summary="List the trainings of one namespace",
    responses=problem_responses(400, 422),
)
def list_namespace(
    source: Source, gzip_ok: Gzip, namespace: Namespace, query: Annotated[ListQuery, Depends(list_query)]
) -> Response:
    if query.namespace is not None and query.namespace != namespace:
        raise InvalidParameter(
            "namespace", f"the path names namespace {namespace}; leave it out or give the same"
        )
    return answer(
        source.list_trainings(
            ListQuery(namespace, query.selector, query.phase, query.limit, query.continue_token)
        ),
        gzip_ok,
    )


@router.get(
    "/trainings/{namespace}/{name}",
    response_model=models.TrainingResource,
    summary="One training: spec summary, status, trainers",
    responses=ONE,
)
def get_training(source: Source, gzip_ok: Gzip, namespace: Namespace, name: Name) -> Response:
    return answer(source.get_training(namespace, name), gzip_ok)


@router.get(
    "/trainings/{namespace}/{name}/shards",
    response_model=models.ShardList,
    summary="Its shard servers: state, address, restarts",
    responses=ONE,
)
def shards(source: Source, gzip_ok: Gzip, namespace: Namespace, name: Name) -> Response:
    return answer(models.ShardList(items=source.get_training(namespace, name).status.shards), gzip_ok)


@router.get(
    "/trainings/{namespace}/{name}/trainers",
    response_model=models.TrainerList,
    summary="Its trainers: rank, state, restarts, last heartbeat",
    responses=ONE,
)
def trainers(source: Source, gzip_ok: Gzip, namespace: Namespace, name: Name) -> Response:
    return answer(models.TrainerList(items=source.get_training(namespace, name).trainers), gzip_ok)


@router.get(
    "/trainings/{namespace}/{name}/events",
    response_model=models.EventList,
    summary="What happened to it, oldest first",
    responses=ONE,
)
def events(
    source: Source,
    gzip_ok: Gzip,
    namespace: Namespace,
    name: Name,
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIMIT, description="At most this many, the newest (still oldest first).")
    ] = EVENTS_LIMIT,
) -> Response:
    """Bounded: a training with thousands of events answered them all (2 MB at 5,000), and every client
    that never read held such an answer in the API's memory (100 of them: +830 MB)."""
    found = source.events(namespace, name)
    return answer(models.EventList(items=found[-limit:], total=len(found)), gzip_ok)


@router.get(
    "/trainings/{namespace}/{name}/history",
    response_model=models.History,
    summary="Its progress per finished epoch (loss, samples/s, eval metric), oldest first",
    responses=ONE,
)
def history(source: Source, gzip_ok: Gzip, namespace: Namespace, name: Name) -> Response:
    # the source's bytes as they are (models.history_answer: the History model's JSON, kept per stored
    # history, with its gzip form: encoding.GzipAnswer); no query parameters, so every answer is the whole
    # history (no docstring: it would become the route's OpenAPI description)
    return respond(source.history(namespace, name), gzip_ok)
