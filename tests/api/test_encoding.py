"""gzip answers (api/encoding.py): sent compressed only to a request that takes gzip and only when large
enough, always with Vary: Accept-Encoding; a kept /history answer is sent in the gzip form kept with it
(no compression per request); /metrics, problems and the identity answers stay as they were."""

from __future__ import annotations

import gzip

import pytest
from fastapi.testclient import TestClient

from graphtrain.api import encoding, models
from graphtrain.api.app import create_app
from graphtrain.api.encoding import GZIP_MIN, GzipAnswer, accepts_gzip
from graphtrain.api.settings import Settings
from graphtrain.contract.reporting import encode_history
from tests.api.fake import FakeSource, epochs, many, progress

HISTORY = "/api/v1/trainings/team-a/job-0/history"
GZIP = {"Accept-Encoding": "gzip"}
IDENTITY = {"Accept-Encoding": "identity"}


class KeptHistories(FakeSource):
    """Its /history answers are Answers, kept, 200 epochs long (~43 KB), as the caching sources'."""

    def __init__(self) -> None:
        super().__init__(many())
        self.kept = GzipAnswer(models.history_answer(encode_history([progress(e) for e in range(1, 201)])))

    def history(self, namespace: str, name: str) -> bytes:
        self._get(namespace, name)
        return self.kept


def raw(client: TestClient, url: str, headers: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """The answer's headers and its bytes as sent (httpx would decompress them)."""
    with client.stream("GET", url, headers=headers) as response:
        return dict(response.headers), b"".join(response.iter_raw())


@pytest.fixture
def kept() -> tuple[TestClient, KeptHistories]:
    source = KeptHistories()
    return TestClient(create_app(source, Settings()), raise_server_exceptions=False), source


@pytest.mark.parametrize(
    ("header", "takes"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("br;q=1.0, GZIP;q=0.5", True),
        ("x-gzip", True),
        ("*", True),
        ("", False),
        ("identity", False),
        ("deflate, br", False),
        ("gzip;q=0", False),
        ("gzip;q=0.000, *", False),  # refused by name: the wildcard does not bring it back
        ("*;q=0", False),
        ("gzip;q=x", False),
    ],
)
def test_accept_encoding_is_read_with_its_q_values(header: str, takes: bool) -> None:
    assert accepts_gzip(header) is takes


def test_a_kept_history_is_sent_in_its_kept_gzip_form(kept: tuple[TestClient, KeptHistories]) -> None:
    client, source = kept
    headers, body = raw(client, HISTORY, GZIP)
    assert headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding"
    assert body == source.kept.gzipped and int(headers["content-length"]) == len(body)
    assert gzip.decompress(body) == source.kept and epochs(gzip.decompress(body)) == list(range(1, 201))
    assert len(body) * 4 < len(source.kept)
    headers, body = raw(client, HISTORY, IDENTITY)
    assert "content-encoding" not in headers and headers["vary"] == "Accept-Encoding"
    assert body == source.kept


def test_lists_and_one_training_are_gzipped_when_large_enough(client: TestClient) -> None:
    for url in (
        "/api/v1/trainings",
        "/api/v1/trainings/team-a/job-0",
        "/api/v1/trainings/team-a/job-0/events",
    ):
        plain_headers, plain = raw(client, url, IDENTITY)
        headers, body = raw(client, url, GZIP)
        assert headers["vary"] == plain_headers["vary"] == "Accept-Encoding"
        if len(plain) >= GZIP_MIN:
            assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == plain, url
        else:
            assert "content-encoding" not in headers and body == plain, url
    assert len(raw(client, "/api/v1/trainings", IDENTITY)[1]) >= GZIP_MIN  # one case at least compressed


def test_a_history_not_kept_is_compressed_on_the_way(client: TestClient) -> None:
    """The fake source's /history is plain bytes (as the uncached Kubernetes source's): compressed in
    the route when large enough, sent as it is when not (3 epochs: under GZIP_MIN)."""
    headers, body = raw(client, HISTORY, GZIP)
    assert len(body) < GZIP_MIN and "content-encoding" not in headers and epochs(body) == [1, 2, 3]
    big = b"[" + b" " * GZIP_MIN + b"]"
    assert encoding.respond(big, True).headers["content-encoding"] == "gzip"
    assert gzip.decompress(encoding.respond(big, True).body) == big
    assert "content-encoding" not in encoding.respond(big, False).headers


def test_metrics_and_problems_still_answer(client: TestClient) -> None:
    client.get("/api/v1/trainings")
    headers, body = raw(client, "/metrics", GZIP)
    assert headers["content-encoding"] == "gzip" and headers["content-type"].startswith("text/plain")
    assert b'graphtrain_api_requests_total{method="GET",route="/api/v1/trainings",status="200"}' in (
        gzip.decompress(body)
    )
    assert client.get("/metrics", headers=IDENTITY).text.startswith("# HELP")
    headers, body = raw(client, "/api/v1/trainings/team-a/nope/history", GZIP)
    assert headers["content-type"] == "application/problem+json" and b"no training" in body
    assert "content-encoding" not in headers
    assert client.get("/openapi.json", headers=GZIP).json()["info"]["version"] == "v1"


def test_the_openapi_document_is_gzipped_from_a_form_made_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """34 KB, sent whole to every client (FastAPI's route serialised it per request): now 6.1 KB to a
    client that takes gzip, its bytes and gzip form made at the first request and kept."""
    plain_headers, plain = raw(client, "/openapi.json", IDENTITY)
    assert "content-encoding" not in plain_headers and plain_headers["vary"] == "Accept-Encoding"
    assert plain_headers["content-type"] == "application/json" and len(plain) > 20_000

    def fail(body: bytes) -> bytes:
        raise AssertionError("compressed again")

    monkeypatch.setattr(encoding, "gzip_of", fail)
    headers, body = raw(client, "/openapi.json", GZIP)
    assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == plain
    assert len(body) * 5 < len(plain)
    assert raw(client, "/openapi.json", IDENTITY)[1] == plain
