"""Fresh worker processes without paying torch's import each time: a multiprocessing "forkserver"
context whose server imports torch, numpy and the given test modules once (~2.5 s of CPU), then forks
every process a test starts from that clean state (milliseconds).

Each process is still new (nothing any earlier test did is in it: the server itself runs no test code,
it only imported modules), as the "spawn" context's are; what differs is that the modules are already
imported, and that the environment is the server's, taken when it started. Tests that change
os.environ for their workers must pass it as an argument instead (start_cli does).

start_cli runs a `graphtrain` command (a shard server for tests/runtime/conftest.py) in such a process,
behind the part of subprocess.Popen's interface the tests use.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import subprocess
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import IO

# what every user's workers import: the server loads them once, so no forked process imports them again
PRELOAD = [
    "numpy",
    "torch",
    "torch.distributed",
    "graphtrain.runtime.collective",
    "graphtrain.runtime.kvstore",
    "graphtrain.runtime.optim",
    "graphtrain.runtime.tensor",
    "graphtrain.runtime.cli",
    "graphtrain.runtime.kvstore.serving.server",
    "graphtrain.runtime.kvstore.tables.state",
    "tests.runtime.collective.ranks",
    "tests.runtime.collective.scenarios",
    "tests.runtime.collective.scenarios_dynamic",
    "tests.runtime.kvstore.workers",
]

_context: BaseContext | None = None


def context() -> BaseContext:
    """The forkserver context of this test process (its server starts at the first Process.start())."""
    global _context
    if _context is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _context = ctx
    return _context


def _run_cli(argv: list[str], env: dict[str, str], log: str, stdout: Connection) -> None:
    """In the forked process: the environment `env`, stderr appended to `log`, stdout into the pipe
    `stdout`, SIGKILL when the forkserver (which ends with the test process) dies; then the command, as
    `python -m graphtrain.runtime.cli` runs it (its exit code is the process')."""
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    os.dup2(stdout.fileno(), 1)
    stdout.close()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))  # torch read the variable when imported
    from graphtrain.runtime.cli import app

    app(args=argv, prog_name="graphtrain")


class Forked:
    """A process of start_cli, with what the tests use of subprocess.Popen: pid, returncode, stdout (text,
    line by line), poll, wait, send_signal, terminate, kill."""

    def __init__(self, process: mp.process.BaseProcess, stdout: IO[str]) -> None:
        self.process, self.stdout = process, stdout
        self.pid: int = process.pid or 0
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self.process.is_alive():
            self.returncode = self.process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"forked process {self.pid}", timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_cli(argv: list[str], env: dict[str, str], log: Path) -> Forked:
    """`python -m graphtrain.runtime.cli *argv` in this process' environment with `env` over it (as
    subprocess.Popen gives it; only what torch read at its import is the forkserver's), its stderr
    appended to `log`, forked from the forkserver (torch and the CLI already imported: no 2 s import);
    its stdout a pipe, read as text."""
    ctx = context()
    read, write = ctx.Pipe(duplex=False)
    args = (argv, {**os.environ, **env}, str(log), write)
    process = ctx.Process(target=_run_cli, args=args, daemon=False)
    process.start()
    write.close()
    stdout = os.fdopen(os.dup(read.fileno()), "r")
    read.close()
    return Forked(process, stdout)
