"""The repository's top-level folders never shadow the standard library; no source file holds more than
one job's worth of lines."""

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


MOST_LINES = 600  # past this a file holds more than one job: split it along its seams
SOURCES = (".py", ".cu", ".cuh", ".cpp", ".h", ".sh")
NOT_SOURCE = {"tests", "build", ".venv", ".git", "node_modules"}


def test_no_source_file_outside_the_tests_is_over_600_lines() -> None:
    long = {}
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        hidden = any(p.startswith(".") or p.endswith(".egg-info") for p in parts[:-1])
        if path.suffix in SOURCES and path.is_file() and not NOT_SOURCE & set(parts) and not hidden:
            lines = len(path.read_bytes().splitlines())
            if lines > MOST_LINES:
                long[str(path.relative_to(ROOT))] = lines
    assert long == {}


def test_make_tests_workers_keep_a_file_and_the_shared_folders_whole() -> None:
    """What tests/conftest.py's xdist scheduler hands out as one unit of work."""
    from tests.conftest import work_unit

    assert work_unit("tests/runtime/launch/test_run.py::test_x[2x2]") == "tests/runtime/launch/test_run.py"
    assert work_unit("tests/runtime/launch/test_run.py::test_y") == "tests/runtime/launch/test_run.py"
    assert {work_unit(f"tests/{d}/test_a.py::t") for d in ("api", "chart", "operator")} == {"apiserver"}
    assert {work_unit(f"tests/{d}/test_b.py::t[x]") for d in ("e2e", "images", "podrunner")} == {"pods"}
    assert work_unit("tests/contract/test_spec.py::test_z") == "tests/contract/test_spec.py"
