"""The operator's health and metrics endpoints, served on 127.0.0.1, port 0 (their server is
contract/httpd.py: idle and never-reading clients are tested in test_httpd.py)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.operator import endpoints


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
    assert endpoints.parse_address(text) == expected


@pytest.mark.parametrize("text", ["8080", ":8080", "host:", "host:http", "host:65536", "host:-1", ""])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        endpoints.parse_address(text)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_probes_and_metrics_over_http() -> None:
    state = {"ready": False}
    metrics = endpoints.OperatorMetrics()
    health = endpoints.serve(
        "health",
        ("127.0.0.1", 0),
        {
            "/healthz": endpoints.probe(lambda: (True, "ok")),
            "/readyz": endpoints.probe(lambda: (state["ready"], "standby" if state["ready"] else "starting")),
        },
    )
    scrape = endpoints.serve("metrics", ("127.0.0.1", 0), {"/metrics": metrics.route})
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
