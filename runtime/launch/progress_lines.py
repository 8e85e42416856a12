"""What `graphtrain run` prints of its trainers while they train: trainer 0's finished epochs (from its
progress history, each once, however fast epochs go), a line on the running epoch when none came for
IN_EPOCH_EVERY, and the `warning:` lines of trainer 0's log. A trainer writes its log to a file, which a
user of `graphtrain run` does not read while the run goes, so a warning there (a model that collapsed,
no TensorBoard) would otherwise go unseen until the run is over."""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import Progress

IN_EPOCH_EVERY = 30.0  # seconds between lines on an epoch still running (none for shorter epochs)

MARKED = re.compile(r"^(?:\S+ )?(warning: .*)$")  # a trainer's `log` line (stamp first), or a bare print
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # never to the terminal: escapes, bells
LINE_MAX = 500  # characters of a warning shown, the rest cut
CHUNK = 1 << 16  # bytes read at a time; a line longer than this is skipped
POLL_MAX = 1 << 20  # bytes read per poll while trainers run (a fast logger cannot hold the loop)


def read_if_present(path: Path) -> str | None:
    """A file's text, or None if it cannot be read (not written yet)."""
    try:
        return path.read_text()
    except OSError:
        return None


def shown(text: str) -> str:
    """A log's text as the console may show it: no control characters, at most LINE_MAX characters."""
    text = CONTROL.sub("", text)
    return text if len(text) <= LINE_MAX else text[:LINE_MAX] + "..."


class WarningRelay:
    """New `warning:` lines of one log file (a line that starts with one, after the time stamp), read
    from where the last call stopped: whole lines only, a line longer than CHUNK skipped, a file that
    shrank (a restarted trainer's fresh log) read from its start, anything but a regular file (a FIFO
    would block the launcher) not read."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.skipping = False  # inside a line longer than CHUNK

    def new(self, budget: int | None = POLL_MAX) -> list[str]:
        """The warnings written since the last call (from `warning:` on, as shown), reading at most
        `budget` bytes (None: to the file's end as it is now, the last call of a run)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            if st.st_size < self.offset:
                self.offset, self.skipping = 0, False
            stop = st.st_size if budget is None else min(st.st_size, self.offset + budget)
            found: list[str] = []
            while self.offset < stop:
                chunk = os.pread(fd, min(CHUNK, stop - self.offset), self.offset)
                found += self._lines(chunk)
                if not chunk or (b"\n" not in chunk and len(chunk) < CHUNK):
                    break  # an unfinished line: it is read whole once it ends
            return found
        finally:
            os.close(fd)

    def _lines(self, chunk: bytes) -> list[str]:
        """The warnings among `chunk`'s whole lines; moves the offset past what it took."""
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            if len(chunk) == CHUNK:  # a line longer than CHUNK: skipped to its end
                self.offset, self.skipping = self.offset + CHUNK, True
            return []
        body = chunk[:cut]
        if self.skipping:  # the rest of a skipped line
            body, self.skipping = body[body.find(b"\n") + 1 :], False
        self.offset += cut
        lines = body.decode("utf-8", "replace").splitlines()
        return [shown(m.group(1)) for m in map(MARKED.match, lines) if m]


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

    def poll(self, final: bool = False) -> Progress | None:
        """Trainer 0's latest report (None when missing or unreadable), after printing each epoch its
        history gained, its log's new warnings (`final`: all of them, the run's last poll), and the
        running epoch if no line came for IN_EPOCH_EVERY."""
        report = reporting.decode(read_if_present(self.run_dir / rundir.PROGRESS_FILE))
        for entry in self._new_epochs():
            self.say(f"[run] {reporting.epoch_line(entry)}")
            self._last_print, self._last_step = time.monotonic(), entry.step
        for text in self._warnings.new(None if final else POLL_MAX):
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
