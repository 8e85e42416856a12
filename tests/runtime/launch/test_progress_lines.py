"""The launcher relays trainer 0's `warning:` log lines: each once, whole lines only, bounded reads,
never blocking on a file that is not one, nothing to the terminal but printable text."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from graphtrain.runtime.launch import progress_lines
from graphtrain.runtime.launch.progress_lines import LINE_MAX, WarningRelay


def test_each_warning_is_relayed_once_without_its_stamp(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    r = WarningRelay(log)
    assert r.new() == []  # no file yet
    log.write_text("2026-12-01T07:00:00+00:00 epoch 1\n2026-12-01T07:00:01+00:00 warning: collapsed\n")
    assert r.new() == ["warning: collapsed"]
    assert r.new() == []
    with log.open("a") as f:
        f.write("warning: no TensorBoard events\nwarning: half a li")
    assert r.new() == ["warning: no TensorBoard events"]  # the unfinished line waits
    with log.open("a") as f:
        f.write("ne\n")
    assert r.new() == ["warning: half a line"]


def test_only_a_line_that_starts_with_the_warning_is_one(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    log.write_text("2026-12-01T07:00:00+00:00 loss: 1 warning: not one\nsome text warning: nor this\n")
    assert WarningRelay(log).new() == []


def test_escapes_never_reach_the_terminal_and_a_long_warning_is_cut(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    log.write_bytes(b"warning: \x1b[2J\x1b]0;title\x07 done \xff\n" + b"warning: " + b"x" * 5000 + b"\n")
    clean, long = WarningRelay(log).new()
    assert clean == "warning: [2J]0;title done \ufffd" and len(long) == LINE_MAX + 3


def test_a_fresh_shorter_log_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    log.write_text("x" * 200 + "\n")
    r = WarningRelay(log)
    assert r.new() == []
    log.write_text("warning: after a restart\n")
    assert r.new() == ["warning: after a restart"]


def test_a_line_longer_than_a_chunk_is_skipped_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_lines, "CHUNK", 64)
    log = tmp_path / "trainer-0.log"
    log.write_text("warning: " + "y" * 300 + " warning: inside\nwarning: past the long line\n")
    assert WarningRelay(log).new(None) == ["warning: past the long line"]


def test_a_poll_reads_a_bounded_share_and_the_last_one_reads_to_the_end(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    log.write_text("filler line\n" * 100_000 + "warning: at the end\n")  # 1.2 MB
    r = WarningRelay(log)
    assert r.new() == [] and r.offset <= progress_lines.POLL_MAX
    assert r.new(None) == ["warning: at the end"]


def test_a_fifo_in_the_logs_place_is_not_waited_on(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    os.mkfifo(log)
    got: list[list[str]] = []
    t = threading.Thread(target=lambda: got.append(WarningRelay(log).new(None)), daemon=True)
    t.start()
    t.join(timeout=5)
    assert not t.is_alive() and got == [[]]
