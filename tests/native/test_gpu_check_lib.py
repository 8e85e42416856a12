"""scripts/gpu-check's logic without a GPU: a step streamed, logged and killed at its timeout (a real
`sleep`, its process group too); the sanitizer verdict, also through a fake compute-sanitizer that treats
options as CUDA 13's does; the --budget plan; the summary and the record; the end-to-end spec and result;
bench/cuda_calls.py's counts and its run on the CPU core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphtrain.contract.spec import load_yaml
from tests.native.gpu_check_modules import FAKE_SANITIZER, ROOT, lib, script


def ran(out: str, code: int | None = 0, timed_out: bool = False) -> lib.Ran:
    return lib.Ran(code, out, 1.0, timed_out=timed_out, timeout=5.0)


@pytest.fixture
def sanitizer(tmp_path: Path) -> Path:
    path = tmp_path / "compute-sanitizer"
    path.write_text(FAKE_SANITIZER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def run(cmd: list[str], tmp_path: Path, timeout: float = 60, **kw) -> tuple[lib.Ran, list[tuple[float, str]]]:
    seen: list[tuple[float, str]] = []
    done = lib.run_streamed(
        cmd, cwd=tmp_path, log_path=tmp_path / "logs" / "step.log", timeout=timeout,
        echo=lambda line: seen.append((time.monotonic(), line)), **kw,
    )  # fmt: skip
    return done, seen


# --- a step ---------------------------------------------------------------------------------------------


def test_a_step_streams_each_line_as_it_comes_and_logs_it(tmp_path: Path) -> None:
    start = time.monotonic()
    done, seen = run(["bash", "-c", "echo first; sleep 2; echo second; exit 4"], tmp_path)
    assert done.code == 4 and not done.timed_out
    lines = [line for _, line in seen]
    assert lines[1:] == ["first\n", "second\n"] and lines[0].startswith("$ bash -c")
    assert seen[1][0] - start < 1.5  # shown before the step ended, not at its end
    assert done.out == "first\nsecond\n"
    assert (tmp_path / "logs" / "step.log").read_text().splitlines()[1:] == ["first", "second"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state  # a zombie waits for a reaper that is not ours: it runs no more


def test_a_step_past_its_timeout_is_killed_with_its_group_and_says_timeout(tmp_path: Path) -> None:
    start = time.monotonic()
    done, seen = run(["bash", "-c", "sleep 60 & echo $!; wait"], tmp_path, timeout=0.5)
    assert done.timed_out and done.code is None
    assert time.monotonic() - start < 10
    assert lib.pytest_verdict(done)[0] == lib.TIMEOUT
    assert lib.sanitizer_verdict(done) == (lib.TIMEOUT, "TIMEOUT after 0s")
    assert "TIMEOUT after 0s" in (tmp_path / "logs" / "step.log").read_text()
    child = int(done.out.split()[0])
    for _ in range(50):  # the background sleep was in the step's group: killed with it
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def test_a_missing_program_is_a_failed_step_not_a_crash(tmp_path: Path) -> None:
    done, _ = run(["/nonexistent/compute-sanitizer", "--tool", "memcheck"], tmp_path)
    assert done.code == 127 and "cannot start" in done.out
    assert lib.sanitizer_verdict(done)[0] == lib.FAILED


def test_sigterm_to_the_checker_kills_the_step_in_flight(tmp_path: Path) -> None:
    """The runner's SIGTERM at its limit: the step's process group goes first, then the checker."""
    program = f"""
import os, signal, sys, threading
sys.path.insert(0, {str(ROOT / "scripts")!r})
import gpu_check_lib as lib
from pathlib import Path
def stop(signum, frame):
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, stop)
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    lib.run_streamed(["bash", "-c", "sleep 60 & echo $!; wait"], cwd=Path("."), log_path=Path("s.log"),
                     timeout=60, echo=lambda line: print(line, end="", flush=True))
except KeyboardInterrupt:
    print("interrupted")
"""
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert time.monotonic() - start < 20
    assert out.stdout.splitlines()[-1] == "interrupted", out.stdout + out.stderr
    child = int(out.stdout.splitlines()[1])
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


# --- verdicts -------------------------------------------------------------------------------------------


def test_a_sanitizer_passes_only_on_zero_errors_and_exit_0() -> None:
    assert lib.sanitizer_verdict(ran("== ERROR SUMMARY: 0 errors\n")) == (
        lib.PASSED,
        "ERROR SUMMARY: 0 errors",
    )
    assert lib.sanitizer_verdict(ran("== ERROR SUMMARY: 3 errors\n", 99))[0] == lib.FAILED
    status, detail = lib.sanitizer_verdict(ran("1 failed, 2 passed in 3.0s\n== ERROR SUMMARY: 0 errors\n", 1))
    assert status == lib.FAILED and "exit 1" in detail and "1 failed, 2 passed" in detail
    status, detail = lib.sanitizer_verdict(ran("3 passed\n", 0))
    assert status == lib.FAILED and "no ERROR SUMMARY" in detail
    status, detail = lib.sanitizer_verdict(
        ran("Error: Target application doesn't exist\nERROR SUMMARY: 0 errors")
    )
    assert status == lib.FAILED and "Target application doesn't exist" in detail


def test_racecheck_passes_on_zero_hazards() -> None:
    clean = "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert lib.sanitizer_verdict(ran(clean))[0] == lib.PASSED
    warned = "RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n"
    assert lib.sanitizer_verdict(ran(warned)) == (
        lib.FAILED, "RACECHECK SUMMARY: 2 hazards (0 errors, 2 warnings), exit 0"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "errors", "extra", "status", "words"),
    [
        ("memcheck", 0, [], lib.PASSED, "ERROR SUMMARY: 0 errors"),
        ("initcheck", 2, [], lib.FAILED, "ERROR SUMMARY: 2 errors, exit 99"),
        ("racecheck", 0, [], lib.PASSED, "RACECHECK SUMMARY: 0 hazards"),
        ("initcheck", 0, ["--track-unused-memory", "no"], lib.FAILED, "Target application doesn't exist"),
    ],
)
def test_through_a_fake_sanitizer(
    tmp_path: Path, sanitizer: Path, tool: str, errors: int, extra: list[str], status: str, words: str
) -> None:
    """The last case is the bug issue 29 found: "no" taken for the program."""
    cmd = [str(sanitizer), "--tool", tool, "--error-exitcode", "99", *extra, sys.executable, "-c", "print(1)"]
    done, _ = run(cmd, tmp_path, env={"FAKE_ERRORS": str(errors)})
    got = lib.sanitizer_verdict(done)
    assert got[0] == status and words in got[1], got


def test_pytest_verdict() -> None:
    assert lib.pytest_verdict(ran("== 99 passed, 1 skipped in 15.20s ==\n")) == (
        lib.PASSED, "99 passed, 1 skipped in 15.20s"
    )  # fmt: skip
    assert lib.pytest_verdict(ran("== 1 failed, 98 passed in 3.1s ==\n", 1))[0] == lib.FAILED
    assert "no tests selected" in lib.pytest_verdict(ran("== 9 deselected in 1.02s ==\n", 5))[1]


# --- the time plan --------------------------------------------------------------------------------------


def test_a_step_gets_its_cap_keeps_the_later_steps_time_or_is_skipped() -> None:
    step, later = lib.Plan("a", 30, 90), [lib.Plan("b", 50, 100), lib.Plan("c", 30, 60, optional=True)]
    assert lib.step_timeout(step, None, later) == lib.UNBUDGETED_S
    assert lib.step_timeout(step, 1000, later) == 90
    assert lib.step_timeout(step, 100, later) == 50  # 50 held back for b, not for the optional c
    assert lib.step_timeout(step, 60, later) == 30  # its own expected time, b squeezed
    assert lib.step_timeout(step, 29, later) is None
    optional = lib.Plan("o", 30, 60, optional=True)
    assert lib.step_timeout(optional, 79, later) is None and lib.step_timeout(optional, 81, later) == 31


def test_the_whole_check_fits_480_s_and_ends_by_its_budget() -> None:
    """Each step as expected: every one runs, the optional ones too. Each step until its timeout: the
    check still ends by the budget (each timeout is at most what is left), skipping what no longer fits."""
    names = script.step_names()
    plans = [script.PLANS[n] for n in names]
    report = 15.0
    for takes_all in (False, True):
        left, skipped = 480.0 - report, []
        for i, plan in enumerate(plans):
            timeout = lib.step_timeout(plan, left, plans[i + 1 :])
            if timeout is None:
                skipped.append(plan.name)
                continue
            left -= timeout if takes_all else plan.expected
            assert left >= 0
        assert skipped == [] if not takes_all else all(n.startswith("e2e") for n in skipped)


def test_the_clock() -> None:
    now = [100.0]
    clock = lib.Clock(60, now=lambda: now[0])
    now[0] = 130
    assert clock.remaining() == 30 and clock.elapsed() == 30
    now[0] = 200
    assert clock.remaining() == 0
    assert lib.Clock(None).remaining() is None


# --- the summary ----------------------------------------------------------------------------------------


def outcomes() -> list:
    return [
        lib.Outcome("tests/gpu", lib.PASSED, "99 passed in 15s", 15.2),
        lib.Outcome("memcheck", lib.TIMEOUT, "TIMEOUT after 90s", 90.0),
        lib.skipped("bench", "budget: 12 s left"),
        lib.Outcome("e2e wordnet-sage cpu", lib.SKIPPED, "SKIPPED (budget: 3 s left)", optional=True),
    ]


def test_a_skip_is_no_pass_but_an_optional_steps_skip_for_the_budget() -> None:
    steps = outcomes()
    assert lib.exit_status(steps) == 1 and lib.exit_status(steps[:1]) == 0 and lib.exit_status([]) == 1
    assert lib.exit_status([steps[0], steps[3]]) == 0
    assert (
        lib.exit_status([steps[0], lib.Outcome("x", lib.SKIPPED, "SKIPPED (asked: --skip)", optional=True)])
        == 1
    )
    assert lib.result_line(steps) == "FAILED: memcheck (TIMEOUT), bench (SKIPPED)"
    assert "optional, skipped for the budget: e2e wordnet-sage cpu" in lib.result_line([steps[0], steps[3]])


def test_the_table_the_record_and_summary_json(tmp_path: Path) -> None:
    steps = outcomes()
    table = lib.summary_table(steps).splitlines()
    assert table[0].split() == ["step", "result", "seconds", "detail"] and len(table) == 6
    assert "SKIPPED (budget: 12 s left)" in table[4] and "TIMEOUT after 90s" in table[3]
    assert lib.record_lines(steps) == [
        "- tests/gpu: 99 passed in 15s (15 s)",
        "- memcheck: TIMEOUT after 90s (90 s)",
        "- bench: SKIPPED (budget: 12 s left)",
        "- e2e wordnet-sage cpu: SKIPPED (budget: 3 s left)",
    ]
    assert lib.record_lines([lib.Outcome("initcheck", lib.FAILED, "no ERROR SUMMARY", 3)]) == [
        "- initcheck: FAILED: no ERROR SUMMARY (3 s)"
    ]
    lib.write_summary(tmp_path / "out" / "summary.json", steps, {"budget": 480})
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["budget"] == 480 and doc["result"].startswith("FAILED")
    assert [s["status"] for s in doc["steps"]] == [lib.PASSED, lib.TIMEOUT, lib.SKIPPED, lib.SKIPPED]


# --- the end-to-end step --------------------------------------------------------------------------------


@pytest.mark.parametrize("example", ["wordnet-sage", "nations-transe"])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_e2e_spec_is_the_example_on_that_device_for_2_epochs_and_valid(example: str, device: str) -> None:
    text = lib.e2e_spec((ROOT / "examples" / f"{example}.yaml").read_text(), device, 2)
    gt = load_yaml(text)
    original = load_yaml((ROOT / "examples" / f"{example}.yaml").read_text())
    assert str(gt.spec.shard_servers.device) == device and gt.spec.training.epochs == 2
    assert gt.spec.training.eval_every <= 2
    assert gt.spec.model == original.spec.model and gt.spec.embeddings == original.spec.embeddings
    assert lib.spec_dataset(text) == original.spec.graph.dataset


def test_the_gpu_trainers_e2e_spec_puts_the_trainers_on_cuda_with_nccl() -> None:
    text = lib.e2e_spec((ROOT / "examples" / "nations-transe.yaml").read_text(), "cuda", 2, trainers="cuda")
    gt = load_yaml(text)
    assert (str(gt.spec.trainers.device), str(gt.spec.trainers.backend)) == ("cuda", "nccl")
    assert gt.spec.trainers.replicas == 2


def write_run(run_dir: Path, result: dict, rates: list[float]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(result))
    history = [{"epoch": i + 1, "samplesPerSecond": r} for i, r in enumerate(rates)]
    (run_dir / "progress-history.json").write_text(json.dumps(history))
    return run_dir


def test_e2e_figures_from_the_run_directory(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path / "a", {"val_accuracy": 0.71, "test_accuracy": 0.7081, "last_epoch": 2}, [1e4, 9368.2]
    )
    assert lib.e2e_figures(run_dir) == (
        {"metric": "test_accuracy", "value": 0.7081, "samples_per_second": 9368.2},
        None,
    )
    assert lib.e2e_detail(lib.e2e_figures(run_dir)[0]) == "test_accuracy 0.7081, 9,368 samples/s"
    kge = write_run(tmp_path / "b", {"val_mrr": 0.38, "test_mrr": 0.3745}, [])
    assert lib.e2e_figures(kge) == ({"metric": "test_mrr", "value": 0.3745}, None)
    figures, problem = lib.e2e_figures(write_run(tmp_path / "c", {"loss": 1.0}, [5.0]))
    assert problem is not None and "no accuracy or MRR" in problem and figures == {"samples_per_second": 5.0}
    assert lib.e2e_figures(tmp_path / "none")[1] == "no result.json in the run directory"
    (tmp_path / "c" / "result.json").write_text("{")
    assert "not JSON" in (lib.e2e_figures(tmp_path / "c")[1] or "")


def test_e2e_gpu_against_cpu() -> None:
    def run(value: float, rate: float) -> lib.Outcome:
        figures = {"metric": "test_accuracy", "value": value, "samples_per_second": rate}
        return lib.Outcome("e2e", lib.PASSED, "", 1, figures=figures)

    line = lib.e2e_comparison(run(0.705, 40_000), run(0.710, 38_000))
    assert (
        line == "test_accuracy GPU 0.7050 vs CPU 0.7100 (diff -0.0050, within 0.01); samples/s GPU/CPU 1.05x"
    )
    assert "NOT within" in (lib.e2e_comparison(run(0.69, 1), run(0.71, 1)) or "")
    assert lib.e2e_comparison(run(0.7, 1), lib.skipped("e2e", "budget")) is None


# --- bench/cuda_calls.py --------------------------------------------------------------------------------


def test_cuda_calls_counts_runtime_and_driver_names_per_step() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import cuda_calls
    finally:
        sys.path.remove(str(ROOT / "bench"))
    names = ["cudaLaunchKernel"] * 38 + ["cudaLaunchKernel_ptsz"] * 2 + ["cuLaunchKernelEx"] * 4
    names += ["cudaStreamSynchronize"] * 20
    names += ["aten::index_add_", "cudaMalloc", "cudnn", "cuda_thing", "custom_op"]
    counts = cuda_calls.api_names(names)
    assert "aten::index_add_" not in counts and "custom_op" not in counts and counts["cuLaunchKernelEx"] == 4
    per = cuda_calls.per_step(counts, 20)
    assert per["cudaLaunchKernel"] == 2.2 and per["cudaStreamSynchronize"] == 1 and per["cudaMalloc"] == 0.05
    doc = {"tool": cuda_calls.TOOL, "per_step": {"adam": per}}
    assert (
        lib.calls_detail(doc) == "torch.profiler (CUPTI), per step: adam 2.2 launches, 1.0 syncs, 0.1 mallocs"
    )


def test_cuda_calls_runs_its_profile_on_the_cpu_core(tmp_path: Path) -> None:
    """Here no CUDA call is made (every count 0); the profiler's API is used as on the GPU."""
    out = tmp_path / "calls.json"
    args = ["--device", "cpu", "--rows", "1000", "--batch", "64", "--steps", "2", "--kinds", "sgd", "adam"]
    done = subprocess.run(
        [sys.executable, "bench/cuda_calls.py", *args, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["tool"] == "torch.profiler (CUPTI)" and set(doc["per_step"]) == {"sgd", "adam"}
    assert all(v == 0 for v in doc["per_step"]["adam"].values())
    assert "| adam | 0.00 |" in done.stdout
