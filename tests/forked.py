"""Fresh worker processes without paying torch's import each time: a multiprocessing "forkserver"
context whose server imports torch, numpy and the given test modules once (~2.5 s of CPU), then forks
every process a test starts from that clean state (milliseconds).

Each process is still new (nothing any earlier test did is in it: the server itself runs no test code,
it only imported modules), as the "spawn" context's are; what differs is that the modules are already
imported, and that the environment is the server's, taken when it started. Tests that change
os.environ for their workers must pass it as an argument instead (start_cli does).

start_cli runs a `graphtrain` command (a shard server for tests/runtime/conftest.py) in such a process,
behind the part of subprocess.Popen's interface the tests use; complete_cli runs one to its end as
subprocess.run does (a refusal that tests its message and exit code: ~2.5 s of CPU a run saved).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
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
    "graphtrain.cli.app",
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


def _complete_cli(module: str, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked process: `python -P -m <module> *argv` in `cwd` with the environment `env`, its
    stdout and stderr into the files `out` and `err`; its exit code is the process'."""
    import importlib

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))
    from graphtrain.runtime import cli_common

    for console in (cli_common.out, cli_common.err):  # rich chose colours for the forkserver's streams,
        console._color_system = console._detect_color_system()  # at its import: a file here, as a pipe
    sys.argv = ["graphtrain", *argv]  # the console script's name in a usage error
    importlib.import_module(module).main()


def complete_cli(
    module: str,
    argv: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """subprocess.run([sys.executable, "-P", "-m", module, *argv], cwd=cwd, env={**os.environ, **env},
    capture_output=True, text=True, timeout=timeout)'s result, the process forked from the forkserver
    (`module`: graphtrain.cli or graphtrain.runtime.cli, whose main() is the console entry point)."""
    ctx = context()
    with tempfile.TemporaryDirectory(prefix="forked-cli-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        out.touch(0o600)
        err.touch(0o600)
        args = (module, argv, {**os.environ, **(env or {})}, str(cwd or os.getcwd()), str(out), str(err))
        process = ctx.Process(target=_complete_cli, args=args, daemon=False)
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join(10)
            raise subprocess.TimeoutExpired([module, *argv], timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(
            [module, *argv], process.exitcode, out.read_text(), err.read_text()
        )


def complete_argv(argv: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    """complete_cli of a command written for subprocess.run: `[sys.executable, ("-P",) "-m", module,
    *args]`; `options` as complete_cli's (cwd, env, timeout)."""
    head = [sys.executable, "-P", "-m"] if argv[1:2] == ["-P"] else [sys.executable, "-m"]
    assert argv[: len(head)] == head and len(argv) > len(head), argv
    return complete_cli(argv[len(head)], argv[len(head) + 1 :], **options)  # type: ignore[arg-type]
