"""The shared token's sources (--token-file, else $GRAPHTRAIN_TOKEN): each problem is one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.wire.auth import read_token


def test_a_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    assert read_token(tmp_path / "token") == "s3cret"


@pytest.mark.parametrize("text", ["", "\n", "  \n"])
def test_an_empty_token_file_is_named_as_empty(tmp_path: Path, text: str) -> None:
    """An empty Secret key mounted as the file: the message names the file, not a missing option."""
    (tmp_path / "token").write_text(text)
    with pytest.raises(GraphtrainError) as err:
        read_token(tmp_path / "token")
    assert str(err.value) == f"{tmp_path / 'token'}: the token file is empty"


def test_no_file_and_no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAPHTRAIN_TOKEN", raising=False)
    with pytest.raises(GraphtrainError, match="^no token: pass --token-file or set GRAPHTRAIN_TOKEN$"):
        read_token(None)


def test_an_unreadable_token_file(tmp_path: Path) -> None:
    with pytest.raises(GraphtrainError, match="cannot read the token file"):
        read_token(tmp_path / "missing")
