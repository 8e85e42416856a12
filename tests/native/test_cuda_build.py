"""The CUDA core must compile for sm_80 and sm_90 wherever nvcc is installed (CI has it), so a broken
kernel cannot land, and must pass the bindings' load-time ABI check (abi.py), which runs no kernel.
No GPU runs it on the build machines; its CPU twin is tested numerically."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from graphtrain.runtime.native import abi

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (CI has it)")
@pytest.mark.parametrize("arch", ["80", "90"])
def test_cuda_core_compiles(arch: str, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("graphtrain_nvcc", ROOT / "cuda" / "nvcc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / f"core_cuda_sm{arch}.so"
    result = subprocess.run(
        module.nvcc_command(str(out), [arch]), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    symbols = subprocess.run(["nm", "-D", str(out)], capture_output=True, text=True).stdout
    exported = [name for name, sig in abi.SIGNATURES.items() if abi.CUDA in sig.libraries]
    assert "gt_cuda_sparse_step" in exported and "gt_abi_version" in exported
    for name in exported:
        assert f" T {name}" in symbols, name
    lib = abi.load(out, abi.CUDA)  # opening it needs no GPU: the version, sizeof and entry points
    assert lib.gt_abi_version() == abi.ABI_VERSION
