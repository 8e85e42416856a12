"""launch/zygote.py: a child forked from the zygote is the process a plain start would have made (its
argv, environment, working directory, umask, session, log and command line in `ps`), ends with the code
or signal Popen would report, dies with the zygote; a zygote whose imports left a thread running
refuses to fork, and spawn() then starts the process the plain way. The runs that fork every server
and trainer from it are tests/runtime/launch/test_run*.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphtrain.runtime.launch import plan, processes
from graphtrain.runtime.launch import zygote as zygotes
from graphtrain.runtime.launch.zygote import ForkedProcess, Zygote, ZygoteGone

ROOT = Path(__file__).parents[3]
ENTRY = [sys.executable, "-P", "-m", "tests.runtime.launch.zygote_probe"]


def probe_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    z = Zygote.start(ENTRY, probe_env(PROBE="zygote's"), tmp_path_factory.mktemp("zygote") / "zygote.log")
    try:
        yield z
    finally:
        z.close()


def fork(z: Zygote, log: Path, *args: str, pipe: bool = False, **env: str) -> ForkedProcess:
    with open(log, "ab") as f:
        return z.fork([*ENTRY, *args], probe_env(**env), f.fileno(), f.fileno(), pipe_stdout=pipe)


@pytest.mark.timeout(120)
def test_a_child_has_its_own_args_environment_directory_umask_session_log_and_title(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "child.log"
    with processes.umask(0o027):
        child = fork(zygote, log, "say", "two words", PROBE="child's")
    assert child.wait(timeout=60) == 0
    said, stderr = log.read_text().splitlines()
    assert json.loads(said) == {
        "args": ["say", "two words"],
        "probe": "child's",
        "cwd": str(tmp_path),
        "umask": 0o027,
        "session_leader": True,
    }
    assert stderr == "said it"

    sleeper = fork(zygote, tmp_path / "sleeper.log", "sleep", "60", pipe=True)
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"up\n"
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline").read_bytes().rstrip(b"\0").decode()
        assert cmdline == " ".join([*ENTRY, "sleep", "60"])  # what `ps` shows, and tests look for
        assert os.getsid(sleeper.pid) == sleeper.pid and sleeper.poll() is None
    finally:
        sleeper.kill()
    assert sleeper.wait(timeout=10) == -signal.SIGKILL and sleeper.ended_at is not None


@pytest.mark.timeout(120)
def test_exit_codes_are_the_ones_popen_reports(zygote: Zygote, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    assert fork(zygote, log, "exit", "3").wait(timeout=60) == 3
    assert fork(zygote, log, "raise").wait(timeout=60) == 1
    assert "RuntimeError: the probe failed" in log.read_text()  # the traceback, as the interpreter prints it
    assert fork(zygote, log, "interrupt").wait(timeout=60) == -signal.SIGINT
    slow = fork(zygote, log, "sleep", "60")
    with pytest.raises(subprocess.TimeoutExpired):
        slow.wait(timeout=0.2)
    quick = fork(zygote, log, "exit", "0")
    assert quick.wait(timeout=60) == 0
    fds = tmp_path / "fds.log"
    assert fork(zygote, fds, "fds").wait(timeout=60) == 0  # forked while `slow` runs
    pipes = [t for t in json.loads(fds.read_text()).values() if t.startswith(("pipe:", "socket:"))]
    assert pipes == [], pipes  # no sibling's status pipe, no zygote socket: only its own log and stdin
    slow.send_signal(signal.SIGTERM)
    assert slow.wait(timeout=10) == -signal.SIGTERM
    assert quick.ended_at is not None and slow.ended_at is not None and quick.ended_at < slow.ended_at


@pytest.mark.timeout(120)
def test_a_child_has_what_the_zygote_preloaded_and_only_that(tmp_path: Path) -> None:
    """plan.zygote_preload's modules are imported once in the zygote: a child starts with them (a
    trainer's first dense step finds torch._dynamo imported); without them, it does not."""
    names = ["json", "tests.runtime.launch.preload_probe", "wave"]  # imported by none of the probe's code
    for preload, expected in (((), False), (("tests.runtime.launch.preload_probe", "wave"), True)):
        z = Zygote.start(ENTRY, probe_env(), tmp_path / "zygote.log", preload=preload)
        try:
            log = tmp_path / f"child-{expected}.log"
            assert fork(z, log, "imported", *names).wait(timeout=60) == 0
        finally:
            z.close()
        said = json.loads(log.read_text().splitlines()[0])
        assert said == {"json": True, "tests.runtime.launch.preload_probe": expected, "wave": expected}


def test_the_trainers_preload_is_dynamo_only_where_dense_steps_import_it() -> None:
    """A dense optimizer's first step imports torch._dynamo (~1.3 s of CPU): the zygote imports it for
    node-classification trainers, where there are several; a KGE run or one trainer never pays it there."""
    assert plan.zygote_preload("nodeClassification", 2) == ("torch._dynamo",)
    assert plan.zygote_preload("nodeClassification", 1) == ()
    assert plan.zygote_preload("kge", 4) == ()


@pytest.mark.timeout(120)
def test_the_children_die_with_the_zygote(tmp_path: Path) -> None:
    z = Zygote.start(ENTRY, probe_env(), tmp_path / "zygote.log")
    child = fork(z, tmp_path / "child.log", "sleep", "600", pipe=True)
    assert child.stdout is not None and child.stdout.readline() == b"up\n"
    z.proc.kill()  # as the parent-death signal does when the launcher is SIGKILLed
    assert child.wait(timeout=10) == -signal.SIGKILL  # the status pipe closed without a word
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child.pid}").exists()
    with pytest.raises(ZygoteGone):
        fork(z, tmp_path / "child.log", "exit", "0")
    # the launcher names the zygote's end, not the child's, which it took along (`shard-0 was killed by
    # SIGKILL` alone blamed a server that did nothing)
    said = processes.Child(plan.ProcessPlan("shard-0", ENTRY), child, tmp_path / "child.log").why()
    assert said.startswith("shard-0 was killed by SIGKILL with the zygote it was forked from"), said
    assert str(tmp_path / "zygote.log") in said and "\n" not in said


@pytest.mark.timeout(120)
def test_a_child_that_is_killed_itself_is_not_said_to_end_with_the_zygote(
    zygote: Zygote, tmp_path: Path
) -> None:
    child = fork(zygote, tmp_path / "child.log", "sleep", "600", pipe=True)
    assert child.stdout is not None and child.stdout.readline() == b"up\n"
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL and not child.with_zygote
    said = processes.Child(plan.ProcessPlan("shard-0", ENTRY), child, tmp_path / "child.log").why()
    assert said.startswith("shard-0 was killed by SIGKILL;") and "zygote" not in said, said


@pytest.mark.timeout(120)
def test_a_zygote_with_a_thread_running_refuses_and_spawn_starts_the_plain_way(tmp_path: Path) -> None:
    env = probe_env(OPENBLAS_NUM_THREADS="2")  # numpy's BLAS starts its pool at import
    z = Zygote.start(ENTRY, env, tmp_path / "zygote.log")
    try:
        with pytest.raises(ZygoteGone):
            fork(z, tmp_path / "child.log", "exit", "0")
        assert "threads after its imports" in (tmp_path / "zygote.log").read_text()
        argv = [*plan.entry(), "--help"]
        c = processes.spawn(plan.ProcessPlan("helper", argv), tmp_path / "logs", zygote=z)
        assert isinstance(c.proc, subprocess.Popen) and c.proc.wait(timeout=60) == 0
    finally:
        z.close()


def test_a_process_that_set_up_cuda_is_unsafe_to_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: CUDA's state is stood in for (a child of a fork cannot use CUDA its parent set up)."""
    import torch

    monkeypatch.setattr(zygotes, "threads", lambda: 1)  # as a zygote after its imports
    assert zygotes.unsafe_to_fork() == ""  # CUDA never set up here
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert zygotes.unsafe_to_fork() == "CUDA was set up by its imports"


def test_closing_a_zygote_that_outlives_its_kill_does_not_raise() -> None:
    """A zygote SIGKILLed while importing torch on a loaded machine may take longer than close()'s
    timeout to be reaped: close() (the launcher's cleanup) must not raise in place of the run's error."""

    class Slow:
        killed = False

        def wait(self, timeout: float | None = None) -> int:
            raise subprocess.TimeoutExpired(["zygote"], timeout or 0)

        def kill(self) -> None:
            self.killed = True

    proc = Slow()
    a, b = socket.socketpair()
    with b:
        Zygote(proc, a).close(timeout=0.01)  # type: ignore[arg-type]
    assert proc.killed and a.fileno() == -1
