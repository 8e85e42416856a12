"""Output paths checked before any work: one rule for every command that writes a file the user
names (export, predict, plot, crd, infer, partition), so a bad path is one line naming its option
rather than an OSError's traceback after minutes of work. Free of numpy and torch: the control plane's
`crd -o` uses it without the runtime installed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from graphtrain.runtime.data.cache import check_creatable, refusal
from graphtrain.runtime.errors import GraphtrainError


def check_target(out: Path, suffixes: tuple[str, ...], example: str = "table", option: str = "--out") -> None:
    """Refuse an output path before any work: a directory (`example` names a file to give instead),
    a suffix not in `suffixes` (() takes any), a parent that cannot be created or where no file can be
    made. The one rule of export, predict, plot and crd: a missing parent directory is created when
    the file is written (write_rows, write_columns, plot).

    Raises:
        GraphtrainError: one line naming `option`, `out` and why.
    """
    said = f"{option} {out}"
    suffix = suffixes[0] if suffixes else ""
    if out.is_dir():
        raise GraphtrainError(
            f"{said}: is a directory; give the file to write, e.g. {out / (example + suffix)}"
        )
    if out.exists() and not out.is_file():
        raise GraphtrainError(f"{said}: exists and is not a regular file")
    if suffixes and out.suffix.lower() not in suffixes:
        raise GraphtrainError(f"{said}: unknown output format {out.suffix!r} (use {', '.join(suffixes)})")
    check_writable(out.parent, said)


def check_writable(directory: Path, said: str | None = None) -> None:
    """Refuse, before any work, a directory that cannot be made (a file in the way) or (it, or while it
    does not exist its nearest existing parent) where no file can be made: a probe file is made and
    removed (permissions alone do not tell, for root or on /proc or a read-only file system). `said`:
    the option and path the user gave, which the message starts with (default: `directory`).

    Raises:
        GraphtrainError: one line naming `said`, the directory and the system's reason.
    """
    said = said or str(directory)
    try:
        check_creatable(directory)
    except GraphtrainError as exc:
        raise GraphtrainError(f"{said}: {exc}") from None
    here = Path(os.path.abspath(directory))
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        with tempfile.NamedTemporaryFile(dir=here, prefix=".graphtrain-probe-"):
            pass
    except OSError as exc:
        raise GraphtrainError(f"{said}: cannot write a file in {here} ({refusal(exc)})") from None
