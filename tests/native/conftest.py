"""The native tests run against the built cores: a core that is missing fails them, with how to build it,
instead of shrinking their parameter lists to nothing (a green run must mean the core was tested).

Every test whose `backend` parameter is "cpu" or "cuda" needs that core; other tests ask for the CPU core
with the `cpu_core` fixture. The backend lists are fixed, except that "cuda" is listed only on a machine
with a GPU: that depends on the hardware, never on what was built.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from graphtrain.runtime.native import NativeUnavailable, core, cuda

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


@pytest.fixture(scope="session")
def cuda_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The CUDA core built once per session as setup.py builds it (cuda/nvcc.py: sm_80, sm_90 and PTX of
    sm_90) into a temporary directory, and nvcc's output. Without nvcc the tests fail saying so: CUDA code
    must compile here (the machines have nvcc), and a skipped build proves nothing."""
    if shutil.which("nvcc") is None:
        pytest.fail("nvcc is not on PATH: the CUDA core's build tests need the CUDA toolkit (CI has it)")
    out = tmp_path_factory.mktemp("cuda") / "core_cuda.so"
    result = subprocess.run(
        nvcc_module().nvcc_command(str(out), nvcc_module().DEFAULT_ARCHS),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out, result.stdout + result.stderr


def nvcc_module() -> ModuleType:
    """cuda/nvcc.py (not a package: loaded by path, as setup.py does)."""
    spec = importlib.util.spec_from_file_location("graphtrain_nvcc", ROOT / "cuda" / "nvcc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
