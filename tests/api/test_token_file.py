"""The token file is read without ever blocking the API: a FIFO with no writer, a device or a file too
large is refused with one line naming the path (at start) or refuses every request (at a reload), and
neither the start nor a request waits on it. A pipe handed at start (`--token-file <(...)`) is still
read to its writer's end, within a bound."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from graphtrain.api import auth

TOKEN = "token-of-the-platform-team-0123"
BOUND = 5.0  # seconds a call gets before the test calls it blocked (it returns in milliseconds)


def bounded(call: Callable[[], Any]) -> Any:
    """`call()`'s result or exception, or a failure if it is still blocked after BOUND seconds."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the call blocked"
    if "error" in done:
        raise done["error"]
    return done["value"]


def release(fifo: Path) -> None:
    """Unblock a reader left waiting on `fifo` (before the fix): a writer's open, then its close."""
    with contextlib.suppress(OSError):  # no reader waits: nothing to release
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO nobody writes to."""
    path = tmp_path / "tokens"
    os.mkfifo(path)
    yield path
    release(path)


def test_a_fifo_without_a_writer_is_refused_at_start_at_once(fifo: Path) -> None:
    with pytest.raises(auth.TokenFileError) as raised:
        bounded(lambda: auth.TokenFile(fifo))
    assert str(raised.value) == f"token file {fifo}: it is a pipe with nothing written to it"


def test_a_device_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(auth.TokenFileError, match="^token file /dev/null: it is not a regular file$"):
        bounded(lambda: auth.TokenFile(Path("/dev/null")))


def test_a_file_over_the_bound_is_refused_at_start_unread(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n" + "#" * auth.MAX_FILE_BYTES + "\n")
    with pytest.raises(auth.TokenFileError) as raised:
        auth.TokenFile(path)
    size = path.stat().st_size
    assert str(raised.value) == f"token file {path}: it is {size} bytes, more than {auth.MAX_FILE_BYTES}"
    huge = tmp_path / "huge"  # sparse: 2 GiB read took 37 s, every request waiting
    with open(huge, "wb") as f:
        f.truncate(2 << 30)
    with pytest.raises(auth.TokenFileError, match="more than"):
        bounded(lambda: auth.TokenFile(huge))


def test_a_reload_never_waits_and_refuses_every_request_until_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Swapped in where the Secret was, a FIFO held the reload (in the event loop: every request, the
    probes' too) until someone wrote to it, and a huge file was read whole (2 GiB: 37 s)."""
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n")
    clock = [0.0]
    file = auth.TokenFile(path, clock=lambda: clock[0])
    assert file.valid(TOKEN)
    path.unlink()
    os.mkfifo(path)
    try:
        with caplog.at_level(logging.WARNING, logger="graphtrain.api"):
            clock[0] += 2
            assert bounded(lambda: file.valid(TOKEN)) is False
        assert f"token file {path}: it is not a regular file; refusing every request" in caplog.text
    finally:
        release(path)
    path.unlink()
    path.write_text(f"{TOKEN}\n")
    for _ in range(2):  # read the same twice: widened again
        clock[0] += 2
        file.valid(TOKEN)
    assert file.valid(TOKEN)
    with open(path, "r+b") as f:
        f.truncate(2 << 30)
    clock[0] += 2
    assert bounded(lambda: file.valid(TOKEN)) is False
    assert f"more than {auth.MAX_FILE_BYTES}" in caplog.text and TOKEN not in caplog.text


def test_a_new_reason_to_refuse_is_said_once_each(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Broken, then broken another way (the FIFO replaced by a file over the bound, then by an empty
    one): each reason was not said, the log kept naming the first, which the user had fixed."""
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n")
    clock = [0.0]
    file = auth.TokenFile(path, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="graphtrain.api"):
        for broken in (lambda: path.symlink_to("/dev/zero"), lambda: path.write_bytes(b"#" * (2 << 20)),
                       lambda: path.write_text("")):  # fmt: skip
            path.unlink()
            broken()
            for _ in range(3):  # checked again and again: said once
                clock[0] += 2
                assert bounded(lambda: file.valid(TOKEN)) is False
    said = [r.getMessage() for r in caplog.records if "refusing every request" in r.getMessage()]
    assert [m.split(": ", 1)[1].split(";")[0] for m in said] == [
        "it is not a regular file",
        f"it is {2 << 20} bytes, more than {auth.MAX_FILE_BYTES}",
        "it holds no token",
    ]


def test_a_pipe_at_start_is_read_to_its_writers_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--token-file <(kubectl get secret ...)`: the writer may still be running when the API starts;
    its text is awaited (at most PIPE_SECONDS), and one that never ends is refused."""
    reader, writer = os.pipe()
    try:
        late = threading.Timer(0.2, lambda: (os.write(writer, TOKEN.encode()), os.close(writer)))
        late.start()
        file = bounded(lambda: auth.TokenFile(Path(f"/dev/fd/{reader}"), clock=lambda: 0.0))
        late.join()
        assert file.valid(TOKEN)
    finally:
        os.close(reader)
    monkeypatch.setattr(auth, "PIPE_SECONDS", 0.2)
    reader, writer = os.pipe()
    try:
        os.write(writer, TOKEN.encode())  # and never closed
        with pytest.raises(auth.TokenFileError, match="its writer did not finish within 0.2 s"):
            bounded(lambda: auth.TokenFile(Path(f"/dev/fd/{reader}")))
    finally:
        os.close(reader)
        os.close(writer)
