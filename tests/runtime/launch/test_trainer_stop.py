"""roles/stop.py as a pod runs it: the trainer is PID 1 of its own PID namespace (a container), its main
thread waiting in C. Without the stop, SIGTERM from outside is dropped (the kernel's rule for PID 1) and
the process stays until SIGKILL, which is what pods showed (trainers stopped only at the end of the grace
period); with it, the process is gone within 3 s with exit code 143."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import sys, threading
if sys.argv[1] == "stop":
    from graphtrain.runtime.roles.stop import exit_on_sigterm
    exit_on_sigterm("trainer 0")
print("ready", flush=True)
threading.Event().wait()  # the main thread blocked in C, as in a collective
"""


def pid1(stop: bool) -> tuple[subprocess.Popen[str], int]:
    """The script as PID 1 of a new PID namespace; returns unshare and the script's pid out here."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed: .ci/run installs it", pytrace=False)
    proc = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            sys.executable,
            "-c",
            SCRIPT,
            "stop" if stop else "bare",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    return proc, int(children[0])


@pytest.mark.timeout(60)
def test_a_pid_1_trainer_leaves_on_sigterm_within_3_s() -> None:
    proc, inner = pid1(stop=True)
    sent = time.monotonic()
    subprocess.run(["kill", "-TERM", str(inner)], check=True)
    code = proc.wait(timeout=10)
    assert time.monotonic() - sent < 3.0
    assert code == 128 + signal.SIGTERM, (code, proc.stderr.read() if proc.stderr else "")
    assert proc.stderr is not None and "[trainer 0] SIGTERM: stopping now" in proc.stderr.read()


@pytest.mark.timeout(60)
def test_without_it_pid_1_ignores_sigterm() -> None:
    """The control: the test above could fail. A bare PID 1 outlives SIGTERM until SIGKILL."""
    proc, inner = pid1(stop=False)
    try:
        subprocess.run(["kill", "-TERM", str(inner)], check=True)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)
    finally:
        subprocess.run(["kill", "-KILL", str(inner)], check=False)
        proc.wait(timeout=10)
