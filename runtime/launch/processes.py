"""The processes of a local run: how each starts (its own session, its log, dying with the launcher),
how the launcher learns that a server is ready and how a process ended, and how a launcher owns its
run directory.

Each child runs in its own session, so a terminal's Ctrl-C reaches the launcher alone, which then stops
them in order; the kernel's parent-death signal kills them even when the launcher is SIGKILLed, so a
launch never meets the processes of an earlier one. A failure is told in one line: the `error: ...`
line the process printed (a known error), or the last line of its traceback, and where its log is.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import math
import os
import re
import select
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from graphtrain.contract import failures, roles, rundir
from graphtrain.contract.conditions import Reason
from graphtrain.contract.roles import PORT_FILE
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch import plan
from graphtrain.runtime.launch import zygote as zygotes

READY_TIMEOUT = 300.0
KEEP_LOGS = 3  # earlier launches' logs kept beside the current one: <name>.log.1 .. .3
LOCK = "launch.lock"


class RunFailed(GraphtrainError):
    """A process of the run failed (named in the message), or the run hit its deadline or stalled;
    `reason`: the Failed condition's reason it gives the status."""

    def __init__(self, message: str, reason: Reason = Reason.process_failed):
        super().__init__(message)
        self.reason = reason


class RunDirLocked(GraphtrainError):
    """Another launcher owns the run directory (its pid in the message)."""


def failure_line(text: str) -> str | None:
    """Why a process failed, in one line of its output: its last `error: ...` line (a known error, as the
    CLI prints it), else the exception line that ends its last traceback; None if it printed neither (a
    process killed by a signal)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    if not any(line.startswith("Traceback (most recent call last)") for line in lines):
        return None
    for line in reversed(lines):
        if EXCEPTION_LINE.match(line):
            return line
    return None


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: .*)?$")


def ended(code: int) -> str:
    """How a process ended, from its return code: 'exited with code 1', 'was killed by SIGKILL'."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


@dataclass
class Child:
    plan: plan.ProcessPlan
    proc: subprocess.Popen | zygotes.ForkedProcess
    log: Path
    restarts: int = 0
    offset: int = 0  # where this process' output starts in its log (a restart appends to it)
    metrics_port: int | None = None  # once known: a server's ready line, a trainer's port file
    seen_ended: float | None = None  # when the launcher first saw it ended (CLOCK_MONOTONIC), if not known

    @property
    def ended_at(self) -> float | None:
        """When the process ended (CLOCK_MONOTONIC), where known: forked ones (launch/zygote.py)."""
        return getattr(self.proc, "ended_at", None)

    @property
    def end(self) -> float:
        """When it ended, as well as the launcher knows: the zygote's stamp, else when first seen ended."""
        return self.ended_at if self.ended_at is not None else self.seen_ended or math.inf

    def lost_peer(self) -> bool:
        """Whether it failed because another trainer went away (roles.PEER_LOST): a consequence."""
        return roles.PEER_LOST in self.tail(lines=200)

    def lost_shard(self) -> bool:
        """Whether it failed because a shard server stopped answering (contract/failures.py, as the
        operator reads a trainer pod's): a consequence, when that server was killed and its end is not
        seen yet."""
        return failures.lost_shard(self.tail(lines=200)) is not None

    def learn_port(self) -> bool:
        """Read the metrics port from this process' port file, if it wrote it (a predecessor's file,
        another pid, does not count); whether the port became known now."""
        if self.metrics_port is not None or self.plan.port_file is None:
            return False
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            said = json.loads(self.plan.port_file.read_text())
            if said.get("pid") == self.proc.pid:
                self.metrics_port = int(said["port"])
                return True
        return False

    def why(self, when: str = "") -> str:
        """How this process ended (`when`: " before it was ready") and why, in one line (or with the end
        of its log, if it said nothing that tells why)."""
        how = f"{self.plan.name} {ended(self.proc.returncode)}{when}"
        if getattr(self.proc, "with_zygote", False):  # named alone, it read as the cause of its end
            zygote = self.log.with_name("zygote.log")
            return f"{how} with the zygote it was forked from (launch/zygote.py), which ended (log: {zygote})"
        if not os.path.exists(self.log):  # its run directory deleted while it ran: no empty "last lines"
            return f"{how}; its log {self.log} is gone (was the run directory deleted while it ran?)"
        text = self.tail(lines=200)
        line = failure_line(text)
        if line is not None:
            return f"{how}: {line} (log: {self.log})"
        return f"{how}; last lines of {self.log}:\n{self.tail()}"

    def tail(self, lines: int = 25, window: int = 1 << 16) -> str:
        """The last lines this process wrote (not its predecessors' in the same log)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(self.offset, f.seek(0, os.SEEK_END) - window))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


PEER_LOSS_GRACE = 10.0  # seconds a peer loss waits for the failure that caused it to be seen


def culprit(failed: Sequence[Child], others_running: bool, now: float) -> Child | None:
    """The failed process to name: one whose failure is its own before one that lost its peer or its
    shard server (the consequence), then the one that ended first. None (not yet) while every failure is
    such a consequence and the first of them ended under PEER_LOSS_GRACE ago, if another trainer still
    runs (a peer loss) or a shard server was lost (servers run all along: the killed one is among them
    until its end is seen). A killed trainer's or server's end reaches the launcher through its zygote's
    report, which can come after the survivor's, and the survivor was named (CI on 1072a72). Bounded: a
    hung peer or server that never ends must not hold the run. As the operator's
    observation.first_failure and culprit_due do with pods (for trainers)."""
    for c in failed:
        if c.ended_at is None and c.seen_ended is None:
            c.seen_ended = now
    shard = {id(c): c.lost_shard() for c in failed}
    lost = {id(c): shard[id(c)] or c.lost_peer() for c in failed}
    pick = min(failed, key=lambda c: (lost[id(c)], c.end))
    waits = others_running or any(shard.values())
    if lost[id(pick)] and waits and now - min(c.end for c in failed) < PEER_LOSS_GRACE:
        return None
    return pick


@contextlib.contextmanager
def umask(mask: int) -> Iterator[int]:
    """This process' umask is `mask` inside the block (processes started there inherit it); yields the
    one it replaced."""
    old = os.umask(mask)
    try:
        yield old
    finally:
        os.umask(old)


@contextlib.contextmanager
def lock_run_dir(run_dir: Path) -> Iterator[None]:
    """Own `run_dir` while the block runs: an exclusive flock on <run_dir>/launch.lock, which holds the
    owner's pid. The kernel releases it when the owner exits, however it exits.

    Raises:
        RunDirLocked: another process holds it (named by its pid).
    """
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            for _ in range(10):  # the holder writes its pid just after it takes the lock
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                if holder:
                    break
                time.sleep(0.05)
            raise RunDirLocked(
                f"{run_dir} is in use by another graphtrain run (pid {holder or 'unknown'})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def rotate_logs(logs: Path, keep: int = KEEP_LOGS) -> None:
    """One log per launch: each <name>.log moves to <name>.log.1, .1 to .2, ...; beyond `keep`, dropped."""
    for log in logs.glob("*.log"):
        for i in range(keep - 1, 0, -1):
            older = log.with_name(f"{log.name}.{i}")
            if older.exists():
                older.replace(log.with_name(f"{log.name}.{i + 1}"))
        log.replace(log.with_name(f"{log.name}.1"))


def die_with_this_process() -> Callable[[], None]:
    """A preexec_fn: the child gets SIGKILL when the thread that forked it exits (PR_SET_PDEATHSIG; spawn
    from a thread that outlives the children, e.g. the main thread), so no child outlives a SIGKILLed
    launcher. If the launcher died before the call took effect, the child leaves at once. The libc call
    is looked up here, in the parent: the child only calls it."""
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        prctl = None
    args = (ctypes.c_int(1), ctypes.c_ulong(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1

    def child() -> None:
        if prctl is not None:
            prctl(*args)
        if os.getppid() != parent:
            os._exit(1)

    return child


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_file_init(run_dir: Path) -> str:
    """The trainers' --init on one host: trainer 0 binds a port of the kernel's choosing and writes it to
    the run's rendezvous file (train/dist.py), cleared here of an earlier start's, whose port is gone. A
    free_port() handed to trainer 0 could be taken before it binds it, after its imports."""
    path = run_dir / rundir.RENDEZVOUS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return f"{PORT_FILE}{path}"


def child_env() -> dict[str, str]:
    """The environment of every process of a run (and of the zygote they fork from): the launcher's,
    quiet, one OpenMP thread unless the user set another count, the roles' process settings
    (roles.process_env), and without the token (processes read the token file)."""
    env = {
        **os.environ,
        **roles.process_env(os.environ),
        "GRAPHTRAIN_QUIET": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    env.pop(roles.ENV_TOKEN, None)
    return env


def spawn(
    p: plan.ProcessPlan, logs: Path, announces: bool = False, zygote: zygotes.Zygote | None = None
) -> Child:
    """Start a process, its output into <logs>/<name>.log: forked from `zygote` when it runs this argv
    (launch/zygote.py: torch imported once), else started the plain way. Only servers keep stdout as a
    pipe, for the one ready line they print; anyone else's stdout in an unread pipe would block it once
    the pipe's 64 KB filled. The child is in its own session (a terminal's Ctrl-C reaches the launcher
    alone, which stops the children in order) and dies with the launcher."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{p.name}.log"
    offset = log.stat().st_size if log.exists() else 0
    env = child_env()
    if p.port_file is not None:  # a predecessor's port is no longer this process'
        p.port_file.unlink(missing_ok=True)
    with open(log, "ab") as handle:
        if zygote is not None and zygote.runs(p.argv):
            with contextlib.suppress(zygotes.ZygoteGone):  # then the plain way
                fd = handle.fileno()
                return Child(p, zygote.fork(p.argv, env, fd, fd, pipe_stdout=announces), log, offset=offset)
        proc = subprocess.Popen(
            p.argv,
            stdout=subprocess.PIPE if announces else handle,
            stderr=handle,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_this_process(),  # the child runs only a prctl call and getppid
        )
    return Child(p, proc, log, offset=offset)


def wait_ready(c: Child, timeout: float = READY_TIMEOUT) -> str:
    """The address a shard server announces in its ready line (its metrics port noted on `c`).

    Raises:
        RunFailed: it ended first, or said nothing within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    assert c.proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([c.proc.stdout], [], [], 0.5)
        if ready:
            line = c.proc.stdout.readline()
            if line:
                with contextlib.suppress(json.JSONDecodeError):
                    event = json.loads(line)
                    if event.get("event") == "ready":
                        port = event.get("metrics_port")
                        c.metrics_port = int(port) if port else None
                        return str(event["address"])
        if c.proc.poll() is not None:
            raise RunFailed(c.why(" before it was ready"))
    raise RunFailed(f"{c.plan.name} was not ready within {timeout:g} s")


def stop(children: Sequence[Child], grace: float = 10.0) -> None:
    """SIGTERM to each process group still running, SIGKILL to those still there after `grace` seconds."""
    alive = [c for c in children if c.proc.poll() is None]
    for c in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(c.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for c in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if c.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait(timeout=10)


def answers_livez(port: int, timeout: float = 5.0, host: str = "127.0.0.1") -> bool:
    """Whether a process's /livez answers 200 within `timeout`. A stopped (SIGSTOP) or hung process's
    kernel still accepts the connection; nobody answers it."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/livez", timeout=timeout) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except (OSError, ValueError):  # refused, timed out, 503 (HTTPError is an OSError)
        return False


def remove_sockets(run_dir: Path) -> None:
    """The shard servers' ipc:// sockets (plan.shard_server) and their fast lanes' Unix sockets beside them
    (`shard-N.sock.lane`) that a killed server left: harmless, but they read as a live run to whoever looks
    at the run directory (call it once every server has exited)."""
    for path in [*run_dir.glob("shard-*.sock"), *run_dir.glob("shard-*.sock.lane")]:
        if path.is_socket():
            with contextlib.suppress(OSError):
                path.unlink()
