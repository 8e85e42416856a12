"""The native tests run against the built cores: a core that is missing fails them, with how to build it,
instead of shrinking their parameter lists to nothing (a green run must mean the core was tested).

Every test whose `backend` parameter is "cpu" or "cuda" needs that core; other tests ask for the CPU core
with the `cpu_core` fixture. The backend lists are fixed, except that "cuda" is listed only on a machine
with a GPU: that depends on the hardware, never on what was built.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from graphtrain.runtime.native import NativeUnavailable, core, cuda
from tests.tree import files_under

GPU = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[2]


def backends(*, reference: bool = True) -> list[str]:
    """The backends a parity test runs on: the reference (unless left out), the CPU core, and the CUDA
    core where there is a GPU."""
    return (["torch"] if reference else []) + ["cpu"] + (["cuda"] if GPU else [])


def require(backend: str) -> None:
    """Fail the calling test (never skip it) when `backend` is a core that is not built."""
    if backend == "cpu":
        try:
            core()
        except NativeUnavailable as exc:
            pytest.fail(f"this test needs the native CPU core: {exc}", pytrace=False)
    elif backend == "cuda" and not cuda.available():
        pytest.fail("this test needs the CUDA core (a GPU is here): build it with `make cuda`", pytrace=False)


@pytest.fixture(autouse=True)
def _backend_is_built(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "backend" in callspec.params:
        require(callspec.params["backend"])


@pytest.fixture
def cpu_core() -> None:
    """For tests that call the CPU core directly."""
    require("cpu")


# Where cuda_build keeps its builds: one directory per key (the sources, the nvcc command, nvcc's and the
# host compiler's versions), so the pytest workers of a session, and later sessions, compile unchanged
# sources once (nvcc takes ~70 s here). $GRAPHTRAIN_CUDA_BUILD_CACHE overrides it.
CUDA_BUILD_CACHE = Path(
    os.environ.get("GRAPHTRAIN_CUDA_BUILD_CACHE", Path.home() / ".cache" / "graphtrain-tests" / "cuda")
)


def cuda_build_key(command: list[str]) -> str:
    """sha256 of everything the build's output depends on: every project file under cuda/ (the sources,
    headers and cuda/nvcc.py), the command, and the versions of nvcc and of its host compiler."""
    digest = hashlib.sha256()
    for path in files_under("cuda"):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps(command).encode())
    for tool in ("nvcc", "g++"):
        version = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
        digest.update(version.stdout.encode())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def cuda_build() -> tuple[Path, str]:
    """The CUDA core as setup.py builds it (cuda/nvcc.py: sm_80, sm_90 and PTX of sm_90), and nvcc's
    output: compiled into CUDA_BUILD_CACHE/<cuda_build_key> once for those inputs (under a lock, so two
    workers never compile at once), read from there after. Without nvcc the tests fail saying so: CUDA
    code must compile here (the machines have nvcc), and a skipped build proves nothing."""
    if shutil.which("nvcc") is None:
        pytest.fail("nvcc is not on PATH: the CUDA core's build tests need the CUDA toolkit (CI has it)")
    nvcc = nvcc_module()
    key = cuda_build_key(nvcc.nvcc_command("core_cuda.so", nvcc.DEFAULT_ARCHS))
    where = CUDA_BUILD_CACHE / key
    out, said = where / "core_cuda.so", where / "nvcc.out"
    where.mkdir(parents=True, exist_ok=True)
    with open(CUDA_BUILD_CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not said.exists():  # written last: a build that failed or was cut short left none
            partial = where / "core_cuda.so.partial"
            result = subprocess.run(
                nvcc.nvcc_command(str(partial), nvcc.DEFAULT_ARCHS),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert result.returncode == 0, result.stderr[-4000:]
            partial.replace(out)
            said.write_text(result.stdout + result.stderr)
    return out, said.read_text()


def nvcc_module() -> ModuleType:
    """cuda/nvcc.py (not a package: loaded by path, as setup.py does)."""
    spec = importlib.util.spec_from_file_location("graphtrain_nvcc", ROOT / "cuda" / "nvcc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
