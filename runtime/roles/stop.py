"""SIGTERM ends a trainer within moments, wherever its main thread is.

A pod's trainer is PID 1 of its container, and the kernel drops signals that PID 1 has no handler for:
without one, every delete, suspend or deadline left trainers running until the SIGKILL at the end of the
grace period (26-30 s seen). A Python handler alone is not enough either: it runs only when the main
thread is back in the interpreter, and a trainer's main thread waits in C for most of a step (a gloo
collective, a ZMQ reply, a kernel). So SIGTERM is blocked in every thread (threads inherit the mask:
call this before any is started) and one thread waits for it with sigwait, then leaves at once with
128 + SIGTERM. What is on disk stays as it was: checkpoints are written complete or not at all
(checkpoint.py, train/checkpoints.py), and a resumed trainer loads the newest complete one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_CODE = 128 + signal.SIGTERM


def exit_on_sigterm(who: str) -> None:
    """From now on SIGTERM makes this process say so on stderr and exit EXIT_CODE, from a thread of its
    own. The handler installed beside the mask only makes the signal deliverable to PID 1 (the kernel
    drops a default-handled signal there); the waiting thread is what acts on it."""
    signal.signal(signal.SIGTERM, lambda signum, frame: _leave(who))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=_wait, args=(who,), name="sigterm", daemon=True).start()


def _wait(who: str) -> None:
    signal.sigwait({signal.SIGTERM})
    _leave(who)


def _leave(who: str) -> None:
    sys.stderr.write(
        f"[{who}] SIGTERM: stopping now (the newest complete checkpoint is where a restart resumes)\n"
    )
    sys.stderr.flush()
    os._exit(EXIT_CODE)
