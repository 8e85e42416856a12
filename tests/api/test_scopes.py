"""Tokens scoped to namespaces (api/tokens.py, api/access.py) over trainings in three namespaces: a token
for team-a, one for team-b and team-c, and the platform team's token for every namespace. Each sees its
namespaces' trainings only, on every route; another namespace's training is a 404 in the same words as
one that does not exist; /metrics is the platform token's; the file is re-read at run time."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graphtrain.api.app import create_app
from graphtrain.api.auth import TokenFile
from graphtrain.api.settings import Settings
from graphtrain.api.sources.kubernetes import listed_namespaces
from graphtrain.api.sources.local import LocalSource
from graphtrain.contract.spec import Phase
from tests.api.fake import FakeSource, training
from tests.api.test_local import write_run

A = "token-of-team-a-0123456789"
BC = "token-of-teams-b-and-c-0123456789"
ADMIN = "token-of-the-platform-team-0123"
NAMESPACES = ("team-a", "team-b", "team-c")
ROUTES = ("", "/shards", "/trainers", "/events", "/history")
VISIBLE = {A: {"team-a"}, BC: {"team-b", "team-c"}, ADMIN: set(NAMESPACES)}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def source() -> FakeSource:
    phases = [Phase.training, Phase.succeeded, Phase.failed]
    return FakeSource([training(ns, f"job-{i}", phases[i]) for ns in NAMESPACES for i in range(3)])


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, Clock]:
    path = tmp_path / "tokens"
    path.write_text(f"# platform\n{ADMIN}\n{A} namespaces=team-a\n{BC} namespaces=team-b,team-c\n")
    return path, Clock()


@pytest.fixture
def api(source: FakeSource, tokens: tuple[Path, Clock]) -> TestClient:
    path, clock = tokens
    app = create_app(source, Settings(tokens=TokenFile(path, clock=clock)))
    return TestClient(app, raise_server_exceptions=False)


def get(api: TestClient, token: str, url: str, **params: str | int):
    return api.get(url, params=params, headers={"Authorization": f"Bearer {token}"})


def listed(api: TestClient, token: str, url: str = "/api/v1/trainings", **params: str | int) -> list[str]:
    """Every page of a list, followed to the end."""
    out: list[str] = []
    for _ in range(20):
        body = get(api, token, url, **params).json()
        out += [f"{t['metadata']['namespace']}/{t['metadata']['name']}" for t in body["items"]]
        if body.get("continue") is None:
            return out
        params = {**params, "continue": body["continue"]}
    raise AssertionError("the list never ended")


@pytest.mark.parametrize("token", [A, BC, ADMIN])
def test_lists_hold_only_the_tokens_namespaces_page_by_page(api: TestClient, token: str) -> None:
    seen = sorted(VISIBLE[token])
    every = [f"{ns}/job-{i}" for ns in seen for i in range(3)]
    assert listed(api, token) == every
    assert listed(api, token, limit=1) == every  # pages and their continue tokens: its trainings only
    assert listed(api, token, phase="Failed", limit=1) == [f"{ns}/job-2" for ns in seen]
    for ns in NAMESPACES:
        mine = [f"{ns}/job-{i}" for i in range(3)] if ns in VISIBLE[token] else []
        assert listed(api, token, namespace=ns) == mine  # another's: as a namespace with no trainings
        assert listed(api, token, f"/api/v1/namespaces/{ns}/trainings", limit=2) == mine


@pytest.mark.parametrize("route", ROUTES)
def test_another_namespaces_training_is_answered_as_one_that_does_not_exist(
    api: TestClient, source: FakeSource, route: str
) -> None:
    for ns, name in (("team-a", "job-0"), ("team-a", "job-1")):
        assert get(api, A, f"/api/v1/trainings/{ns}/{name}{route}").status_code == 200
    calls = source.calls
    refused = {t: get(api, t, f"/api/v1/trainings/team-b/job-1{route}") for t in (A, BC)}
    assert source.calls == calls + 1  # BC's; A's was answered without asking the source
    assert refused[BC].status_code == 200 and refused[A].status_code == 404
    del source.trainings[("team-b", "job-1")]
    missing = get(api, ADMIN, f"/api/v1/trainings/team-b/job-1{route}")
    assert missing.status_code == 404
    assert refused[A].content == missing.content
    assert refused[A].headers["content-type"] == missing.headers["content-type"]


def test_metrics_need_a_token_for_every_namespace_and_name_no_namespace(api: TestClient) -> None:
    for token in VISIBLE:
        for ns in NAMESPACES:
            get(api, token, f"/api/v1/trainings/{ns}/job-0/events")
    for token in (A, BC):
        refused = get(api, token, "/metrics")
        assert refused.status_code == 403
        assert refused.headers["content-type"] == "application/problem+json"
        assert "every namespace" in refused.json()["detail"]
    scraped = get(api, ADMIN, "/metrics")
    assert scraped.status_code == 200 and "graphtrain_api_requests_total" in scraped.text
    assert "team-" not in scraped.text  # route templates only
    refusals = 'method="GET",route="/api/v1/trainings/{namespace}/{name}/events",status="404"} 3.0'
    assert f"graphtrain_api_requests_total{{{refusals}" in scraped.text  # A's 2, BC's 1


def test_metrics_open_is_open_to_every_token(source: FakeSource, tokens: tuple[Path, Clock]) -> None:
    app = create_app(source, Settings(tokens=TokenFile(tokens[0]), metrics_open=True))
    api = TestClient(app, raise_server_exceptions=False)
    assert get(api, A, "/metrics").status_code == 200
    assert api.get("/metrics").status_code == 200
    assert get(api, A, "/api/v1/trainings/team-b/job-0").status_code == 404


def test_probes_stay_open(api: TestClient) -> None:
    assert api.get("/healthz").status_code == 200 and api.get("/readyz").status_code == 200


def test_the_scope_follows_the_file_without_a_restart(api: TestClient, tokens: tuple[Path, Clock]) -> None:
    path, clock = tokens

    def rewrite(a_line: str) -> None:
        path.write_text(f"{ADMIN}\n{a_line}\n{BC} namespaces=team-b,team-c\n")
        for _ in range(2):  # past the re-check interval twice: a widened grant is read the same twice
            clock.now += 1.5
            get(api, ADMIN, "/api/v1/trainings")

    url = "/api/v1/trainings/team-b/job-0"
    assert get(api, A, url).status_code == 404
    rewrite(f"{A} namespaces=team-a,team-b")  # widened
    assert get(api, A, url).status_code == 200
    assert {t.split("/")[0] for t in listed(api, A)} == {"team-a", "team-b"}
    rewrite(f"{A} namespaces=team-c")  # narrowed, and moved
    assert get(api, A, url).status_code == 404
    assert get(api, A, "/api/v1/trainings/team-a/job-0/history").status_code == 404
    assert listed(api, A) == [f"team-c/job-{i}" for i in range(3)]
    rewrite(f"{A} namespace=team-a")  # malformed: refused alone, never every namespace
    assert get(api, A, url).status_code == 401
    assert get(api, BC, url).status_code == 200
    rewrite(A)  # a bare token again: every namespace
    assert len(listed(api, A)) == 9 and get(api, A, "/metrics").status_code == 200


def test_a_file_read_half_written_never_widens_a_grant(api: TestClient, tokens: tuple[Path, Clock]) -> None:
    """A token file truncated and rewritten in place (`cat > tokens`, an editor without a rename) may be
    read between its writes: `TOKEN` without the ` namespaces=team-a` that follows, or `team-a,te` of
    `team-a,team-b`. Such a read is applied narrowed by what was there before, until read the same again
    a second later; a revocation is applied at once."""
    path, clock = tokens
    url = "/api/v1/trainings/team-b/job-0"

    def read(text: str) -> None:
        path.write_text(text)
        clock.now += 1.5

    read(f"{ADMIN}\n{A}")  # A's line cut before its namespaces: a bare token, every namespace
    assert get(api, A, url).status_code == 404 and listed(api, A) == [f"team-a/job-{i}" for i in range(3)]
    assert get(api, A, "/metrics").status_code == 403
    assert get(api, BC, "/api/v1/trainings/team-b/job-0").status_code == 401  # its line not yet there
    read(f"{ADMIN}\n{A} namespaces=team-a\n{BC} namespaces=te")  # BC's cut within a namespace
    assert get(api, BC, "/api/v1/trainings/team-b/job-0").status_code == 401  # nothing in common
    read(f"{ADMIN}\n{A} namespaces=team-a\n{BC} namespaces=team-b,team-c\n")  # the write done
    assert get(api, BC, url).status_code == 200 and get(api, A, url).status_code == 404
    read(f"{ADMIN}\n{BC} namespaces=team-b\n")  # A revoked, BC narrowed: at the first look
    assert get(api, A, "/api/v1/trainings").status_code == 401
    assert get(api, BC, "/api/v1/trainings/team-c/job-0").status_code == 404
    read(f"{ADMIN}\n{A}\n{BC} namespaces=team-b\n")  # A back, for every namespace: once read twice
    assert get(api, A, url).status_code == 401
    clock.now += 1.5
    assert get(api, A, url).status_code == 200


def test_a_scoped_token_sees_the_local_runs_that_name_its_namespace(tmp_path: Path) -> None:
    """Local runs take their namespace from their document, `default` when it names none."""
    write_run(tmp_path / "runs" / "one", "alpha", "Training", namespace="team-a")
    write_run(tmp_path / "runs" / "two", "beta", "Training")
    (tmp_path / "tokens").write_text(f"{A} namespaces=team-a\n{BC} namespaces=default\n")
    app = create_app(LocalSource(tmp_path / "runs"), Settings(tokens=TokenFile(tmp_path / "tokens")))
    api = TestClient(app, raise_server_exceptions=False)
    assert listed(api, A) == ["team-a/alpha"] and listed(api, BC) == ["default/beta"]
    assert get(api, A, "/api/v1/trainings/default/beta").status_code == 404
    assert get(api, BC, "/api/v1/trainings/default/beta/history").status_code == 200


@pytest.mark.parametrize(
    ("asked", "served", "allowed", "listed"),
    [
        (None, None, None, [None]),  # every namespace, one API-server list
        ("team-a", None, None, ["team-a"]),
        (None, "team-a", None, ["team-a"]),
        ("team-b", "team-a", None, []),  # a namespace this server does not serve
        (None, None, frozenset({"team-b"}), ["team-b"]),
        (None, None, frozenset({"team-c", "team-b"}), ["team-b", "team-c"]),  # each, in order
        ("team-a", None, frozenset({"team-b"}), []),
        ("team-b", None, frozenset({"team-b", "team-c"}), ["team-b"]),
        (None, "team-a", frozenset({"team-b"}), []),
        (None, "team-a", frozenset({"team-a", "team-b"}), ["team-a"]),
    ],
)
def test_the_kubernetes_lists_ask_only_for_visible_namespaces(
    asked: str | None, served: str | None, allowed: frozenset[str] | None, listed: list[str | None]
) -> None:
    assert listed_namespaces(asked, served, allowed) == listed
