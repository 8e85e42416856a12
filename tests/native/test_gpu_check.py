"""scripts/gpu-check on a machine without a GPU: it reports what is here, then stops where it needs a GPU,
says so, exits 3 (distinct from a failure, 1) and records nothing; without nvcc it cannot build (exit 2).

Its steps as on a GPU machine, with a fake interpreter and a fake compute-sanitizer answering each step's
command: the order, the sanitizers' commands (initcheck without the option CUDA 13 took for the program,
racecheck on a subset under --budget), the budget's skips, a timeout that does not stop the check, a
missing CUDA core that stops it, the end-to-end step's spec, kept files and comparison, and the record."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.native.gpu_check_modules import FAKE_SANITIZER, ROOT, SCRIPT, lib, script


def gpu_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: scripts/gpu-check runs every step")
def test_stops_where_a_gpu_is_needed_and_says_so(tmp_path: Path) -> None:
    results = (ROOT / "bench" / "RESULTS.md").read_bytes()
    done = gpu_check("--no-build", "--budget", "480", "--out", str(tmp_path))
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "== 1. report" in out and "nvcc:" in out and "torch " in out and "CUDA core:" in out
    assert f"interpreter: {sys.executable}" in out or "interpreter: " + str(ROOT / ".venv") in out
    assert "core libraries: " in out and "_core" in out
    assert "NO GPU PRESENT" in out and "steps 3-7" in out
    assert "== tests/gpu" not in out and not (tmp_path / "summary.json").exists()
    assert (ROOT / "bench" / "RESULTS.md").read_bytes() == results


def test_cannot_start_a_build_without_nvcc(tmp_path: Path) -> None:
    done = gpu_check("--out", str(tmp_path / "out"), env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nvcc not found" in done.stdout


FAKE_PYTHON = """#!{python}
# gpu-check's interpreter for the tests: each step's command answered as on a GPU machine
import json, os, sys, time
from pathlib import Path
args = sys.argv[1:]
if os.environ.get("FAKE_SLOW") and os.environ["FAKE_SLOW"] in " ".join(args):
    time.sleep(60)
if args[:2] == ["-m", "pytest"]:
    print("sanitizer:", os.environ.get("GRAPHTRAIN_SANITIZER"))
    print("== 5 passed in 0.10s ==")
elif args[0] == "bench/cuda_calls.py":
    cols = dict(cudaLaunchKernel=9.0, cudaStreamSynchronize=1.0, cudaMalloc=0.0)
    doc = dict(tool="torch.profiler (CUPTI)", per_step=dict(adam=cols))
    Path(args[args.index("--json") + 1]).write_text(json.dumps(doc))
    print("CUDA API calls per step (torch.profiler (CUPTI)):")
    print("| adam | 9.00 | 1.00 |")
elif args[0] == "bench/optim.py":
    print("# bench/optim.py, fake")
    print("STREAM-like triad (cuda): 2900.0 GB/s")
    print("| uniform | 128 | sgd | graphtrain cuda core | 0.20 | 500.00 | 1500.0 | 52 % | |")
elif args[:3] == ["-m", "graphtrain.cli", "run"]:
    spec, run_dir = Path(args[3]).read_text(), Path(args[args.index("--run-dir") + 1])
    assert "epochs: 2" in spec, spec
    cuda = "device: cuda" in spec
    metric = "test_mrr" if "nations" in spec else "test_accuracy"
    (run_dir / "result.json").write_text(json.dumps({{metric: 0.70 if cuda else 0.705}}))
    rate = 40000.0 if cuda else 38000.0
    history = [dict(epoch=1, samplesPerSecond=1000.0), dict(epoch=2, samplesPerSecond=rate)]
    (run_dir / "progress-history.json").write_text(json.dumps(history))
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "trainer-0.log").write_text("trained")
    (run_dir / "checkpoints").mkdir()
    print("run dir:", run_dir)
else:
    sys.exit(f"fake python: unexpected {{args}}")
"""
FACTS = {
    "gpus": 1,
    "driver_gpus": 1,
    "core_ok": True,
    "core": "fake core, sm_90",
    "devices": [["H100", "90"]],
}


class Clock:
    """--budget's clock, `per_step` seconds gone at each step's start."""

    def __init__(self, budget: float | None, per_step: float = 0.0) -> None:
        self.budget, self.per_step, self.spent = budget, per_step, -per_step

    def remaining(self) -> float | None:
        self.spent += self.per_step
        return None if self.budget is None else max(0.0, self.budget - self.spent)

    def elapsed(self) -> float:
        return max(0.0, self.spent)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A GPU machine's tools, faked; its out dir."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python", FAKE_PYTHON), ("compute-sanitizer", FAKE_SANITIZER)):
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(script, "python", lambda: str(bin_dir / "python"))
    monkeypatch.setattr(script.signal, "signal", lambda *_: None)
    monkeypatch.setattr(script, "step_names", lambda: [n for n in script.PLANS if "nsys" not in n])
    data = tmp_path / "data"
    for dataset in ("wordnet", "nations"):
        (data / "datasets" / dataset).mkdir(parents=True)
    monkeypatch.setenv("GRAPHTRAIN_DATA", str(data))
    monkeypatch.delenv("FAKE_SLOW", raising=False)
    return tmp_path / "out"


def check(out: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock, facts: dict | None = None, **kw) -> int:
    monkeypatch.setattr(script.lib, "Clock", lambda budget: clock)
    args = argparse.Namespace(
        budget=clock.budget, out=out, skip=[], racecheck_k=None, e2e_epochs=2, bench_args="--dims 32",
        no_record=True,
    )  # fmt: skip
    for key, value in kw.items():
        setattr(args, key, value)
    out.mkdir(parents=True, exist_ok=True)
    return script.run_steps(args, facts or dict(FACTS), ["## GPU check", ""], False)


def steps(out: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads((out / "summary.json").read_text())["steps"]}


def test_every_step_in_order_under_a_480_s_budget(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check(fake, monkeypatch, Clock(480)) == 0
    done = steps(fake)
    assert list(done) == ["cuda core", "tests/gpu", *script.SANITIZERS, "cuda calls", "bench"] + [
        "e2e wordnet-sage cuda", "e2e nations-transe cuda", "e2e wordnet-sage cpu",
        "e2e nations-transe cuda trainers-cuda", "e2e wordnet-sage cuda trainers-cuda",
    ]  # fmt: skip
    assert {s["status"] for s in done.values()} == {lib.PASSED}
    assert done["memcheck"]["detail"] == "ERROR SUMMARY: 0 errors" and done["bench"]["detail"] == "1 rows"
    assert done["racecheck"]["detail"] == "RACECHECK SUMMARY: 0 hazards (0 errors, 0 warnings)"
    logs = {n: Path(s["log"]).read_text() for n, s in done.items() if s["log"]}
    assert "--track-unused-memory" not in logs["initcheck"] and "sanitizer: initcheck" in logs["initcheck"]
    assert (
        f"-k {script.RACECHECK_SUBSET}" in logs["racecheck"] and "-k" not in logs["memcheck"].splitlines()[0]
    )
    assert done["e2e nations-transe cuda"]["figures"] == {
        "metric": "test_mrr",
        "value": 0.7,
        "samples_per_second": 4e4,
    }
    assert done["cuda calls"]["detail"].startswith(
        "torch.profiler (CUPTI), per step: adam 9.0 launches, 1.0 syncs"
    )
    trainers = (fake / "e2e-nations-transe-cuda-trainers-cuda" / "nations-transe.yaml").read_text()
    assert "trainers:" in trainers and trainers.count("device: cuda") == 2
    kept = fake / "e2e-wordnet-sage-cuda"
    assert (
        "device: cuda" in (kept / "wordnet-sage.yaml").read_text()
        and (kept / "logs" / "trainer-0.log").exists()
    )
    assert (kept / "result.json").exists() and not (kept / "checkpoints").exists()
    run_dir = Path(logs["e2e wordnet-sage cuda"].split("run dir: ")[1].split()[0])
    assert not run_dir.exists()  # the run's own directory (checkpoints) is gone
    record = (fake / "record.md").read_text()
    assert "- memcheck: ERROR SUMMARY: 0 errors" in record and "| uniform | 128 | sgd |" in record
    assert "STREAM-like triad (cuda)" in record and "| adam | 9.00 | 1.00 |" in record
    assert (
        "test_accuracy GPU 0.7000 vs CPU 0.7050 (diff -0.0050, within 0.01); samples/s GPU/CPU 1.05x"
        in record
    )
    assert record.rstrip().endswith("- result: every step passed")


def test_steps_skipped_by_asking_hold_back_no_time(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--budget 215 --skip e2e on an H200 gave tests/gpu 30 s (its 92 s killed): the skipped end-to-end
    runs' expected time was held back for them."""
    check(fake, monkeypatch, Clock(215), skip=["e2e"])
    done = steps(fake)
    assert done["tests/gpu"]["timeout"] >= script.PLANS["tests/gpu"].expected >= 90
    assert done["e2e wordnet-sage cuda"]["detail"] == "SKIPPED (asked: --skip)"


def test_what_no_longer_fits_the_budget_is_skipped_and_fails_the_check(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check(fake, monkeypatch, Clock(480, per_step=70), skip=["racecheck"], sanitizer_k="adam") == 1
    done = steps(fake)
    assert "-x -k adam" in Path(done["memcheck"]["log"]).read_text().splitlines()[0]
    assert done["racecheck"]["detail"] == "SKIPPED (asked: --skip)"
    assert done["e2e wordnet-sage cuda"]["status"] == lib.PASSED
    assert done["e2e nations-transe cuda"]["detail"].startswith("SKIPPED (budget: ")
    assert done["e2e wordnet-sage cpu"]["status"] == lib.SKIPPED
    record = (fake / "record.md").read_text()
    assert "- e2e nations-transe cuda: SKIPPED (budget: " in record
    assert "- result: FAILED: racecheck (SKIPPED), e2e nations-transe cuda (SKIPPED)" in record


def test_a_step_past_its_cap_times_out_and_the_check_goes_on(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(script.PLANS, "bench", lib.Plan("bench", 0.5, 1.0))
    monkeypatch.setenv("FAKE_SLOW", "bench/optim.py")
    assert check(fake, monkeypatch, Clock(480)) == 1
    done = steps(fake)
    assert done["bench"]["status"] == lib.TIMEOUT and done["bench"]["detail"] == "TIMEOUT after 1s"
    assert done["e2e wordnet-sage cpu"]["status"] == lib.PASSED
    assert "- bench: TIMEOUT after 1s" in (fake / "record.md").read_text()


def test_a_gpu_without_a_cuda_core_fails_at_once(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = {**FACTS, "core_ok": False, "reason": "the CUDA core is not built"}
    assert check(fake, monkeypatch, Clock(480), facts) == 1
    done = steps(fake)
    assert done["cuda core"] == {**done["cuda core"], "status": lib.FAILED}
    assert "the CUDA core is not built" in done["cuda core"]["detail"]
    assert {s["detail"] for n, s in done.items() if n != "cuda core"} == {"SKIPPED (no CUDA core)"}
    assert not list(fake.glob("*.log"))
