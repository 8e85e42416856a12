"""Progress sinks written on a thread of their own, so a report costs the training thread nothing.

Each report wrote its files inline: progress.json and the rank's heartbeat, each created, fsynced and
renamed, 3 ms on this project's machine every 20 WordNet steps of 13 ms (1 % of the run); in a pod the
ConfigMap patch is an API call, which a slow API server made as slow as itself. Here the training thread
only leaves the report; a writer thread writes the newest one. A report the writer has not reached when a
newer one comes is replaced by it (reports are snapshots, and a history carries every epoch before it),
except that a replaced report's history is still written. The final report is waited for: the run's
result is on disk and in the ConfigMap before the trainer exits. A sink's error is raised on the training
thread at its next report, as it was when the sinks were written inline.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from graphtrain.contract.spec import Progress
from graphtrain.runtime.train.sinks import ProgressSink

Report = tuple[Progress, bool, list[Progress] | None]


def coalesce(waiting: Report | None, new: Report) -> Report:
    """The report to write when `new` arrives while `waiting` is unwritten: `new`, carrying `waiting`'s
    history if it has none of its own (a newer history holds every entry of an older one)."""
    progress, final, history = new
    if history is None and waiting is not None:
        history = waiting[2]
    return progress, final, history


class BackgroundSinks:
    """A ProgressSink that hands each report to `sinks` on a daemon thread (the module docstring)."""

    def __init__(self, sinks: Sequence[ProgressSink]):
        self.sinks = list(sinks)
        self._cv = threading.Condition()
        self._waiting: Report | None = None
        self._writing = False
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="progress-sinks", daemon=True)

    def write(self, progress: Progress, final: bool, history: list[Progress] | None = None) -> None:
        with self._cv:
            self._raise()
            closed = self._closed
        if closed:  # after close(): written here, as a plain sink would
            for sink in self.sinks:
                sink.write(progress, final, history)
            return
        with self._cv:
            if not self._thread.is_alive():
                self._thread.start()  # at the first report: a sink nobody reports to holds no thread
            self._waiting = coalesce(self._waiting, (progress, final, history))
            self._cv.notify_all()
        if final:
            self.flush()

    def flush(self) -> None:
        """Wait until every report handed over is written; raise a sink's error."""
        with self._cv:
            self._cv.wait_for(
                lambda: self._error is not None or (self._waiting is None and not self._writing)
            )
            self._raise()

    def close(self) -> None:
        """Write what was handed over, then end the thread (an error is left to the reports that
        follow none: the final report's flush raised it already)."""
        with self._cv:
            self._cv.wait_for(
                lambda: self._error is not None or (self._waiting is None and not self._writing)
            )
            self._closed = True
            self._cv.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def load_history(self) -> list[Progress]:
        """The first history a sink keeps (a restarted rank 0 continues it), after the writes handed over."""
        self.flush()
        return next((h for h in (s.load_history() for s in self.sinks) if h), [])

    def _raise(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._waiting is not None or self._closed)
                report, self._waiting = self._waiting, None
                if report is None:  # closed, and nothing left to write
                    return
                self._writing = True
            try:
                for sink in self.sinks:
                    sink.write(*report)
            except BaseException as exc:  # noqa: BLE001 - raised on the training thread (_raise)
                with self._cv:
                    self._error = exc
                    # what was queued behind it goes too: a final "Succeeded" queued behind a failed
                    # write would be written by close() after the run had failed on this error
                    self._waiting = None
            finally:
                with self._cv:
                    self._writing = False
                    self._cv.notify_all()
