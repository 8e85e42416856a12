"""Bearer-token authentication: refused before any work (the source is never asked), 401 problem
details with WWW-Authenticate, open probes, /metrics behind a token unless opened, tokens re-read when
the file changes (revocation included), and no open API off loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graphtrain.api import auth, problems
from graphtrain.api.app import create_app
from graphtrain.api.settings import Settings
from tests.api.conftest import SCRAPER, TOKEN
from tests.api.fake import FakeSource
from tests.tree import ROOT

ONE = "/api/v1/trainings/team-a/job-0"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({}, False),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, False),
        ({"Authorization": "Bearer"}, False),
        (bearer("wrong-token-wrong-token-wrong"), True),
        (bearer(TOKEN[:-1]), True),
        (bearer(TOKEN + "x"), True),
        (bearer(TOKEN.upper()), True),
    ],
)
@pytest.mark.parametrize("path", [ONE, "/api/v1/trainings?limit=0", "/api/v1/trainings/Bad/../x", "/metrics"])
def test_refused_before_any_work(
    secured: TestClient, source: FakeSource, headers: dict, error: bool, path: str
) -> None:
    resp = secured.get(path, headers=headers)
    assert resp.status_code == 401 and resp.headers["content-type"] == problems.MEDIA_TYPE
    challenge = resp.headers["www-authenticate"]
    assert challenge.startswith("Bearer") and ('error="invalid_token"' in challenge) == error
    assert resp.json()["type"] == problems.UNAUTHORIZED
    assert source.calls == 0  # not even validation ran: limit=0 is a 401, not a 422


def test_each_token_of_the_file_is_accepted(secured: TestClient) -> None:
    for token in (TOKEN, SCRAPER):
        assert secured.get(ONE, headers=bearer(token)).status_code == 200
    assert secured.get(ONE, headers={"authorization": f"bearer   {TOKEN}  "}).status_code == 200


def test_two_authorization_headers_are_refused(secured: TestClient) -> None:
    headers = [("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer other-other-other-other")]
    assert secured.get(ONE, headers=headers).status_code == 401


def test_probes_and_docs_are_open(secured: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert secured.get(path).status_code == 200, path
    doc = secured.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}


def test_metrics_open_when_asked(source: FakeSource, token_file: Path) -> None:
    app = create_app(source, Settings(tokens=auth.TokenFile(token_file), metrics_open=True))
    client = TestClient(app)
    assert client.get("/metrics").status_code == 200
    assert client.get(ONE).status_code == 401
    text = client.get("/metrics").text
    assert 'route="/api/v1/trainings/{namespace}/{name}",status="401"} 1.0' in text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("first-token-first-token\n")
    clock = Clock()
    tokens = auth.TokenFile(path, clock=clock)
    assert tokens.valid("first-token-first-token")
    replacement = tmp_path / "tokens.new"  # as the kubelet updates a Secret: a new file moved in place
    replacement.write_text("second-token-second-token\n")
    os.replace(replacement, path)
    assert tokens.valid("first-token-first-token")  # looked at again once a second, not per request
    clock.now = 1.5
    assert not tokens.valid("first-token-first-token")  # revoked at the first look
    assert not tokens.valid("second-token-second-token")  # added once read the same at the next
    clock.now = 3.0
    assert tokens.valid("second-token-second-token")
    path.write_text("# every token revoked\n")
    clock.now = 4.5
    assert not tokens.valid("second-token-second-token")  # an empty file fails closed
    path.unlink()
    clock.now = 6.0
    assert not tokens.valid("second-token-second-token")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "holds no token"),
        ("# only a comment\n", "holds no token"),
        ("short\n", "no usable token .line 1: a token is one word"),
        ("# tokens\ngood-token-good-token namespace=a\n", "line 2: after the token"),
    ],
)
def test_unusable_token_file_is_refused_at_startup(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(auth.TokenFileError, match=message) as raised:
        auth.TokenFile(path)
    assert "good-token" not in str(raised.value)
    with pytest.raises(auth.TokenFileError, match="No such file"):
        auth.TokenFile(tmp_path / "missing")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.42", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_no_auth_only_on_loopback(host: str, loopback: bool) -> None:
    assert auth.is_loopback(host) == loopback
    assert (auth.check_bind(host, auth=False) is None) == loopback
    assert auth.check_bind(host, auth=True) is None


CLI = [sys.executable, "-m", "graphtrain.cli"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["api", "--no-auth", "--host", "0.0.0.0"], "--no-auth is allowed only on a loopback address"),
        (["api", "--source", "local"], "--source local needs --runs-dir"),
        (["api", "--source", "local", "--runs-dir", "/nonexistent", "--no-auth"], "is not a directory"),
        (["api", "--runs-dir", "/tmp", "--no-auth"], "--runs-dir is for --source local"),
        (["api", "--source", "local", "--runs-dir", "/tmp"], "give --token-file"),
        (["api", "--token-file", "/nonexistent", "--no-auth"], "exclude each other"),
        (["api", "--source", "local", "--runs-dir", "/tmp", "--token-file", "/nonexistent"], "token file"),
        # `graphtrain run`'s options are named as run names them
        (
            ["run", "examples/nations-transe.yaml", "--api", "0", "--api-no-auth", "--api-host", "0.0.0.0"],
            "error: --api-no-auth is allowed only on a loopback address (127.0.0.1, ::1), not 0.0.0.0: give "
            "--api-token-file instead",
        ),
        (["run", "examples/nations-transe.yaml", "--api", "0"], "give --api-token-file (one bearer token"),
    ],
)
def test_bad_options_say_one_line_and_exit_1(args: list[str], message: str, tmp_path) -> None:
    if args[0] == "run":  # refused before the run directory is made
        args = [*args, "--run-dir", str(tmp_path / "run")]
    res = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 1, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not (tmp_path / "run").exists()
