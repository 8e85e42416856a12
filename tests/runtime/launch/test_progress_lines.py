"""The launcher relays trainer 0's `warning:` log lines: each once, whole lines only, bounded reads."""

from __future__ import annotations

from pathlib import Path

from graphtrain.runtime.launch import progress_lines as relay
from graphtrain.runtime.launch.progress_lines import WarningRelay


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


def test_a_fresh_shorter_log_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "trainer-0.log"
    log.write_text("x" * 200 + "\n")
    r = WarningRelay(log)
    assert r.new() == []
    log.write_text("warning: after a restart\n")
    assert r.new() == ["warning: after a restart"]


def test_a_line_longer_than_a_read_does_not_stall_the_relay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(relay, "READ_MAX", 64)
    log = tmp_path / "trainer-0.log"
    log.write_text("y" * 300 + "\nwarning: past the long line\n")
    r = WarningRelay(log)
    seen: list[str] = []
    for _ in range(10):
        seen += r.new()
    assert seen == ["warning: past the long line"]
