"""Errors as RFC 9457 problem details (application/problem+json): type, title, status, detail, instance.

Every error the API answers goes through here, so a client parses one shape whatever went wrong: a
route's own refusal (an unknown training, a bad parameter), FastAPI's validation (422, each error naming
its parameter), authentication (401), a status source that does not answer (503) and anything
unexpected (500: a fixed text, never the exception's, which could carry a path or a token).
`type` is a non-resolvable tag URI per problem kind (RFC 9457 section 3.1.1), or about:blank where the
HTTP status says it all.
"""

from __future__ import annotations

import http
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from graphtrain.api.sources.base import InvalidParameter, NotFound, SourceUnavailable
from graphtrain.contract.spec.shown import error_message, name_in_path

log = logging.getLogger("graphtrain.api")
MEDIA_TYPE = "application/problem+json"
_TAG = "tag:graphtrain.io,2025:problem/"
NOT_FOUND = _TAG + "not-found"
INVALID_PARAMETER = _TAG + "invalid-parameter"
UNAUTHORIZED = _TAG + "unauthorized"
SOURCE_UNAVAILABLE = _TAG + "source-unavailable"
BLANK = "about:blank"


class ParameterError(BaseModel):
    """One refused input: which parameter, where it was, and why."""

    parameter: str = Field(description="The parameter's name (e.g. limit, labelSelector, namespace).")
    location: str = Field(description="Where it was: query, path or header.")
    message: str = Field(description="Why it was refused.")


class ProblemDetails(BaseModel):
    """An RFC 9457 problem details document."""

    type: str = Field(default=BLANK, description="A URI naming the kind of problem.")
    title: str = Field(description="A short summary of the kind of problem.")
    status: int = Field(ge=100, le=599, description="The HTTP status code.")
    detail: str | None = Field(default=None, description="What went wrong with this request.")
    instance: str | None = Field(default=None, description="The request path it happened on.")
    errors: list[ParameterError] | None = Field(
        default=None, description="Each refused parameter (400 and 422 only)."
    )


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses a route documents (schemathesis holds each answer to them); document()
    gives them their media type."""
    return {s: {"description": http.HTTPStatus(s).phrase, "model": ProblemDetails} for s in statuses}


def document(openapi: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document with every 4xx/5xx response as application/problem+json (FastAPI writes
    application/json for a response's model)."""
    for item in openapi.get("paths", {}).values():
        for operation in item.values():
            for status, resp in operation.get("responses", {}).items():
                content = resp.get("content") or {}
                if str(status)[0] in "45" and "application/json" in content:
                    content[MEDIA_TYPE] = content.pop("application/json")
    return openapi


def response(
    status: int,
    detail: str | None = None,
    *,
    instance: str | None = None,
    type: str = BLANK,
    title: str | None = None,
    errors: list[ParameterError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The problem response for `status`; title defaults to the status' reason phrase."""
    doc = ProblemDetails(
        type=type,
        title=title or http.HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        instance=instance,
        errors=errors,
    )
    return JSONResponse(
        doc.model_dump(exclude_none=True), status_code=status, media_type=MEDIA_TYPE, headers=headers
    )


# Where a value is never shown in a refusal: a header or cookie may carry a credential whatever its name.
_UNSHOWN_LOCATIONS = frozenset({"header", "cookie"})


def _validation_errors(exc: RequestValidationError) -> list[ParameterError]:
    """Each refused parameter, its message naming the value sent as a spec problem does (shown():
    short, on one line, not a secret's)."""
    errors = []
    for err in exc.errors():
        loc = [name_in_path(str(part)) for part in err.get("loc", ())]
        location = loc[0] if loc else "request"
        message = str(err["msg"]) if location in _UNSHOWN_LOCATIONS else error_message(err)
        errors.append(
            ParameterError(parameter=loc[1] if len(loc) > 1 else location, location=location, message=message)
        )
    return errors


def install(app: FastAPI) -> None:
    """Answer every error of `app` as problem details."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else None
        return response(
            exc.status_code, detail, instance=request.url.path, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        names = ", ".join(sorted({e.parameter for e in errors}))
        return response(
            422,
            f"invalid {names}",
            instance=request.url.path,
            type=INVALID_PARAMETER,
            errors=errors,
        )

    @app.exception_handler(InvalidParameter)
    async def bad_parameter(request: Request, exc: InvalidParameter) -> JSONResponse:
        error = ParameterError(parameter=exc.parameter, location="query", message=exc.message)
        return response(
            400,
            f"invalid {exc.parameter}: {exc.message}",
            instance=request.url.path,
            type=INVALID_PARAMETER,
            errors=[error],
        )

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return response(404, str(exc), instance=request.url.path, type=NOT_FOUND)

    @app.exception_handler(SourceUnavailable)
    async def unavailable(request: Request, exc: SourceUnavailable) -> JSONResponse:
        log.warning("status source unavailable on %s: %s", request.url.path, exc)
        return response(
            503,
            str(exc),
            instance=request.url.path,
            type=SOURCE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return response(500, "the server failed to answer; its log says why", instance=request.url.path)
