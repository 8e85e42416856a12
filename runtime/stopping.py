"""Stop signals as exceptions in the main thread: Ctrl-C, SIGTERM and SIGHUP end a command the way
Ctrl-C does, unwinding, so what it was writing is removed or left whole (the launcher's processes, a
partition's temporary and scratch files).
A C library that takes a stop signal for itself (METIS does) runs in a child process of its own
(runtime/partition/forked.py), so these handlers keep working.
"""

from __future__ import annotations

import signal


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to the launcher: stop like Ctrl-C. The children run in their own sessions (a
    terminal's Ctrl-C must reach the launcher alone, which then stops them in order), so without this
    a plain `kill` of the launcher would leave every server and trainer running."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_on_signals() -> None:
    """Turn SIGTERM and SIGHUP into Terminated in the main thread (call it from there), and let SIGINT
    interrupt even when the launcher inherited it ignored (started with `&` from a script or nohup).

    Only the first of them interrupts: the ones after it are ignored, so a second Ctrl-C (or a
    supervisor's repeated SIGTERM) cannot cut short the stop the first one began (every process
    stopped, shared memory and sockets removed, the final status written), which is bounded by the
    stop's grace and SIGKILL. Cut short, it left status.json saying Training and targets.json naming
    dead ports."""

    def handler(signum: int, _frame: object) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, _ignore)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(f"terminated ({signal.Signals(signum).name})")

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def _ignore(_signum: int, _frame: object) -> None:
    """A stop signal after the first: the stop is under way (a handler, not SIG_IGN, which a process
    started from here would inherit)."""
