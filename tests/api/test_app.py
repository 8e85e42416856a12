"""The app over the fake source: every endpoint, the list's filters and pages, problem details for every
error, and the request metrics (route templates, never raw paths)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.api import models, problems
from tests.api.fake import FakeSource

LIST = "/api/v1/trainings"


def names(body: dict) -> list[str]:
    return [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in body["items"]]


def assert_problem(resp, status: int, parameter: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == problems.MEDIA_TYPE
    body = resp.json()
    assert body["status"] == status and body["title"] and body["type"]
    assert body["instance"] == resp.request.url.path
    if parameter is not None:
        assert parameter in [e["parameter"] for e in body["errors"]], body
    return body


def test_list_is_ordered_and_complete(client: TestClient) -> None:
    body = client.get(LIST).json()
    assert names(body) == sorted(names(body)) and len(body["items"]) == 7
    assert body["continue"] is None
    item = body["items"][0]
    assert item["phase"] == "Training" and item["progress"]["samplesPerSecond"] == 1003.0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"namespace": "team-b"}, ["team-b/job-1", "team-b/job-3", "team-b/job-5"]),
        ({"phase": "Failed"}, ["team-a/job-2", "team-b/job-5"]),
        ({"labelSelector": "team=a,size in (big)"}, ["team-a/job-0", "team-a/job-2"]),
        ({"labelSelector": "team!=a,size=small"}, ["team-b/job-3", "team-b/job-5"]),
        ({"labelSelector": "!team"}, []),
        ({"labelSelector": "team,size notin (big)", "phase": "Training"}, ["team-a/job-6", "team-b/job-3"]),
    ],
)
def test_list_filters(client: TestClient, query: dict, expected: list[str]) -> None:
    assert names(client.get(LIST, params=query).json()) == expected


def test_pages_cover_the_list_once(client: TestClient) -> None:
    seen, token, pages = [], None, 0
    while pages < 10:
        params = {"limit": 3, **({"continue": token} if token else {})}
        body = client.get(LIST, params=params).json()
        seen += names(body)
        pages += 1
        token = body["continue"]
        if token is None:
            break
    assert pages == 3 and seen == names(client.get(LIST).json())


def test_namespace_route_lists_one_namespace(client: TestClient) -> None:
    body = client.get("/api/v1/namespaces/team-a/trainings", params={"limit": 2}).json()
    assert names(body) == ["team-a/job-0", "team-a/job-2"] and body["continue"]


def test_one_training(client: TestClient) -> None:
    body = client.get("/api/v1/trainings/team-a/job-0").json()
    assert body["metadata"] == {
        "namespace": "team-a",
        "name": "job-0",
        "labels": {"team": "a", "size": "big"},
        "uid": None,
        "generation": None,
        "creationTimestamp": "2025-01-02T03:04:05+00:00",
    }
    assert body["spec"]["graph"] == "wordnet" and body["spec"]["trainers"] == 2
    assert body["status"]["phase"] == "Training" and body["status"]["restarts"] == 1
    assert [c["type"] for c in body["status"]["conditions"]] == ["SpecValid", "Failed"]
    assert body["trainers"][1]["rank"] == 1 and body["trainers"][1]["lastHeartbeat"]


def test_sub_resources(client: TestClient) -> None:
    base = "/api/v1/trainings/team-a/job-2"
    shards = client.get(f"{base}/shards").json()["items"]
    assert [(s["index"], s["state"], s["restarts"]) for s in shards] == [(0, "Ready", 0), (1, "Ready", 1)]
    trainers = client.get(f"{base}/trainers").json()["items"]
    assert [(t["rank"], t["state"]) for t in trainers] == [(0, "Running"), (1, "Running")]
    answered = client.get(f"{base}/history")  # the source's bytes as they are
    assert answered.headers["content-type"] == "application/json"
    history = answered.json()
    assert [h["epoch"] for h in history["items"]] == [1, 2, 3] and history["limit"] == 500
    events = client.get(f"{base}/events").json()["items"]
    assert {(e["type"], e["reason"]) for e in events} == {("Normal", "Valid"), ("Warning", "ProcessFailed")}


def test_events_are_the_newest_limit_with_the_total(
    client: TestClient, source: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training with thousands of events answered them all (2 MB at 5,000; 100 clients that never read
    held +830 MB): the newest `limit` (default 100, at most 500), oldest first, and how many there are."""
    many = [
        models.TrainingEvent(type="Normal", reason="Progressing", message=f"epoch {i}") for i in range(700)
    ]
    monkeypatch.setattr(source, "events", lambda namespace, name: many)
    base = "/api/v1/trainings/team-a/job-2/events"
    body = client.get(base).json()
    assert body["total"] == 700 and [e["message"] for e in body["items"]] == [
        f"epoch {i}" for i in range(600, 700)
    ]
    body = client.get(base, params={"limit": 500}).json()
    assert len(body["items"]) == 500 and body["items"][0]["message"] == "epoch 200"
    assert_problem(client.get(base, params={"limit": 501}), 422, "limit")


@pytest.mark.parametrize("suffix", ["", "/shards", "/trainers", "/events", "/history"])
def test_unknown_training_is_404(client: TestClient, suffix: str) -> None:
    body = assert_problem(client.get(f"/api/v1/trainings/team-a/nope{suffix}"), 404)
    assert body["detail"] == "no training team-a/nope" and body["type"] == problems.NOT_FOUND


@pytest.mark.parametrize(
    ("query", "got"),
    [
        ({"limit": 501}, ", got '501'"),
        ({"limit": "x\ny" * 100}, ", got 'x\\ny"),
        ({"phase": "Sleeping"}, ", got 'Sleeping'"),
    ],
)
def test_a_refused_parameter_names_its_value_short_on_one_line(
    client: TestClient, query: dict, got: str
) -> None:
    """As a spec problem names it (contract/spec/shown.py)."""
    (error,) = assert_problem(client.get(LIST, params=query), 422)["errors"]
    assert got in error["message"] and error["message"].isprintable() and len(error["message"]) < 200


@pytest.mark.parametrize(
    ("query", "status", "parameter"),
    [
        ({"limit": 0}, 422, "limit"),
        ({"limit": 501}, 422, "limit"),
        ({"limit": "many"}, 422, "limit"),
        ({"phase": "Sleeping"}, 422, "phase"),
        ({"namespace": "Team_A"}, 422, "namespace"),
        ({"labelSelector": "a in x"}, 400, "labelSelector"),
        ({"labelSelector": "a in ()"}, 400, "labelSelector"),
        ({"labelSelector": "bad key=1"}, 400, "labelSelector"),
        ({"labelSelector": "a=b)"}, 400, "labelSelector"),
        ({"labelSelector": "a=" + "v" * 64}, 400, "labelSelector"),
        ({"continue": "not-a-token"}, 400, "continue"),
        ({"continue": "eyJhZnRlciI6IDF9"}, 400, "continue"),  # valid base64 JSON, not ours
    ],
)
def test_bad_input_is_a_problem_naming_the_parameter(
    client: TestClient, source: FakeSource, query: dict, status: int, parameter: str
) -> None:
    assert_problem(client.get(LIST, params=query), status, parameter)


@pytest.mark.parametrize(
    ("path", "query", "parameter"),
    [
        (LIST, {"labelselector": "a=b"}, "labelselector"),  # misspelt: not an unfiltered list
        (LIST, {"ns": "team-a"}, "ns"),
        ("/api/v1/namespaces/team-a/trainings", {"namespace": "team-b"}, "namespace"),
        ("/api/v1/trainings/team-a/job-0", {"limit": "1"}, "limit"),
        ("/api/v1/trainings/team-a/job-0/events", {"x": "1"}, "x"),
        # /history takes none: each answer is the whole history, the bytes its source keeps
        ("/api/v1/trainings/team-a/job-0/history", {"limit": "5"}, "limit"),
        ("/api/v1/trainings/team-a/job-0/history", {"since": "3"}, "since"),
    ],
)
def test_a_parameter_the_route_does_not_take_is_refused_naming_it(
    client: TestClient, path: str, query: dict, parameter: str
) -> None:
    assert_problem(client.get(path, params=query), 400, parameter)


def test_the_namespace_route_takes_its_own_namespace_as_a_parameter(client: TestClient) -> None:
    body = client.get("/api/v1/namespaces/team-a/trainings", params={"namespace": "team-a"}).json()
    assert names(body) and all(n.startswith("team-a/") for n in names(body))


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/trainings/..%2F..%2Fetc/passwd",
        "/api/v1/trainings/team-a/%2E%2E",
        "/api/v1/trainings/team-a/a,b!=c",
        "/api/v1/trainings/UPPER/x",
        "/api/v1/trainings/team-a/" + "x" * 64,
    ],
)
def test_names_that_are_no_dns_label_never_reach_the_source(
    client: TestClient, source: FakeSource, path: str
) -> None:
    resp = client.get(path)
    assert resp.status_code in (404, 422) and resp.headers["content-type"] == problems.MEDIA_TYPE
    assert source.calls == 0


def test_unavailable_source_is_503_and_not_ready(client: TestClient, source: FakeSource) -> None:
    source.unavailable = True
    body = assert_problem(client.get(LIST), 503)
    assert body["type"] == problems.SOURCE_UNAVAILABLE
    assert assert_problem(client.get("/readyz"), 503)
    assert client.get("/healthz").json() == {"status": "ok"}


def test_unexpected_error_is_a_500_that_says_nothing_of_it(client: TestClient, source: FakeSource) -> None:
    source.broken = True
    body = assert_problem(client.get("/api/v1/trainings/team-a/job-0"), 500)
    assert "secret" not in str(body) and "abc" not in str(body)


def test_unknown_path_and_method(client: TestClient) -> None:
    assert_problem(client.get("/api/v2/whatever"), 404)
    assert_problem(client.delete("/api/v1/trainings/team-a/job-0"), 405)


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}


def samples(client: TestClient) -> dict[tuple[str, tuple], float]:
    text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_route_templates_not_paths(client: TestClient) -> None:
    before = samples(client)
    one = "/api/v1/trainings/{namespace}/{name}"
    key = ("graphtrain_api_requests_total", (("method", "GET"), ("route", one), ("status", "200")))
    assert before[key] == 0  # pre-initialised
    for name in ("job-0", "job-1", "nope", "nope-2"):
        client.get(f"/api/v1/trainings/team-a/{name}")
    client.get("/random/scanner/path")
    after = samples(client)
    assert after[key] == 1
    miss = ("graphtrain_api_requests_total", (("method", "GET"), ("route", one), ("status", "404")))
    assert after[miss] == 3  # team-a/job-1 is in team-b
    unmatched = (
        "graphtrain_api_requests_total",
        (("method", "GET"), ("route", "unmatched"), ("status", "404")),
    )
    assert after[unmatched] == 1
    routes = {dict(labels)["route"] for (name, labels) in after if name == "graphtrain_api_requests_total"}
    assert not any("job-" in r or "nope" in r or "scanner" in r for r in routes)
    count = ("graphtrain_api_request_seconds_count", (("method", "GET"), ("route", one)))
    assert after[count] == 4


def test_openapi_documents_problems_and_every_route(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = set(doc["paths"])
    assert {
        "/api/v1/trainings",
        "/api/v1/namespaces/{namespace}/trainings",
        "/api/v1/trainings/{namespace}/{name}",
        "/api/v1/trainings/{namespace}/{name}/events",
        "/api/v1/trainings/{namespace}/{name}/history",
        "/api/v1/trainings/{namespace}/{name}/shards",
        "/api/v1/trainings/{namespace}/{name}/trainers",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= paths
    not_found = doc["paths"]["/api/v1/trainings/{namespace}/{name}"]["get"]["responses"]["404"]
    assert list(not_found["content"]) == [problems.MEDIA_TYPE]
    status = doc["components"]["schemas"]["GraphTrainingStatus"]  # the spec's model, one schema
    assert "conditions" in status["properties"]
