"""Authentication at the connection: ZMQ's PLAIN mechanism, checked by the server's ZAP handler.

Why at the connection and not per request: a token inside each request is read only after libzmq has
received the whole message, so a peer without the token could still make the server buffer up to the
request limit per connection and queue an error reply for every message it never reads. With PLAIN
and a ZAP handler (ZeroMQ RFC 27), libzmq delivers nothing from a connection until its handshake is
accepted, and reads the handshake itself as frames of at most ZMQ_MAXMSGSIZE (protocol.MAX_FRAME_BYTES):
an unauthenticated peer costs one bounded frame and no worker. A refused client sees the handshake
fail (a socket-monitor event), which the client turns into an error naming the server.

PLAIN carries the token in clear text, as the per-request token did; the shard servers' network is
the training's own (the chart's NetworkPolicy admits only its trainers). CURVE would encrypt, at a
cost to the 51 MB transfers this protocol is measured on.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Any

import zmq

from graphtrain.contract.roles import ENV_TOKEN
from graphtrain.runtime.errors import GraphtrainError

USERNAME = b"graphtrain"
DOMAIN = "graphtrain"
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by libzmq: one handler per context
MAX_TOKEN_BYTES = 255  # PLAIN's password field holds at most 255 bytes


def check_token(token: str) -> bytes:
    """The token as PLAIN sends it.

    Raises:
        ValueError: empty, or longer than PLAIN allows.
    """
    raw = token.encode()
    if not raw:
        raise ValueError("the token is empty")
    if len(raw) > MAX_TOKEN_BYTES:
        raise ValueError(f"the token has {len(raw)} bytes; at most {MAX_TOKEN_BYTES} are allowed")
    return raw


def read_token(token_file: Path | None) -> str:
    """The shared token every role presents or checks: from `token_file` (--token-file), else
    $GRAPHTRAIN_TOKEN. Never printed or logged.

    Raises:
        GraphtrainError: unreadable, empty, or longer than PLAIN allows.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise GraphtrainError(f"{token_file}: cannot read the token file ({exc.strerror})") from None
        if not token:  # a Secret whose key is empty: the file was given, "pass --token-file" misleads
            raise GraphtrainError(f"{token_file}: the token file is empty")
    else:
        token = os.environ.get(ENV_TOKEN, "").strip()
    if not token:
        raise GraphtrainError(f"no token: pass --token-file or set {ENV_TOKEN}")
    if len(token.encode()) > MAX_TOKEN_BYTES:
        raise GraphtrainError(
            f"the token is longer than {MAX_TOKEN_BYTES} bytes (the most a connection can present)"
        )
    return token


def zap_reply(request: list[bytes], token: bytes) -> tuple[list[bytes], bool]:
    """The reply to one ZAP request and whether it admits the peer (pure).

    Request frames (RFC 27, envelope stripped): version, request id, domain, address, routing id,
    mechanism, credentials (PLAIN: username, password). Both credentials are compared in constant time.
    """
    if len(request) < 6:
        return [
            b"1.0",
            request[1] if len(request) > 1 else b"",
            b"500",
            b"malformed ZAP request",
            b"",
            b"",
        ], False
    version, request_id, domain, _address, _identity, mechanism, *credentials = request
    ok = False
    if version == b"1.0" and domain == DOMAIN.encode() and mechanism == b"PLAIN" and len(credentials) == 2:
        user_ok = hmac.compare_digest(credentials[0], USERNAME)
        ok = hmac.compare_digest(credentials[1], token) and user_ok
    status = [b"200", b"OK"] if ok else [b"400", b"authentication failed"]
    return [b"1.0", request_id, *status, USERNAME if ok else b"", b""], ok


def secure_server(sock: zmq.Socket[Any]) -> None:
    """Make a bound socket require PLAIN credentials checked by the context's ZAP handler."""
    sock.setsockopt(zmq.PLAIN_SERVER, 1)
    sock.setsockopt_string(zmq.ZAP_DOMAIN, DOMAIN)


def secure_client(sock: zmq.Socket[Any], token: str) -> None:
    """Present the token when `sock` connects."""
    sock.setsockopt(zmq.PLAIN_USERNAME, USERNAME)
    sock.setsockopt(zmq.PLAIN_PASSWORD, check_token(token))
