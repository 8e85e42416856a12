"""Progress bars and the console for long steps (downloads, parsing, partitioning).

Bars go to stderr and only when it is a terminal, so logs and piped output stay clean.
Set GRAPHTRAIN_QUIET=1 to silence them on a terminal too.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Whoever read this output stopped reading (`graphtrain run ... | head`): stop printing and go
        on. rich's default exits, which failed a healthy training; the logs and status.json still
        record everything."""
        self.quiet = True


console = _Console(stderr=True)


def quiet() -> bool:
    return bool(os.environ.get("GRAPHTRAIN_QUIET")) or not sys.stderr.isatty()


def progress() -> Progress:
    """A byte-count progress bar (downloads)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet(),
    )


def spinner() -> Progress:
    """A spinner with elapsed time for steps of unknown length (parsing, METIS)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet(),
    )
