"""The tests that read the source tree read the project's files only (tests/tree.py): a benchmark's venvs,
build outputs and run directories beside the sources are never walked, whatever they hold."""

from __future__ import annotations

import ast
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.layout.test_layout import MOST_LINES, long_sources
from tests.tree import ROOT, list_files

# where the project's own commands leave files that are not the project's (all in .gitignore)
IGNORED = ("bench/.venvs", "build", "runs", "examples/own-data/data/__pycache__")


@pytest.fixture
def planted() -> Iterator[list[Path]]:
    """Under each ignored path: a .py that is not UTF-8 (as in a venv that bench/e2e.py made), a .py
    over the line limit, and a large directory (3,000 files in 30 folders). Removed afterwards, with
    any folder the fixture had to make."""
    made: list[Path] = []
    files: list[Path] = []
    try:
        for ignored in IGNORED:
            top = ROOT / ignored
            first_missing = next((p for p in [*reversed(top.parents), top] if not p.exists()), None)
            here = top / f"planted-{os.getpid()}"
            made.append(first_missing if first_missing is not None else here)
            (here / "site-packages").mkdir(parents=True)
            bad = here / "site-packages" / "latin1.py"
            bad.write_bytes(b"# -*- coding: latin-1 -*-\nNAME = '\xa4'\n")
            long = here / "site-packages" / "long.py"
            long.write_text("x = 1\n" * (MOST_LINES + 100))
            for d in range(30):
                folder = here / "big" / f"d{d:02d}"
                folder.mkdir(parents=True)
                for f in range(100):
                    (folder / f"m{f:03d}.py").write_text(f"import os as o{f}\n")
            files += [bad, long, here / "big" / "d00" / "m000.py"]
        yield files
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


def test_what_is_planted_under_ignored_paths_is_not_listed_and_breaks_no_check(planted: list[Path]) -> None:
    bad = planted[0]
    with pytest.raises(UnicodeDecodeError):  # what a walk of bench/ met
        bad.read_text()
    started = time.monotonic()
    files = list_files(ROOT)
    took = time.monotonic() - started
    assert not set(planted) & set(files)
    assert not [p for p in files if any(p.is_relative_to(ROOT / i) for i in IGNORED)]
    # the checks that read the tree pass over the listing: every .py parses, none is too long
    for path in files:
        if path.suffix == ".py":
            ast.parse(path.read_text(), str(path))
    assert long_sources(files, ROOT) == {}
    assert took < 30, f"listing the project's files took {took:.1f} s"


def test_a_new_source_not_yet_committed_is_listed(tmp_path: Path) -> None:
    """An untracked file that .gitignore does not exclude is the project's: a module being written is
    checked before its first commit."""
    new = ROOT / "tests" / "layout" / f"planted_new_{os.getpid()}.py"
    try:
        new.write_text("x = 1\n")
        assert new in list_files(ROOT)
    finally:
        new.unlink(missing_ok=True)
    assert new not in list_files(ROOT)
