"""The API as served (uvicorn with api/server.py's GuardedProtocol, on 127.0.0.1, port 0): idle or
half-sent connections neither hold the port nor turn the probes into 503s, and they are cut off."""

from __future__ import annotations

import contextlib
import http.client
import resource
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from graphtrain.api import server
from graphtrain.api.app import create_app
from graphtrain.api.settings import Settings
from tests.api.fake import FakeSource


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[server.BackgroundServer]:
    monkeypatch.setattr(server, "REQUEST_SECONDS", 1.0)
    monkeypatch.setattr(server, "MAX_OPEN", 300)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    background = server.BackgroundServer(create_app(FakeSource([]), Settings()), "127.0.0.1", 0).start()
    yield background
    background.stop()


def half_request(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    return s


def healthz(port: int) -> tuple[int, float]:
    start = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as r:
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.monotonic() - start


def open_count(sockets: list[socket.socket]) -> int:
    """How many of `sockets` the server still holds open (a closed one reads b"" or fails)."""
    held = 0
    for s in sockets:
        s.setblocking(False)
        try:
            held += s.recv(16) != b""
        except BlockingIOError:
            held += 1
        except OSError:
            pass
    return held


def test_idle_half_requests_never_turn_the_probes_into_503s_and_are_cut_off(
    served: server.BackgroundServer,
) -> None:
    """1000 half-sent requests, three times the open-connection cap: before, 256 of them made every
    request a 503 for as long as they stayed (forever)."""
    idle: list[socket.socket] = []
    try:
        for i in range(1000):
            idle.append(half_request(served.port))
            if i % 250 == 249:
                status, took = healthz(served.port)
                assert status == 200 and took < 1.0, (i, status, took)
        time.sleep(0.2)
        assert open_count(idle) <= server.MAX_OPEN
        deadline = time.monotonic() + 10
        while open_count(idle) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert open_count(idle) == 0  # each cut off after REQUEST_SECONDS
        assert healthz(served.port)[0] == 200
    finally:
        for s in idle:
            s.close()


def test_a_slow_request_is_cut_off_but_a_keep_alive_client_is_served(served: server.BackgroundServer) -> None:
    slow = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    try:
        start = time.monotonic()
        for chunk in (b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n", b"X-A: 1\r\n", b"X-B: 2\r\n"):
            try:
                slow.sendall(chunk)  # a byte now and then never renews the deadline
            except OSError:
                break
            time.sleep(0.4)
        slow.settimeout(5)
        with contextlib.suppress(ConnectionResetError):  # cut off: closed or reset
            assert slow.recv(100) == b""
        assert time.monotonic() - start < 4
    finally:
        slow.close()
    # three requests on one connection, each within the deadline, together past it: each whole answer
    # read (its head and body can arrive in two segments: a bare recv() could take the head alone and
    # then read the body as the next answer's start, as a loaded machine showed once)
    keep = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
    try:
        sockets = []
        for _ in range(3):
            keep.request("GET", "/healthz")
            answer = keep.getresponse()
            answer.read()
            assert answer.status == 200 and not answer.will_close
            sockets.append(keep.sock)
            time.sleep(0.6)
        assert all(s is sockets[0] for s in sockets)  # one connection kept alive, never reopened
    finally:
        keep.close()


def test_an_endless_header_is_cut_off_at_the_cap(
    served: server.BackgroundServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httptools keeps an unfinished header without a limit, before any token is checked: one endless
    header held ~100 MB of the API's memory per connection until the deadline cut it."""
    monkeypatch.setattr(server, "REQUEST_SECONDS", 60.0)  # only the cap can end this connection soon
    c = socket.create_connection(("127.0.0.1", served.port), timeout=5)
    try:
        start = time.monotonic()
        with contextlib.suppress(OSError):  # reset or broken pipe once cut off
            c.sendall(b"GET /api/v1/trainings HTTP/1.1\r\nHost: x\r\nX-Pad: ")
            for _ in range(16):  # 1 MB, in pieces
                c.sendall(b"a" * 65536)
        closed = False
        with contextlib.suppress(OSError):
            closed = c.recv(100) == b""
        assert closed or time.monotonic() - start < 5  # closed, or reset (recv raised)
        assert time.monotonic() - start < 5
    finally:
        c.close()
    assert healthz(served.port)[0] == 200
