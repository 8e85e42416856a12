"""Bearer-token authentication, checked before any work: an ASGI middleware in front of routing,
validation and the source, so an unauthenticated request costs a header comparison and nothing else.

Tokens come from a file, one per line (blank lines and `#` comments ignored), each alone (it sees every
namespace) or followed by `namespaces=a,b` (it sees those only: tokens.py, applied by access.py from the
Grant this middleware leaves in the request's scope state). In Kubernetes the file is a mounted Secret,
which the kubelet updates in place, so it is looked at again (a stat) at most once a second and re-read
when it changed: a token added, revoked or re-scoped in the Secret takes effect without a restart; a
token revoked or narrowed at the first look, one added or widened once its text is read the same at the
next (1-2 s): a file truncated and rewritten in place may be read half-written, and `TOKEN` read without
the ` namespaces=team-a` that follows it would otherwise see every namespace for a second.
At start nothing was read before to narrow by, so a text whose last line holds a token without a line
end after it (tokens.cut_short: where a write in progress stops) is read again START_PAUSE s later,
until two reads agree (at most START_READS): such a read at start made that token see every namespace
until the next change. A text that still changes is served as a reload would: nothing widened (here:
no token) until it reads the same twice. Writes of one file are milliseconds apart (a mounted Secret is
swapped whole), so the pause is short; a file ending with a line end costs no second read, nor does
one that is not a regular file: a pipe (`--token-file <(...)`) is read to its end, its writer's close,
and read again would be empty.
The file is opened without blocking and read only if fstat says it is a regular file of at most
MAX_FILE_BYTES (read_file): a FIFO with no writer blocked the open, at start and, worse, at a reload in
the event loop (every request, the probes' too), and a 2 GiB file took 37 s to read. The one exception is
a pipe at start, awaited for at most PIPE_SECONDS; at a reload only a regular file is read.
A malformed line is refused alone, logged by line number (never its text); a file that disappears, is
not (or no longer) a regular file, is too large or holds no usable token refuses everyone (fails closed).

Comparison: each presented token is hashed (SHA-256) and compared with every known token's hash with
hmac.compare_digest, all of them every time, so neither a token's length nor its position in the file
shows in the time taken; the matched token's grant is then looked up by its hash.

Open paths: /healthz and /readyz (probes carry no token), the OpenAPI document and its /docs page
(public information: the schema is in the repository), and /metrics only when settings.metrics_open.
Everything else, /metrics included by default, needs a token: Prometheus scrapes it with one of the
file's tokens, one for every namespace (the chart's ServiceMonitor: `authorization.credentials` from the
same Secret); a token limited to some namespaces gets 403 there (access.py).

Without authentication (`--no-auth`) the API may only listen on a loopback address (check_bind).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import select
import stat
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from graphtrain.api import problems
from graphtrain.api.tokens import GRANT, Grant, cut_short, narrowest, parse

log = logging.getLogger("graphtrain.api")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RECHECK_SECONDS = 1.0
START_PAUSE = 0.25  # seconds between the reads at start of a file that may be cut short
START_READS = 8  # at most: 1.75 s of pauses
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
REALM = 'Bearer realm="graphtrain"'
MAX_FILE_BYTES = 1 << 20  # a token file of thousands of scoped tokens is ~100 KB
PIPE_SECONDS = 10.0  # at most this long for a pipe's writer (`<(kubectl get secret ...)`) at start


class TokenFileError(ValueError):
    """The token file cannot be used (the message says why; it never contains a token)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _drain_pipe(fd: int, seconds: float) -> bytes:
    """A non-blocking pipe's bytes up to its writer's close, at most MAX_FILE_BYTES + 1 of them."""
    chunks: list[bytes] = []
    size, deadline, poller = 0, time.monotonic() + seconds, select.poll()
    poller.register(fd, select.POLLIN)
    while size <= MAX_FILE_BYTES:
        try:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
        except BlockingIOError:  # a writer, nothing written yet
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TokenFileError(
                    f"it is a pipe and its writer did not finish within {seconds:g} s"
                ) from None
            continue
        if not chunk:  # its writer closed it (or it never had one)
            break
        chunks.append(chunk)
        size += len(chunk)
    if not chunks:
        raise TokenFileError("it is a pipe with nothing written to it")
    return b"".join(chunks)


def read_file(path: Path, pipe: bool) -> tuple[os.stat_result, str]:
    """The stat and text of the token file, opened without blocking and read only if it is a regular
    file of at most MAX_FILE_BYTES, or (`pipe`: at start) a pipe whose writer ends within PIPE_SECONDS.

    Raises:
        OSError: missing or unreadable.
        TokenFileError: another kind of file, too large, or a pipe that does not end.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) and pipe:
            data = _drain_pipe(fd, PIPE_SECONDS)
            st = os.fstat(fd)  # after its writer's last write: a later look sees it unchanged
        elif not stat.S_ISREG(st.st_mode):
            raise TokenFileError("it is not a regular file")
        elif st.st_size > MAX_FILE_BYTES:
            raise TokenFileError(f"it is {st.st_size} bytes, more than {MAX_FILE_BYTES}")
        else:
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # it grew while read
        raise TokenFileError(f"it is more than {MAX_FILE_BYTES} bytes")
    return st, data.decode(errors="surrogateescape")  # a line not UTF-8 is refused alone (tokens.parse)


class TokenFile:
    """The tokens of `path`, re-read when the file changes."""

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.path, self.clock = Path(path), clock
        self._lock = threading.Lock()
        self._signature: tuple[int, int, int] | None = None
        self._grants: dict[bytes, Grant] = {}  # by the token's digest; replaced whole, never changed
        self._settled: dict[bytes, Grant] = {}  # the last text's read the same twice (or at start)
        self._pending: tuple[tuple[int, int, int], str] | None = None  # a text read once: (stat, text)
        self._refusal: str | None = None  # why every request is refused now (said once per reason)
        self._checked = float("-inf")
        for _ in range(START_READS - 1):
            self.load(strict=True)
            if self._pending is None:
                return
            sleep(START_PAUSE)
        self.load(strict=True)
        if self._pending is not None:
            log.warning(
                "token file %s: still changing after %d reads; no token accepted until it reads the same"
                " twice",
                self.path,
                START_READS,
            )

    def load(self, strict: bool = False) -> None:
        """Read the file now: each refused line logged, the others used. strict (startup): raise
        TokenFileError if it is missing, unreadable or holds no usable token; otherwise (a reload) such a
        file refuses every token. A changed text narrows the grants at once (a token revoked or limited)
        and widens them (one added or given more) only once read the same at the next check, a second
        later: a file truncated and rewritten in place may be read half-written (tokens.narrowest). At
        start, a regular file's text cut_short waits to be read the same twice (nothing accepted
        meanwhile)."""
        try:
            st = os.stat(self.path)  # never blocks; the file is opened only when this changed
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
            if signature == self._signature and self._pending is None:
                return
            st, text = read_file(self.path, pipe=strict)
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
            parsed = parse(text)
            if not parsed.grants:
                raise TokenFileError(
                    f"it holds no usable token ({'; '.join(parsed.problems)})"
                    if parsed.problems
                    else "it holds no token"
                )
        except (OSError, TokenFileError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            if strict:
                raise TokenFileError(f"token file {self.path}: {reason}") from None
            if self._grants or reason != self._refusal:  # a new reason is said too: the one to fix now
                log.warning("token file %s: %s; refusing every request until it is fixed", self.path, reason)
            self._grants, self._signature, self._pending, self._refusal = {}, None, None, reason
            return
        read = {_digest(t): g for t, g in parsed.grants.items()}
        self._refusal = None
        seen_twice = self._pending == (signature, text)
        if not seen_twice:
            for problem in parsed.problems:
                log.warning("token file %s: %s", self.path, problem)
        self._signature = signature
        whole = seen_twice or (strict and not (stat.S_ISREG(st.st_mode) and cut_short(text)))
        now = read if whole else narrowest(self._settled, read)
        self._grants, self._pending = now, (None if now == read else (signature, text))
        if now != read:
            return  # it widens: once read the same again
        if not strict:
            scoped = sum(g.namespaces is not None for g in read.values())
            log.info(
                "token file %s changed: %d token(s), %d scoped to namespaces", self.path, len(read), scoped
            )
        self._settled = read

    def valid(self, token: str) -> bool:
        return self.grant(token) is not None

    def grant(self, token: str) -> Grant | None:
        """What `token` may see, or None if it is not one of the file's."""
        now = self.clock()
        if now - self._checked >= RECHECK_SECONDS:
            with self._lock:
                self._checked = now
                self.load()
        presented = _digest(token)
        grants = self._grants  # one load's, even if a reload replaces it meanwhile
        ok = False
        for known in grants:  # every one, always: the time does not say which matched
            ok |= hmac.compare_digest(presented, known)
        return grants.get(presented) if ok else None


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
    problem details with WWW-Authenticate: Bearer. The token's Grant goes on in the scope's state
    (tokens.GRANT), where access.py reads it: authorisation is decided once, from what was found here."""

    def __init__(self, app: ASGIApp, tokens: TokenFile, open_paths: frozenset[str]):
        self.app, self.tokens, self.open_paths = app, tokens, open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        token = bearer(scope.get("headers") or [])
        grant = self.tokens.grant(token) if token is not None else None
        if grant is not None:
            # a new state dict: the server's may be shared (lifespan state is copied shallowly)
            scope["state"] = {**(scope.get("state") or {}), GRANT: grant}
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


def check_bind(host: str, auth: bool, flags: str = "--") -> str | None:
    """Why the API may not listen on `host` as asked, or None: without authentication only on a
    loopback address (anyone who can reach the port could read every training). `flags`: how the
    command names its options (`graphtrain run`'s are --api-no-auth, --api-token-file)."""
    if auth or is_loopback(host):
        return None
    return (
        f"error: {flags}no-auth is allowed only on a loopback address (127.0.0.1, ::1), not {host}: "
        f"give {flags}token-file instead"
    )
