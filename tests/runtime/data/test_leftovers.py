"""What a writer killed with SIGKILL (the OOM killer) leaves of an output it was writing (its temporary
directory, a streaming partition's scratch) is removed by the next writer of that output, never what a
live writer holds, and never a directory it cannot tell is abandoned (data/leftovers.py)."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from graphtrain.runtime.data import leftovers
from graphtrain.runtime.data.cache import atomic_dir

WRITER = """
import sys, time
from pathlib import Path
from graphtrain.runtime.data import leftovers
from graphtrain.runtime.data.cache import atomic_dir
with atomic_dir(Path(sys.argv[1]), overwrite=True) as tmp, leftovers.scratch(tmp) as scratch:
    (tmp / "part.npy").write_bytes(b"x" * 4096)
    (scratch / "0.src").write_bytes(b"y" * 4096)
    print("writing", flush=True)
    time.sleep(120)
"""


def writer(final: Path) -> subprocess.Popen[str]:
    """A process inside atomic_dir(final) with a scratch directory, once it says so."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(final)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    return proc


def beside(final: Path) -> list[str]:
    return sorted(p.name for p in final.parent.iterdir() if p.name != final.name)


def test_a_killed_writers_directories_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    final = tmp_path / "partition"
    proc = writer(final)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    left = beside(final)
    assert len(left) == 3 and {n.rsplit(".", 1)[-1] for n in left} >= {"scratch", "lock"}
    with atomic_dir(final) as tmp:
        (tmp / "a").write_text("new")
    assert beside(final) == [] and (final / "a").read_text() == "new"


def test_a_live_writers_directories_stay(tmp_path: Path) -> None:
    final = tmp_path / "partition"
    proc = writer(final)
    try:
        held = beside(final)
        with atomic_dir(final) as tmp:
            (tmp / "a").write_text("mine")
        assert beside(final) == held  # the live writer's temporary, scratch and lock untouched
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_finished_writer_leaves_nothing_beside_its_output(tmp_path: Path) -> None:
    final = tmp_path / "out"
    with atomic_dir(final) as tmp, leftovers.scratch(tmp) as scratch:
        (scratch / "s").write_bytes(b"1")
        (tmp / "a").write_bytes(b"2")
    assert beside(final) == [] and os.listdir(final) == ["a"]
    with pytest.raises(RuntimeError), atomic_dir(final, overwrite=True) as tmp:
        raise RuntimeError("a failed write")
    assert beside(final) == [] and os.listdir(final) == ["a"]


def test_what_it_cannot_tell_is_abandoned_stays_and_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A temporary directory from before the lock (no lock file) may be a live older writer's."""
    final = tmp_path / "out"
    (tmp_path / ".out.tmp-k2j4").mkdir()
    (tmp_path / ".out.dead-0a1b").mkdir()  # a sweeper killed between its rename and its removal
    (tmp_path / ".out.dead-0a1b" / "f").write_bytes(b"1")
    (tmp_path / ".other.tmp-zz.lock").write_bytes(b"")  # another output's: not this sweep's
    with caplog.at_level(logging.WARNING, "graphtrain.runtime.data.leftovers"):
        assert leftovers.sweep(final) == 0
    assert beside(final) == [".other.tmp-zz.lock", ".out.tmp-k2j4"]
    assert ".out.tmp-k2j4" in caplog.text and "remove when no writer" in caplog.text


def test_a_lock_whose_writer_died_before_its_directory_was_made_goes(tmp_path: Path) -> None:
    (tmp_path / ".out.tmp-00ff.lock").write_bytes(b"")
    assert leftovers.sweep(tmp_path / "out") == 1 and beside(tmp_path / "out") == []


def test_a_lock_file_left_under_its_first_name_goes_once_old(tmp_path: Path) -> None:
    """A writer killed between making its lock file and renaming it left an empty `.out.lock-<hex>`."""
    young, old = tmp_path / ".out.lock-0a0a", tmp_path / ".out.lock-0b0b"
    young.write_bytes(b"")
    old.write_bytes(b"")
    past = os.stat(old).st_mtime - leftovers.FRESH_SECONDS - 1
    os.utime(old, (past, past))
    (tmp_path / ".other.lock-0c0c").write_bytes(b"")
    os.utime(tmp_path / ".other.lock-0c0c", (past, past))  # another output's: not this sweep's
    held = tmp_path / ".out.lock-0d0d"
    held.write_bytes(b"")
    os.utime(held, (past, past))
    fd = os.open(held, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live writer's, however old
    try:
        assert leftovers.sweep(tmp_path / "out") == 0
    finally:
        os.close(fd)
    assert beside(tmp_path / "out") == [".other.lock-0c0c", ".out.lock-0a0a", ".out.lock-0d0d"]


def test_exchange_swaps_two_directories_in_one_step(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("b")
    assert leftovers.exchange(tmp_path / "a", tmp_path / "b")  # ext4, xfs, btrfs, tmpfs have it
    assert (tmp_path / "a" / "x").read_text() == "b" and (tmp_path / "b" / "x").read_text() == "a"
    with pytest.raises(FileNotFoundError):
        leftovers.exchange(tmp_path / "a", tmp_path / "absent")


@pytest.mark.parametrize("atomic", [True, False], ids=["exchange", "two-renames"])
def test_an_output_is_replaced_whole_or_kept_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    if not atomic:  # a file system without renameat2's exchange (NFS)
        monkeypatch.setattr(leftovers, "exchange", lambda a, b: False)
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        (tmp / "v").write_text("1")
    with atomic_dir(final, overwrite=True) as tmp:
        (tmp / "v").write_text("2")
    assert (final / "v").read_text() == "2" and beside(final) == []
    with pytest.raises(RuntimeError), atomic_dir(final, overwrite=True) as tmp:
        (tmp / "v").write_text("3")
        raise RuntimeError("the writer failed")
    assert (final / "v").read_text() == "2" and beside(final) == []
