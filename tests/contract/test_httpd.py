"""The endpoints of every process (contract/httpd.py: the metrics port of shard servers, trainers and the
launcher, the operator's health and metrics ports): idle, half-sent or never-reading clients hold no
thread each and never keep a probe out."""

from __future__ import annotations

import http.client
import resource
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.contract import httpd


def get(url: str, timeout: float = 10, method: str = "GET") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def half_request(port: int) -> socket.socket:
    """A client that sends half a request and never finishes it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
    return s


def closed_within(client: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `client` (None: still open after `seconds`)."""
    start = time.monotonic()
    client.settimeout(seconds)
    try:
        while client.recv(65536):
            pass
    except TimeoutError:
        return None
    except OSError:  # reset
        pass
    return time.monotonic() - start


@pytest.fixture
def live() -> dict[str, tuple[bool, str]]:
    return {"v": (True, "ok")}


@pytest.fixture
def server(live: dict[str, tuple[bool, str]]):
    registry = CollectorRegistry()
    Counter("demo_total", "a counter", registry=registry).inc(3)
    s = httpd.serve_metrics(registry, "127.0.0.1", 0, {"/livez": lambda: live["v"]}, timeout=0.5)
    yield s
    s.close()


def test_metrics_and_checks_over_http(server: httpd.Server, live: dict) -> None:
    assert get(f"{server.url}/livez") == (200, "ok\n")
    live["v"] = (False, "stuck")
    assert get(f"{server.url}/livez?verbose") == (503, "stuck\n")
    status, text = get(f"{server.url}/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert status == 200 and families["demo"].samples[0].value == 3
    assert get(f"{server.url}/nothing") == (404, "not found\n")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/livez", method="POST"), timeout=5)
    assert refused.value.code == 405 and refused.value.headers["Allow"] == "GET, HEAD"
    assert get(f"{server.url}/livez", method="HEAD") == (503, "")


def test_a_failing_check_is_a_failed_probe_and_a_failing_route_a_500() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    def crash() -> tuple[int, str, bytes]:
        raise ValueError("boom")

    s = httpd.serve("t", ("127.0.0.1", 0), {"/readyz": httpd.probe(broken), "/crash": crash})
    try:
        assert get(f"{s.url}/readyz") == (503, "check failed: RuntimeError\n")
        assert get(f"{s.url}/crash") == (500, "ValueError\n")
        assert get(f"{s.url}/readyz")[0] == 503  # still serving
    finally:
        s.close()


def test_garbage_and_oversized_requests_are_dropped_and_the_port_keeps_answering(
    server: httpd.Server,
) -> None:
    for junk in (
        b"\x00\xff" * 100 + b"\r\n\r\n",
        b"GET /" + b"a" * 40_000 + b" HTTP/1.1\r\n\r\n",
        b"HELLO\r\n\r\n",
    ):
        c = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        c.sendall(junk)
        assert closed_within(c, 5) is not None
        c.close()
    assert get(f"{server.url}/livez") == (200, "ok\n")


def test_a_half_request_is_dropped_after_the_timeout(server: httpd.Server) -> None:
    client = half_request(server.port)
    took = closed_within(client, 5)
    client.close()
    assert took is not None and took < 3, took


def test_a_client_that_never_reads_a_large_answer_is_dropped() -> None:
    registry = CollectorRegistry()
    g = Gauge("big", "many series", ["i"], registry=registry)
    for i in range(40_000):  # ~1.5 MB of text: more than the socket buffers hold
        g.labels(str(i)).set(i)
    s = httpd.serve_metrics(registry, "127.0.0.1", 0, {"/livez": lambda: (True, "ok")}, timeout=0.5)
    try:
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", s.port))
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(2)  # never reads; the server gave up draining after 0.5 s
        assert get(f"{s.url}/livez", timeout=2) == (200, "ok\n")
        c.settimeout(5)
        received = 0
        try:
            while chunk := c.recv(1 << 20):
                received += len(chunk)
        except OSError:
            pass
        assert received < 1_500_000, received  # cut off, not sent in full
        c.close()
    finally:
        s.close()


def test_idle_clients_hold_no_thread_each_and_never_keep_a_probe_out() -> None:
    """1000 idle half-requests (four times the cap) with the default 5 s timeout: the thread count
    stays put and /livez answers at once, every time (a thread per connection with a cap of 32 refused
    it for the timeout: a liveness failure on demand)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    before = threading.active_count()
    s = httpd.serve_metrics(CollectorRegistry(), "127.0.0.1", 0, {"/livez": lambda: (True, "ok")})
    idle: list[socket.socket] = []
    try:
        for _ in range(1000):
            idle.append(half_request(s.port))
        time.sleep(0.3)
        assert threading.active_count() <= before + 1 + httpd.ROUTE_WORKERS, threading.active_count()
        for _ in range(20):
            start = time.monotonic()
            try:
                answer = get(f"{s.url}/livez", timeout=1)
            except (OSError, http.client.HTTPException) as exc:
                answer = (0, repr(exc))
            took = time.monotonic() - start
            assert answer == (200, "ok\n") and took < 0.5, f"{answer} after {took:.2f} s"
            idle.append(half_request(s.port))  # the flood goes on between probes
        assert threading.active_count() <= before + 1 + httpd.ROUTE_WORKERS
    finally:
        for c in idle:
            c.close()
        s.close()
    assert threading.active_count() <= before + httpd.ROUTE_WORKERS  # the loop's thread ended


def test_close_frees_the_port() -> None:
    s = httpd.serve("t", ("127.0.0.1", 0), {"/x": lambda: (200, "text/plain", b"x")})
    port = s.port
    s.close()
    s.close()  # idempotent
    again = httpd.serve("t", ("127.0.0.1", port), {})
    again.close()
