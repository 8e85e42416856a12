"""A process that imports torch once and forks a local run's servers and trainers from it.

Every server and trainer of `graphtrain run` is `python -m graphtrain.runtime.cli <role> ...`, and each
such interpreter spends ~2 s of CPU importing torch before it does anything (a 2x2 run: four imports,
and four more after every restart). The launcher itself never imports torch (it stays quick to start
and to stop), so it starts this process at the beginning of a launch, where its import overlaps the
partitioning, and asks it to fork each child: the child runs the same `main()` with the same argv,
environment, working directory and umask, its output into the same log, and gets what the imported
modules took already. Android's zygote and Chromium's are the model; multiprocessing's forkserver is the
same idea, but pickles its requests (ours are JSON, with the child's stdout, stderr and a status pipe
passed as file descriptors) and cannot hand its children a new session and a log of their own.

What a child keeps from a plain process start: its own session (Ctrl-C reaches the launcher alone); the
parent-death signal, so it dies with the zygote, which dies with the launcher (SIGKILL of the launcher
still takes every process); its pid, exit code or killing signal, which the launcher reads from the
status pipe as it would from waitpid (ForkedProcess mirrors the part of subprocess.Popen it uses); its
command line in `ps` (setproctitle). Only a quiet process forks safely: the zygote refuses to serve
when its imports left a thread running (an OpenMP or BLAS pool sized by OMP_NUM_THREADS > 1) or set up
CUDA (a child of a fork cannot use it; importing torch does not set it up, the roles do, after the
fork). The launcher then starts processes the plain way, as it does for any argv that is not the CLI's
(simulated hosts' `ip netns exec ...`) and whenever the zygote is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

MODULE = "graphtrain.runtime.launch.zygote"
# what every role imports first, beside the CLI module (the roles import the rest of graphtrain as they
# need it); imports that start no thread: checked before the zygote serves
PRELOAD = ("numpy", "torch", "setproctitle")
REPLY_TIMEOUT = 300.0  # seconds for the zygote's first answer: its imports on a busy machine
MAX_REQUEST = 1 << 20


class ZygoteGone(OSError):
    """The zygote refused, exited or did not answer: start processes the plain way."""


# ------------------------------------------------------------------------------------ launcher side


class ForkedProcess:
    """A child of the zygote, as the launcher sees it: the subset of subprocess.Popen that
    runtime/launch uses (pid, returncode, stdout, poll, wait, send_signal, kill), safe to poll from
    several threads. Its end comes through the status pipe: a line with the code (negative: the killing
    signal) and when the zygote collected it (CLOCK_MONOTONIC, `ended_at`: which of several failed
    processes failed first), or end of file without one if the zygote died, and the parent-death
    signal with it killed the child. The pipe stays open until this object goes: no other thread can
    meet its number reused."""

    def __init__(self, pid: int, args: Sequence[str], status: int, stdout: IO[bytes] | None):
        self.pid, self.args, self.stdout = pid, list(args), stdout
        self.returncode: int | None = None
        self.ended_at: float | None = None
        self.with_zygote = False  # it ended because the zygote did (the parent-death signal), not itself
        self._status = status
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None and select.select([self._status], [], [], 0)[0]:
                said = os.read(self._status, 128).decode(errors="replace").split()
                try:
                    self.returncode, self.ended_at = int(said[0]), float(said[1])
                except (IndexError, ValueError):
                    self.returncode = -signal.SIGKILL  # the zygote died: so did its children
                    self.with_zygote = True
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            select.select([self._status], [], [], left)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self._status)


class Zygote:
    """The launcher's handle on its zygote: start() it, fork() children from it, close() it (it exits,
    and children still running die with it: stop them first)."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket):
        self.proc, self.sock = proc, sock
        self.entry: list[str] = []

    @classmethod
    def start(
        cls,
        entry: Sequence[str],
        env: Mapping[str, str],
        log: Path,
        preexec: Any = None,
        preload: Sequence[str] = (),
    ) -> Zygote:
        """Start a zygote for `entry` (plan.entry(): [python, -P, -m, graphtrain.runtime.cli]; its
        children run that module's main()), with `env` (the environment every child gets: OpenMP reads
        it once, at import), its own output into `log`, importing `preload` beside PRELOAD
        (plan.zygote_preload). It answers once its imports are done: the first fork() waits for them.

        Raises:
            ValueError: `entry` is not an interpreter's argv ending with `-m <module>`.
        """
        at = list(entry).index("-m")
        if at + 2 != len(entry):
            raise ValueError(f"not an interpreter running a module: {list(entry)}")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [*entry[: at + 1], MODULE, str(theirs.fileno()), entry[at + 1], *preload],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=dict(env),
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                preexec_fn=preexec,
            )
        theirs.close()
        zygote = cls(proc, ours)
        zygote.entry = list(entry)
        return zygote

    def runs(self, argv: Sequence[str]) -> bool:
        """Whether this zygote can start `argv`: its entry (interpreter, flags, module) and arguments."""
        return self.proc.poll() is None and list(argv[: len(self.entry)]) == self.entry

    def fork(
        self, argv: Sequence[str], env: Mapping[str, str], stdout: int, stderr: int, pipe_stdout: bool
    ) -> ForkedProcess:
        """A child running the entry's module with argv[len(entry):], its stderr (and stdout, unless
        pipe_stdout: then a pipe the caller reads) into the given descriptors.

        Raises:
            ZygoteGone: the zygote refused (it said why in its log), exited or did not answer.
        """
        status_r, status_w = os.pipe()
        out_r = None
        if pipe_stdout:
            out_r, stdout = os.pipe()
        request = {
            "argv": list(argv),  # its command line in `ps`
            "args": list(argv[len(self.entry) :]),
            "env": dict(env),
            "cwd": os.getcwd(),
            "umask": current_umask(),
        }
        try:
            self.sock.settimeout(REPLY_TIMEOUT)
            socket.send_fds(self.sock, [json.dumps(request).encode()], [stdout, stderr, status_w])
            reply = self.sock.recv(MAX_REQUEST)
        except OSError as exc:
            for fd in (status_r, out_r):
                if fd is not None:
                    os.close(fd)
            raise ZygoteGone(f"the zygote did not answer: {exc}") from None
        finally:
            os.close(status_w)
            if pipe_stdout:
                os.close(stdout)
        said = json.loads(reply) if reply else {}
        if "pid" not in said:
            os.close(status_r)
            if out_r is not None:
                os.close(out_r)
            raise ZygoteGone(said.get("error", "the zygote exited"))
        pipe = os.fdopen(out_r, "rb") if out_r is not None else None
        return ForkedProcess(int(said["pid"]), argv, status_r, pipe)

    def close(self, timeout: float = 10.0) -> None:
        """End the zygote: it exits when its socket closes (SIGKILL if it has not within `timeout`). A
        killed one not reaped within `timeout` more (still importing torch on a loaded machine) is left
        to die: raising here, in the launcher's cleanup, put a traceback in place of the run's error."""
        self.sock.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)


def current_umask() -> int:
    """This process' umask, read without changing it (os.umask sets one to read it: a race with threads
    that create files)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


# -------------------------------------------------------------------------------------- zygote side


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def unsafe_to_fork() -> str:
    """Why a fork of this process would not be a sound process ('' if it would): a thread running (a
    child gets only the forking one, and locks the others held stay held: OpenMP and BLAS pools), or
    CUDA set up (a forked child cannot use it)."""
    if (n := threads()) != 1:
        return f"{n} threads after its imports (OMP_NUM_THREADS > 1?)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was set up by its imports"
    return ""


def serve(sock: socket.socket, module: str) -> None:
    """Fork a child per request until the launcher closes its end; report each child's end through its
    status pipe. SIGCHLD wakes the loop through a pipe (signal.set_wakeup_fd)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # not SIG_IGN: that would reap them unseen
    statuses: dict[int, int] = {}
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 256):
                    pass
            reap(statuses)
        if sock in ready:
            msg, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 3)
            if not msg:
                return  # the launcher is done (or gone)
            try:
                request = json.loads(msg)
                if len(fds) != 3:
                    raise ValueError(f"{len(fds)} file descriptors, not 3")
                pid = os.fork()
                if pid == 0:
                    child(request, fds, (sock.fileno(), wake_r, wake_w, *statuses.values()), module)
                statuses[pid] = fds[2]
                sock.send(json.dumps({"pid": pid}).encode())
            except (ValueError, OSError) as exc:
                sock.send(json.dumps({"error": f"the zygote could not fork: {exc}"}).encode())
                if len(fds) == 3:
                    os.close(fds[2])
            finally:
                for fd in fds[:2]:
                    os.close(fd)
            reap(statuses)


def reap(statuses: dict[int, int]) -> None:
    """Collect every child that ended and write its Popen-style return code to its status pipe."""
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, f"{os.waitstatus_to_exitcode(status)} {time.monotonic()}\n".encode())
            os.close(fd)


def child(request: dict, fds: list[int], closing: Sequence[int], module: str) -> None:
    """In the forked child: become the process a plain start would have made (`closing`: the zygote's
    descriptors, its siblings' status pipes among them, so that none stays open in a child), run
    `module`'s main(), exit as the interpreter would. Never returns."""
    code: int = 1
    try:
        os.setsid()
        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(1, ctypes.c_ulong(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        os.umask(int(request["umask"]))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        args = [str(a) for a in request["args"]]
        import numpy
        import setproctitle

        numpy.random.seed()  # as unpredictable as a fresh process' (Python's random reseeds at fork)
        setproctitle.setproctitle(" ".join(str(a) for a in request["argv"]))
        entry = sys.modules[module]
        sys.argv = [str(entry.__file__), *args]
        code = run(entry.main)
    except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def run(main: Any) -> int:
    """`main()` and the interpreter's end, as `python -m` would do them: the exit code of a SystemExit,
    a traceback and 1 for an exception, non-daemon threads joined, atexit handlers run; an uncaught
    KeyboardInterrupt ends the process by SIGINT."""
    import atexit

    code = 0
    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - the interpreter's own behaviour
        traceback.print_exc()
        code = 1
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter does at exit
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    if code == -signal.SIGINT:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code & 0xFF if code >= 0 else 1


def main(argv: Sequence[str]) -> int:
    """The zygote (argv: its socket's descriptor, the module its children run, then any modules to
    import beside PRELOAD): import them and the module, check that nothing started a thread, then
    serve()."""
    sock = socket.socket(fileno=int(argv[0]))
    module, extra = argv[1], argv[2:]
    import importlib

    for name in (*PRELOAD, *extra, module):
        importlib.import_module(name)
    # setproctitle claims the memory of argv and the environment at its first call: here, while the C
    # environment is still the one the process started with (a child replaces it before it retitles)
    setproctitle = sys.modules["setproctitle"]
    setproctitle.setproctitle(setproctitle.getproctitle())
    why = unsafe_to_fork()
    if why:
        sys.stderr.write(f"zygote: {why}; forking from it would not be safe: processes start the plain way\n")
        sock.close()
        return 1
    serve(sock, module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
