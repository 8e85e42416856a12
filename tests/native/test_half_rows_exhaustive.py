"""The CPU core's fast loops for half rows give the element functions' bits for every value they take
(cuda/include/graphtrain/optim_math.h: half_row_round, fp16_row_to_float against fp16_round, bf16_round
and fp16_to_float, which the CUDA core calls). tests/native/cpp/half_rows_exhaustive.cpp walks every
float32 in float16's normal range, every non-NaN float32 for bfloat16 and every normal float16 (4.8
billion values); this compiles it against the header as it is and runs it. On a CPU with AVX-512 and
F16C, where the update loop takes cuda/src/half_rows_avx512.h's loops instead, the walk runs through
those too, and through every float32 for float16 (the vectors outside its fast case included), and
half_update_avx512.h's one-pass float16 update is held bit for bit to the three passes it replaces
(~13 s on 2 cores in all). The sampled Python test (test_half_tables.py) covers the path choice per
row; this one, the arithmetic."""

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
            f"-I{ROOT / 'cuda' / 'src'}",
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
    walks = {
        "float16-round": (0, 2 * (0x47800000 - 0x38800000)),
        "bfloat16-round": (0, 2**32 - 2 * (0x7FFFFFFF - 0x7F800000)),
        "float16-widen": (0, 2 * (0x7C00 - 0x0400)),
        # 18 float32 (2 past 65,504) and 12 float16 values off the fast path, at 6 places (the last in a
        # row of 129)
        "special-rows": (0, (2 * 18 + 12) * (5 * 128 + 129)),
    }
    if cpu_has("avx512f", "f16c"):
        walks |= {f"avx512-{name}": count for name, count in walks.items()}
        widths = 16 + 128 + 256 + 16 + 48 + 128 + 208  # fixed at compile time, then not
        walks |= {
            "avx512-float16-round-all": (0, 2**32),
            # 200 rows a case: SGD and Adagrad (its state too) with and without decay, row-wise Adagrad
            # without (its one state a row, seven widths)
            "avx512-fused-update": (0, 200 * (2 * widths + 2 * 2 * widths + widths + 7)),
        }
    assert counts == walks, ran.stdout
    assert ran.returncode == 0


def cpu_has(*flags: str) -> bool:
    """Whether /proc/cpuinfo lists every flag (the native core's own test is __builtin_cpu_supports)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(flags) <= set(line.split(":", 1)[1].split())
    return False
