"""Fixtures of the API tests: an app over the fake source, with and without authentication."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graphtrain.api.app import create_app
from graphtrain.api.auth import TokenFile
from graphtrain.api.settings import Settings
from tests.api.fake import FakeSource, many

TOKEN = "t0ken-for-the-api-tests-0123456789"
SCRAPER = "scraper-token-abcdefghijklmnop"


@pytest.fixture
def source() -> FakeSource:
    return FakeSource(many())


@pytest.fixture
def client(source: FakeSource) -> TestClient:
    """No authentication (as on loopback with --no-auth)."""
    return TestClient(create_app(source, Settings()), raise_server_exceptions=False)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"# the API's tokens\n{TOKEN}\n\n{SCRAPER}\n")
    return path


@pytest.fixture
def secured(source: FakeSource, token_file: Path) -> TestClient:
    return TestClient(
        create_app(source, Settings(tokens=TokenFile(token_file))), raise_server_exceptions=False
    )
