"""The operator's health and metrics endpoints, served on 127.0.0.1, port 0."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.operator import endpoints as E


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:8081", ("0.0.0.0", 8081)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::]:8080", ("::", 8080)),
        ("[::1]:9", ("::1", 9)),
        (" localhost:80 ", ("localhost", 80)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert E.parse_address(text) == expected


@pytest.mark.parametrize("text", ["8080", ":8080", "host:", "host:http", "host:65536", "host:-1", ""])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        E.parse_address(text)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_probes_and_metrics_over_http() -> None:
    state = {"ready": False}
    metrics = E.OperatorMetrics()
    health = E.serve(
        "health",
        ("127.0.0.1", 0),
        {
            "/healthz": E.probe(lambda: (True, "ok")),
            "/readyz": E.probe(lambda: (state["ready"], "standby" if state["ready"] else "starting")),
        },
    )
    scrape = E.serve("metrics", ("127.0.0.1", 0), {"/metrics": metrics.route})
    try:
        assert health.address[0] == "127.0.0.1" and health.address[1] > 0
        assert get(f"{health.url}/healthz") == (200, "ok\n")
        assert get(f"{health.url}/readyz") == (503, "starting\n")
        state["ready"] = True
        assert get(f"{health.url}/readyz?verbose") == (200, "standby\n")
        assert get(f"{health.url}/nothing")[0] == 404

        def leader() -> float:
            status, text = get(f"{scrape.url}/metrics")
            assert status == 200
            families = {f.name: f for f in text_string_to_metric_families(text)}
            assert "process_cpu_seconds" in families  # the process collector
            return families["graphtrain_operator_leader"].samples[0].value

        assert leader() == 0
        metrics.leader.set(1)
        assert leader() == 1
    finally:
        health.close()
        scrape.close()


def half_request(server: E.Server) -> socket.socket:
    """A client that sends half a request and never finishes it."""
    s = socket.create_connection(server.address, timeout=10)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    return s


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `s` (None: still open after `seconds`)."""
    start = time.monotonic()
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - start


def test_a_half_request_is_dropped_after_the_timeout() -> None:
    server = E.serve("health", ("127.0.0.1", 0), {"/healthz": E.probe(lambda: (True, "ok"))}, timeout=0.5)
    try:
        client = half_request(server)
        took = closed_within(client, 5)
        client.close()
        assert took is not None and took < 3, took
    finally:
        server.close()


def test_idle_clients_beyond_the_cap_neither_pile_up_threads_nor_starve_a_probe() -> None:
    cap, timeout = 4, 1.0
    before = threading.active_count()
    server = E.serve(
        "health",
        ("127.0.0.1", 0),
        {"/healthz": E.probe(lambda: (True, "ok"))},
        timeout=timeout,
        max_connections=cap,
    )
    idle = []
    try:
        for _ in range(200):
            idle.append(half_request(server))
        time.sleep(0.3)
        assert threading.active_count() <= before + 1 + cap, threading.active_count()  # + the server's thread
        start, answer = time.monotonic(), None
        while answer is None and time.monotonic() - start < timeout + 5:
            try:
                answer = get(f"{server.url}/healthz")
            except (OSError, http.client.HTTPException):  # closed at once while the slots are taken
                time.sleep(0.05)
        assert answer == (200, "ok\n"), f"no answer within {time.monotonic() - start:.1f} s"
        assert time.monotonic() - start < timeout + 3
        assert threading.active_count() <= before + 1 + cap
    finally:
        for s in idle:
            s.close()
        server.close()
