"""METIS in a forked child process, so a stop signal stops the partition step.

METIS' GKlib takes SIGTERM for itself while it runs (gk_sigtrap: its SIGERR is SIGTERM) and longjmps
out of the signal handler: a SIGTERM then (a partition Job's pod deleted, a `kill`) became "RuntimeError:
Caught an unknown exception!" from pymetis, and when the kernel handed the signal to another thread
(OpenBLAS') a segfault; Python's own handler never ran, so nothing was cleaned up. In a child, METIS
has the signal handling to itself; this process keeps its own (runtime/stopping.py: Ctrl-C, SIGTERM and
SIGHUP unwind), and a stop kills the child. The child inherits the graph copy-on-write and sends back
only its result (an int32 array) through a pipe, in .npy format (no pickle).

The parent's objects are frozen for the fork (gc.freeze): a collection in the child would free what it
inherited, and freeing a CUDA tensor there (a process that used a GPU before partitioning, as a test
session on a GPU machine does) aborts the child, whose CUDA context is not usable after a fork.
"""

from __future__ import annotations

import gc
import io
import os
import signal
from collections.abc import Callable

import numpy as np


def call(fn: Callable[[], np.ndarray], what: str) -> np.ndarray:
    """`fn()` run in a forked child: its array; a RuntimeError naming `what` when the child failed (its
    own error went to stderr). A KeyboardInterrupt here (Ctrl-C, Terminated) kills the child and goes
    on up."""
    read, write = os.pipe()
    frozen = gc.get_freeze_count() > 0  # a freeze of the caller's own (a pre-forking server) stays
    gc.freeze()  # the child never collects what it inherited (the module's docstring)
    try:
        pid = os.fork()
    except BaseException:
        if not frozen:
            gc.unfreeze()
        os.close(read)
        os.close(write)
        raise
    if pid != 0 and not frozen:
        gc.unfreeze()
    if pid == 0:  # the child: compute, write, leave without running the parent's cleanups
        code = 1
        try:
            os.close(read)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)  # the parent decides; the child just ends
            out = io.BytesIO()
            np.save(out, np.asarray(fn()), allow_pickle=False)
            with os.fdopen(write, "wb") as f:
                f.write(out.getbuffer())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - whatever it was, said once, the parent names it
            # os.write, not sys.stderr: another thread (a spinner) may have held its lock at the fork
            os.write(2, f"{what}: {type(exc).__name__}: {exc}\n".encode(errors="replace"))
        finally:
            os._exit(code)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as f:
            data = f.read()  # retried on EINTR, after this process' signal handlers ran (PEP 475)
        _, status = os.waitpid(pid, 0)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    if status != 0 or not data:
        how = f"exit code {os.waitstatus_to_exitcode(status)}"
        raise RuntimeError(f"{what} failed in its process ({how})")
    return np.load(io.BytesIO(data), allow_pickle=False)
