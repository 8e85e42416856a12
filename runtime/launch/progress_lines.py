"""What `graphtrain run` prints of its trainers while they train: trainer 0's finished epochs (from its
progress history, each once, however fast epochs go), a line on the running epoch when none came for
IN_EPOCH_EVERY, and the `warning:` lines of trainer 0's log. A trainer writes its log to a file, which a
user of `graphtrain run` does not read while the run goes, so a warning there (a model that collapsed,
no TensorBoard) would otherwise go unseen until the run is over."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import Progress

IN_EPOCH_EVERY = 30.0  # seconds between lines on an epoch still running (none for shorter epochs)

MARK = "warning: "
READ_MAX = 1 << 16  # bytes read per call: a trainer that logs fast cannot hold the launcher's loop


def read_if_present(path: Path) -> str | None:
    """A file's text, or None if it cannot be read (not written yet)."""
    try:
        return path.read_text()
    except OSError:
        return None


class WarningRelay:
    """New `warning:` lines of one log file, read from where the last call stopped (whole lines only;
    a file that shrank, a restarted trainer's fresh log, is read from its start)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def new(self) -> list[str]:
        """The warnings written since the last call, each from its `warning:` on (no time stamp)."""
        try:
            with self.path.open("rb") as f:
                if f.seek(0, 2) < self.offset:
                    self.offset = 0
                f.seek(self.offset)
                chunk = f.read(READ_MAX)
        except OSError:
            return []
        end = chunk.rfind(b"\n") + 1
        if end == 0 and len(chunk) == READ_MAX:  # one line past READ_MAX: skip it rather than stall
            end = len(chunk)
        self.offset += end
        lines = chunk[:end].decode("utf-8", "replace").splitlines()
        return [line[line.index(MARK) :] for line in lines if MARK in line]


class ProgressLines:
    """The launcher's lines on trainer 0's progress, printed through `say` (see the module docstring)."""

    def __init__(self, run_dir: Path, say: Callable[[str], None]):
        self.run_dir, self.say = run_dir, say
        self.seen: set[tuple[int, int, str | None]] = set()  # history entries printed (or from before)
        self._history_stat: tuple[int, int] | None = None
        self._last_print = time.monotonic()
        self._last_step = -1
        self._warnings = WarningRelay(run_dir / "logs" / "trainer-0.log")

    def skip_earlier(self) -> None:
        """Print none of the history's entries already there: earlier launches printed them."""
        before = reporting.decode_history(read_if_present(self.run_dir / rundir.HISTORY_FILE))
        self.seen = {reporting.entry_key(p) for p in before}

    def poll(self) -> Progress | None:
        """Trainer 0's latest report (None when missing or unreadable), after printing each epoch its
        history gained, its log's new warnings, and the running epoch if no line came for IN_EPOCH_EVERY."""
        report = reporting.decode(read_if_present(self.run_dir / rundir.PROGRESS_FILE))
        for entry in self._new_epochs():
            self.say(f"[run] {reporting.epoch_line(entry)}")
            self._last_print, self._last_step = time.monotonic(), entry.step
        for text in self._warnings.new():
            self.say(f"[run] trainer 0: {text}")
        if report is None or report.step <= self._last_step or report.epoch >= report.epochs:
            return report
        if time.monotonic() - self._last_print >= IN_EPOCH_EVERY and not (
            report.eval_metric or ""
        ).startswith("test_"):
            self.say(f"[run] {reporting.in_epoch_line(report)}")
            self._last_print, self._last_step = time.monotonic(), report.step
        return report

    def _new_epochs(self) -> list[Progress]:
        """The history's entries not printed yet (the file is read again only when it changed)."""
        path = self.run_dir / rundir.HISTORY_FILE
        try:
            st = path.stat()
        except OSError:
            return []
        if (st.st_mtime_ns, st.st_size) == self._history_stat:
            return []
        self._history_stat = (st.st_mtime_ns, st.st_size)
        fresh = reporting.unseen(reporting.decode_history(read_if_present(path)), self.seen)
        self.seen.update(reporting.entry_key(p) for p in fresh)
        return fresh
