"""The repository's top-level folders never shadow the standard library; no source file holds more than
one job's worth of lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.tree import ROOT, project_files


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


def long_sources(files: list[Path] | tuple[Path, ...], root: Path) -> dict[str, int]:
    """The source files among `files`, tests included, over MOST_LINES lines, by path under `root`."""
    long = {}
    for path in files:
        if path.suffix in SOURCES:
            lines = len(path.read_bytes().splitlines())
            if lines > MOST_LINES:
                long[str(path.relative_to(root))] = lines
    return long


def test_no_source_file_is_over_600_lines() -> None:
    """Tests too: test_reconcile.py had reached 2,037 lines and the pod runner 1,126 before they were
    split (2026-12-04)."""
    assert long_sources(project_files(), ROOT) == {}


ROOMS = ("runtime/kvstore", "runtime/storage", "runtime/checkpoint")
ROOM_LINES = 450  # issue 47: the shard server's packages keep their files well under the cap, not squeezed


def test_no_file_of_the_shard_servers_packages_is_over_450_lines() -> None:
    files = [f for f in project_files() if str(f.relative_to(ROOT)).startswith(ROOMS)]
    assert len(files) > 30
    long = {
        str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_bytes().splitlines())) > ROOM_LINES
    }
    assert long == {}


def test_make_tests_workers_keep_a_file_and_the_shared_folders_whole() -> None:
    """What tests/conftest.py's xdist scheduler hands out as one unit of work."""
    from tests.conftest import work_unit

    assert work_unit("tests/runtime/launch/test_run.py::test_x[2x2]") == "tests/runtime/launch/test_run.py"
    assert work_unit("tests/runtime/launch/test_run.py::test_y") == "tests/runtime/launch/test_run.py"
    assert {work_unit(f"tests/{d}/test_a.py::t") for d in ("api", "chart", "operator")} == {"apiserver"}
    assert {work_unit(f"tests/{d}/test_b.py::t[x]") for d in ("e2e", "images", "podrunner")} == {"pods"}
    assert work_unit("tests/contract/test_spec.py::test_z") == "tests/contract/test_spec.py"


def test_the_units_that_take_minutes_are_dealt_first() -> None:
    """The pod and API-server folders, then the launch, packaging and shard-server files, then the rest
    by test count: the small units dealt last even out the workers' ends."""
    from tests.conftest import first_by

    units = {
        "tests/contract/test_spec.py": 400,
        "apiserver": 300,
        "tests/runtime/launch/test_run.py": 16,
        "pods": 30,
        "tests/runtime/test_plan.py": 40,
        "tests/runtime/kvstore/test_service.py": 9,
        "tests/packaging/test_install.py": 7,
    }
    assert sorted(units, key=lambda u: first_by(u, units[u])) == [
        "pods",
        "apiserver",
        "tests/runtime/launch/test_run.py",
        "tests/packaging/test_install.py",
        "tests/runtime/kvstore/test_service.py",
        "tests/contract/test_spec.py",
        "tests/runtime/test_plan.py",
    ]
