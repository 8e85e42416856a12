"""The nvcc command line of the CUDA core, shared by setup.py (GRAPHTRAIN_BUILD_CUDA=1) and the CI
compile check (tests/native/test_cuda_build.py). Paths are relative to the repository root."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def nvcc_command(output: str, archs: list[str], extra: list[str] | None = None) -> list[str]:
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cuda/src").glob("*.cu"))
    return [
        "nvcc",
        "-O3",
        "-std=c++17",
        "--extended-lambda",
        "-Xcompiler",
        "-fPIC,-fvisibility=hidden,-fno-math-errno",
        "-Icuda/include",
        *gencode,
        *(extra or ["-shared"]),
        "-o",
        output,
        *sources,
    ]
