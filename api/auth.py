"""Bearer-token authentication, checked before any work: an ASGI middleware in front of routing,
validation and the source, so an unauthenticated request costs a header comparison and nothing else.

Tokens come from a file, one per line (blank lines and `#` comments ignored): in Kubernetes a mounted
Secret, which the kubelet updates in place, so the file is looked at again (a stat) at most once a
second and re-read when it changed: a token added or revoked in the Secret takes effect without a
restart. A file that disappears or holds no token refuses everyone (fails closed).

Comparison: each presented token is hashed (SHA-256) and compared with every known token's hash with
hmac.compare_digest, all of them every time, so neither a token's length nor its position in the file
shows in the time taken.

Open paths: /healthz and /readyz (probes carry no token), the OpenAPI document and its /docs page
(public information: the schema is in the repository), and /metrics only when settings.metrics_open.
Everything else, /metrics included by default, needs a token: Prometheus scrapes it with one of the
file's tokens (the chart's ServiceMonitor: `authorization.credentials` from the same Secret).

Without authentication (`--no-auth`) the API may only listen on a loopback address (check_bind).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from graphtrain.api import problems

log = logging.getLogger("graphtrain.api")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MIN_TOKEN = 16  # characters: a shorter token is refused when the file is read
RECHECK_SECONDS = 1.0
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
REALM = 'Bearer realm="graphtrain"'


class TokenFileError(ValueError):
    """The token file cannot be used (the message says why; it never contains a token)."""


def parse_tokens(text: str) -> list[str]:
    """The tokens of a token file's text.

    Raises:
        TokenFileError: a token is shorter than MIN_TOKEN or holds a space (named by line number).
    """
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        if len(token) < MIN_TOKEN or any(ch.isspace() for ch in token):
            raise TokenFileError(f"line {number}: a token is one word of at least {MIN_TOKEN} characters")
        tokens.append(token)
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenFile:
    """The tokens of `path`, re-read when the file changes."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic):
        self.path, self.clock = Path(path), clock
        self._lock = threading.Lock()
        self._signature: tuple[int, int, int] | None = None
        self._digests: tuple[bytes, ...] = ()
        self._checked = float("-inf")
        self.load(strict=True)

    def load(self, strict: bool = False) -> None:
        """Read the file now. strict (startup): raise TokenFileError if it is missing, unreadable,
        malformed or empty; otherwise (a reload) a file that cannot be used refuses every token."""
        try:
            st = os.stat(self.path)
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
            if signature == self._signature:
                return
            tokens = parse_tokens(self.path.read_text())
            if not tokens:
                raise TokenFileError("it holds no token")
        except (OSError, UnicodeDecodeError, TokenFileError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            if strict:
                raise TokenFileError(f"token file {self.path}: {reason}") from None
            if self._digests:
                log.warning("token file %s: %s; refusing every request until it is fixed", self.path, reason)
            self._digests, self._signature = (), None
            return
        if self._signature is not None:
            log.info("token file %s changed: %d token(s)", self.path, len(tokens))
        self._digests, self._signature = tuple(_digest(t) for t in tokens), signature

    def valid(self, token: str) -> bool:
        now = self.clock()
        if now - self._checked >= RECHECK_SECONDS:
            with self._lock:
                self._checked = now
                self.load()
        presented = _digest(token)
        ok = False
        for known in self._digests:  # every one, always: the time does not say which matched
            ok |= hmac.compare_digest(presented, known)
        return ok


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if there is exactly one such header."""
    values = [v for k, v in headers if k.lower() == b"authorization"]
    if len(values) != 1:
        return None
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class BearerAuth:
    """ASGI middleware: a request to a path outside `open_paths` needs a valid bearer token, else 401
    problem details with WWW-Authenticate: Bearer."""

    def __init__(self, app: ASGIApp, tokens: TokenFile, open_paths: frozenset[str]):
        self.app, self.tokens, self.open_paths = app, tokens, open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        token = bearer(scope.get("headers") or [])
        if token is not None and self.tokens.valid(token):
            await self.app(scope, receive, send)
            return
        challenge = REALM + (', error="invalid_token"' if token is not None else "")
        detail = "a valid bearer token is required" if token is None else "the bearer token is not valid"
        reply = problems.response(
            401,
            detail,
            instance=scope["path"],
            type=problems.UNAUTHORIZED,
            headers={"WWW-Authenticate": challenge},
        )
        await reply(scope, receive, send)


def is_loopback(host: str) -> bool:
    """An address only this machine reaches: 127.0.0.0/8, ::1, or the name localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: bool) -> str | None:
    """Why the API may not listen on `host` as asked, or None: without authentication only on a
    loopback address (anyone who can reach the port could read every training)."""
    if auth or is_loopback(host):
        return None
    return (
        f"error: --no-auth is allowed only on a loopback address (127.0.0.1, ::1), not {host}: "
        "give --token-file instead"
    )
