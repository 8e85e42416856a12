"""gzip for the JSON answers (and /metrics) when the request's Accept-Encoding takes it.

Made in the route, in its worker thread, not by Starlette's GZipMiddleware: that compresses every body
under 128 KiB (a 500-epoch history's answer is 108 KB) on the event loop, at level 9 (2.1 ms for that
history; level 6: 0.65 ms for 1 % more bytes), again for every request of an answer kept as bytes.
A kept answer (/history's, api/sources/cached.py and local.py) is a `GzipAnswer`: its bytes with their gzip
form, made once when it is built, so a hit sent compressed costs no compression (108 -> 10.6 KB).
Bodies under GZIP_MIN are sent as they are: gzip's 20 bytes of framing and the CPU buy nothing there.
Every such answer says `Vary: Accept-Encoding`, so a shared cache never serves one form for the other.
"""

from __future__ import annotations

import gzip

from starlette.requests import Request
from starlette.responses import Response

GZIP_MIN = 1024  # bytes: a smaller body is sent uncompressed
LEVEL = 6
JSON = "application/json"
GZIP_CODINGS = ("gzip", "x-gzip")


def gzip_of(body: bytes) -> bytes | None:
    """body compressed (deterministic: no timestamp), None below GZIP_MIN."""
    return gzip.compress(body, LEVEL, mtime=0) if len(body) >= GZIP_MIN else None


class GzipAnswer(bytes):
    """An answer's bytes with `gzipped`, their gzip form (None: under GZIP_MIN), made once here."""

    gzipped: bytes | None

    def __new__(cls, body: bytes) -> GzipAnswer:
        self = super().__new__(cls, body)
        self.gzipped = gzip_of(body)
        return self


def stored_bytes(body: bytes) -> int:
    """What a kept answer holds: its bytes and, a GzipAnswer's, its gzip form."""
    return len(body) + len(getattr(body, "gzipped", None) or b"")


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding value takes gzip (RFC 9110 12.5.3): gzip or x-gzip, else `*`, with a
    q-value above 0 (`gzip;q=0` refuses it)."""
    weights: dict[str, float] = {}
    for part in header.split(","):
        coding, *params = (p.strip().lower() for p in part.split(";"))
        weights.setdefault(coding, _q(params))
    for coding in (*GZIP_CODINGS, "*"):
        if coding in weights:
            return weights[coding] > 0
    return False


def _q(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0  # unreadable: not taken
    return 1.0


def takes_gzip(request: Request) -> bool:
    """The routes' dependency (it adds nothing to the OpenAPI document): does the request take gzip?"""
    return accepts_gzip(request.headers.get("accept-encoding", ""))


def respond(body: bytes, gzip_ok: bool, media_type: str = JSON) -> Response:
    """`body` as the response, gzipped when the request takes it and it is large enough (a GzipAnswer's
    kept gzip form, else compressed now)."""
    headers = {"Vary": "Accept-Encoding"}
    packed = (body.gzipped if isinstance(body, GzipAnswer) else gzip_of(body)) if gzip_ok else None
    if packed is None:
        return Response(body, media_type=media_type, headers=headers)
    return Response(packed, media_type=media_type, headers={**headers, "Content-Encoding": "gzip"})
