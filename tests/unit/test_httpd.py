"""A process' metrics port (runtime/httpd.py) is bounded like the operator's endpoints: idle clients hold
neither a thread each nor the port, so the probes served there keep answering."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.runtime import httpd


def get(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def half_request(port: int) -> socket.socket:
    """A client that sends half a request and never finishes it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
    return s


def test_metrics_and_checks_over_http() -> None:
    registry = CollectorRegistry()
    Counter("demo_total", "a counter", registry=registry).inc(3)
    verdict = {"live": (True, "ok")}
    server, port = httpd.serve(registry, "127.0.0.1", 0, {"/livez": lambda: verdict["live"]})
    try:
        assert get(f"http://127.0.0.1:{port}/livez") == (200, "ok\n")
        verdict["live"] = (False, "stuck")
        assert get(f"http://127.0.0.1:{port}/livez?verbose") == (503, "stuck\n")
        status, text = get(f"http://127.0.0.1:{port}/metrics")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert status == 200 and families["demo"].samples[0].value == 3
    finally:
        server.shutdown()
        server.server_close()


def test_a_failing_check_is_a_failed_probe() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    server, port = httpd.serve(CollectorRegistry(), "127.0.0.1", 0, {"/readyz": broken})
    try:
        assert get(f"http://127.0.0.1:{port}/readyz") == (503, "check failed: RuntimeError\n")
    finally:
        server.shutdown()
        server.server_close()


def test_a_half_request_is_dropped_after_the_timeout() -> None:
    server, port = httpd.serve(CollectorRegistry(), "127.0.0.1", 0, timeout=0.5)
    try:
        client = half_request(port)
        start = time.monotonic()
        client.settimeout(5)
        try:
            while client.recv(4096):
                pass
        except OSError:  # reset, or still open after 5 s (TimeoutError): the assertion below says which
            pass
        assert time.monotonic() - start < 3
        client.close()
    finally:
        server.shutdown()
        server.server_close()


def test_100_idle_clients_hold_no_thread_each_and_livez_still_answers_within_a_second() -> None:
    timeout = 0.5
    before = threading.active_count()
    server, port = httpd.serve(CollectorRegistry(), "127.0.0.1", 0, {"/livez": lambda: (True, "ok")}, timeout)
    idle = []
    try:
        idle = [half_request(port) for _ in range(100)]
        time.sleep(0.2)
        cap = httpd.MAX_CONNECTIONS
        assert threading.active_count() <= before + 1 + cap, threading.active_count()  # + serve_forever
        start, answer = time.monotonic(), None
        while answer is None and time.monotonic() - start < 5:
            try:
                answer = get(f"http://127.0.0.1:{port}/livez", timeout=1)
            except (OSError, http.client.HTTPException):  # closed at once while every slot is taken
                time.sleep(0.02)
        took = time.monotonic() - start
        assert answer == (200, "ok\n") and took < 1.0, f"answered {answer} after {took:.2f} s"
        assert threading.active_count() <= before + 1 + cap
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()
