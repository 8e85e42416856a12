"""Trainer 0's warnings on the launcher's console: a trainer writes its log to a file, which a user of
`graphtrain run` does not read while the run goes, so a `warning:` line there (a model that collapsed,
no TensorBoard) would otherwise go unseen until the run is over."""

from __future__ import annotations

from pathlib import Path

MARK = "warning: "
READ_MAX = 1 << 16  # bytes read per call: a trainer that logs fast cannot hold the launcher's loop


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
