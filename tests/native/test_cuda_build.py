"""The CUDA core must compile for sm_80 and sm_90 wherever nvcc is installed (CI has it), so a broken
kernel cannot land. No GPU runs it on the build machines; its CPU twin is tested numerically."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

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
    for name in ("gt_cuda_sparse_step", "gt_cuda_gather", "gt_cuda_scatter"):
        assert f" T {name}" in symbols, name
