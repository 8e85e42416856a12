"""How a fresh checkout installs and runs: from its root, and by role.

Each test runs real commands in subprocesses (pip, pytest, the `graphtrain` console script), as a user
would in a fresh clone: the repository root first on sys.path, a venv with only the control-plane extra.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tree import ROOT, files_under


def run(
    *cmd: str | Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def test_pip_runs_from_the_repository_root() -> None:
    out = run(sys.executable, "-m", "pip", "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pip ")


def test_the_contract_tests_are_collected_from_the_repository_root() -> None:
    """`python -m pytest` from the root puts the root first on sys.path, where cli/, runtime/, ... are
    plain folders beside the installed graphtrain package: every contract test module must import there
    on its own (collected alone, not after another directory's conftest). Running them is this suite's
    own job, from the same root; here it would repeat 40 s of it."""
    out = run(
        sys.executable, "-m", "pytest", "tests/contract", "-q", "--collect-only", "-p", "no:cacheprovider"
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert re.fullmatch(r"\d+ tests collected in [\d.]+s", out.stdout.strip().splitlines()[-1]), out.stdout[
        -3000:
    ]


@pytest.fixture(scope="module")
def control_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv with `pip install -e '.[operator]'` run from the root, without building native code.

    This interpreter's pip installs into it (`--python`), and skips byte-compiling what it installs:
    the same resolver and packages, without the venv's own copy of pip (6 s) and the compilation of the
    kubernetes client's thousands of modules that no test imports (15 s of CPU)."""
    venv = tmp_path_factory.mktemp("control") / "venv"
    out = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert out.returncode == 0, out.stderr
    cores = sorted((ROOT / "runtime" / "native").glob("_core*.so"))
    before = {p: p.stat().st_mtime_ns for p in cores}
    env = {**os.environ, "GRAPHTRAIN_NATIVE": "0"}
    pins = ROOT / "requirements-dev.txt"
    out = run(
        sys.executable, "-m", "pip", "--python", venv / "bin" / "python",
        "install", "-q", "--no-compile", "-c", pins, "-e", ".[operator]", env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # the runtime's native core, built by the development install, was neither rebuilt nor removed
    assert {p: p.stat().st_mtime_ns for p in cores} == before
    yield venv / "bin"


def test_the_control_plane_installs_without_torch(control_venv: Path) -> None:
    for module in ("torch", "numpy", "scipy", "pymetis", "zmq"):
        out = run(control_venv / "python", "-c", f"import {module}")
        assert out.returncode == 1 and "ModuleNotFoundError" in out.stderr, module
    out = run(control_venv / "python", "-c", "import graphtrain.operator.handlers, graphtrain.contract.crd")
    assert out.returncode == 0, out.stderr


def test_the_operator_command_works_without_torch(control_venv: Path) -> None:
    out = run(control_venv / "graphtrain", "crd")
    assert out.returncode == 0 and "CustomResourceDefinition" in out.stdout, out.stderr
    out = run(control_venv / "graphtrain", "operator", "--help")
    assert out.returncode == 0, out.stderr
    assert "Run the GraphTraining operator" in out.stdout
    out = run(
        control_venv / "graphtrain", "validate", *sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    )
    assert out.returncode == 0, out.stderr


def test_a_runtime_command_without_the_runtime_says_what_to_install(
    control_venv: Path, tmp_path: Path
) -> None:
    out = run(control_venv / "graphtrain", "run", "examples/nations-transe.yaml", "--run-dir", tmp_path / "r")
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: this command needs ") and line.endswith(
        "pip install 'graphtrain[runtime]'"
    )
    assert "Traceback" not in out.stderr


def test_the_api_command_without_its_extra_says_what_to_install(control_venv: Path) -> None:
    """The operator's install has no FastAPI: every other command still works (above), and `graphtrain
    api` says which extra brings it."""
    out = run(control_venv / "graphtrain", "api", "--source", "local", "--runs-dir", ".", "--no-auth")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: this command needs ") and line.endswith("pip install 'graphtrain[api]'")


def test_the_sdist_carries_the_native_sources(tmp_path: Path) -> None:
    out = run(sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (sdist,) = tmp_path.glob("graphtrain-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}
    sources = [p.relative_to(ROOT).as_posix() for p in files_under("cuda")]
    assert sources and not set(sources) - names, set(sources) - names
    assert {"setup.py", "pyproject.toml", "MANIFEST.in", "requirements-dev.txt", "cli/__init__.py"} <= names
    assert not [n for n in names if n.endswith((".so", ".pyc"))]
