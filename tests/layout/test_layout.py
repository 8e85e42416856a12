"""The repository's top-level folders never shadow the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_standard_operator_module_wins_from_the_repository_root() -> None:
    """`python -c` in the repository root puts the root first on sys.path; -S keeps site from having
    imported `operator` already (as a fresh venv's interpreter does not)."""
    out = subprocess.run(
        [sys.executable, "-S", "-c", "import collections, operator; print(operator.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert not Path(out.stdout.strip()).resolve().is_relative_to(ROOT)


def test_the_operator_package_still_imports() -> None:
    from graphtrain.operator import manifests

    assert Path(manifests.__file__).parent == ROOT / "operator"
