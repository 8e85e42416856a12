"""bench/optim.py on the CPU at a small size: every optimizer beside the floor of a deduplicating step
(issue 45, item 1), and the CPU core's ratio to it; the GPU columns (device time, item 7's bar) stay
empty here and are filled by scripts/gpu-check on a GPU machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_the_optimizer_bench_reports_each_optimizer_beside_the_floor() -> None:
    args = ["--rows", "20000", "--batch", "2000", "--dims", "16", "--dists", "uniform", "--steps", "2"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "optim.py"), *args, "--triad-elements", "200000"],
        capture_output=True,
        text=True,
        timeout=170,
        check=True,
    ).stdout
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| uniform")]
    kinds = ("rowwise_adagrad", "adagrad", "adam", "sgd")
    for kind in kinds:
        mine = {r[3].strip(): r for r in rows if r[2].strip() == kind}
        floor, core = mine["floor: sort + scatter"], mine["graphtrain cpu core"]
        assert float(floor[4]) > 0 and floor[5].strip() == "" and floor[7].strip() == ""  # no device, no GB/s
        assert core[9].strip().endswith("x the floor") and float(core[7]) > 0, core


def test_the_floor_sorts_the_ids_and_marks_each_touched_row_once() -> None:
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import optim as bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    step = bench.DedupFloor(10)
    step(torch.tensor([7, 2, 7, 0]), torch.zeros(4, 3))
    (narrow,) = step.narrow.values()
    assert narrow.dtype == torch.uint8 and narrow.nonzero().flatten().tolist() == [0, 2, 7]
    assert bench.item7_bar(0, 1.0) == pytest.approx(50e-6)
    assert bench.item7_bar(750_000_000, 1.0) == pytest.approx(1.0 + 50e-6)
