"""The CPU core's fast loops for half rows give the element functions' bits for every value they take
(cuda/include/graphtrain/optim_math.h: half_row_round, fp16_row_to_float against fp16_round, bf16_round
and fp16_to_float, which the CUDA core calls). tests/native/cpp/half_rows_exhaustive.cpp walks every
float32 in float16's normal range, every non-NaN float32 for bfloat16 and every normal float16 (4.8
billion values, ~5 s on 2 cores); this compiles it against the header as it is and runs it. The
sampled Python test (test_half_tables.py) covers the path choice per row; this one, the arithmetic."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "native" / "cpp" / "half_rows_exhaustive.cpp"


def test_every_value_of_the_fast_half_loops_matches_the_element_functions(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    assert compiler, "g++ is not on PATH: the native core builds with it, so this machine has it"
    exe = tmp_path / "half_rows_exhaustive"
    built = subprocess.run(
        [
            compiler,
            "-O2",
            "-std=c++17",
            "-fopenmp",
            f"-I{ROOT / 'cuda' / 'include'}",
            str(SOURCE),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    counts = {
        name: (int(bad), int(of)) for name, bad, of in (line.split() for line in ran.stdout.splitlines())
    }
    assert counts == {
        "float16-round": (0, 2 * (0x47800000 - 0x38800000)),
        "bfloat16-round": (0, 2**32 - 2 * (0x7FFFFFFF - 0x7F800000)),
        "float16-widen": (0, 2 * (0x7C00 - 0x0400)),
    }, ran.stdout
    assert ran.returncode == 0
