"""scripts/gpu-check on a machine without a GPU: it reports what is here, then stops where it needs a GPU,
says so, exits 3 (distinct from a failure, 1) and records nothing; without nvcc it cannot build (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check"


def gpu_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: scripts/gpu-check runs every step")
def test_stops_where_a_gpu_is_needed_and_says_so() -> None:
    results = (ROOT / "bench" / "RESULTS.md").read_bytes()
    done = gpu_check("--no-build")
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "== 1. report" in out and "nvcc:" in out and "torch " in out and "CUDA core:" in out
    assert "NO GPU PRESENT" in out and "steps 3-5" in out
    assert "== 3. tests/gpu" not in out
    assert (ROOT / "bench" / "RESULTS.md").read_bytes() == results


def test_cannot_start_a_build_without_nvcc(tmp_path: Path) -> None:
    done = gpu_check(env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nvcc not found" in done.stdout
