"""The project's own files: what git tracks, plus new files .gitignore does not exclude.

Every test that reads the source tree lists it here, never by walking the folders. A walk enters what the
project's own commands leave beside the sources: `python bench/e2e.py` makes 5 GB of venvs under
bench/.venvs (one of their files is not UTF-8, and walking them took 199 s), and .venv, build/, runs/ and
the caches are there after any `make`. git already knows which files are the project's, in one call.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def list_files(root: Path) -> list[Path]:
    """Files under `root` (a git work tree) that git tracks or would add: tracked ones still present,
    and untracked ones not ignored (a source being written counts before its first commit)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    paths = sorted({root / name for name in out.decode().split("\0") if name})
    return [p for p in paths if p.is_file()]  # a tracked file deleted but not yet committed is gone


@cache
def project_files() -> tuple[Path, ...]:
    """The repository's own files (list_files of the checkout), listed once per test process."""
    return tuple(list_files(ROOT))


def files_under(*folders: str, suffixes: tuple[str, ...] = ()) -> list[Path]:
    """The project's files inside `folders` (relative to the root), those ending in `suffixes` if given."""
    inside = [ROOT / f for f in folders]
    return [
        p
        for p in project_files()
        if any(p.is_relative_to(d) for d in inside) and (not suffixes or p.suffix in suffixes)
    ]
