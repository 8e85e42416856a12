"""What scripts/gpu-check decides, apart from the script so that the default suite tests it without a GPU:
running a step (streamed, logged, under a timeout that kills its process group), a sanitizer's verdict,
the time plan of `--budget`, the summary, and the end-to-end step's spec and result.

Standard library only (PyYAML imported where a spec is rewritten): the script runs under whatever python3
the GPU machine has, before anything proves that the project's dependencies are there.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

PASSED, FAILED, TIMEOUT, SKIPPED = "PASSED", "FAILED", "TIMEOUT", "SKIPPED"
KEPT_LINES = 20_000  # of a step's output, for its verdict (the whole output is in its log)
KILL_GRACE_S = 5.0  # from SIGTERM to SIGKILL of a timed-out step's process group
UNBUDGETED_S = 3600.0  # a step's timeout without --budget


@dataclass
class Outcome:
    """One step's line in the summary (and in summary.json)."""

    name: str
    status: str
    detail: str = ""
    seconds: float = 0.0
    timeout: float | None = None
    log: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    optional: bool = False

    @property
    def ok(self) -> bool:
        return self.status == PASSED

    @property
    def counts(self) -> bool:
        """Whether the check's result depends on it: an optional step skipped for its budget does not."""
        return not (self.optional and self.status == SKIPPED and "budget" in self.detail)


@dataclass
class Ran:
    """A finished (or killed) command: its exit code (None when killed at its timeout) and its output."""

    code: int | None
    out: str
    seconds: float
    timed_out: bool = False
    timeout: float | None = None

    def timeout_detail(self) -> str:
        return f"TIMEOUT after {self.timeout:.0f}s"


def _echo(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def kill_group(proc: subprocess.Popen, grace: float = KILL_GRACE_S) -> None:
    """SIGTERM, then SIGKILL, to the process group the step was started in (ours alone: the step was made
    a session leader), so a sanitizer's or a launcher's children go with it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_streamed(
    cmd: Sequence[str],
    *,
    cwd: Path,
    log_path: Path,
    timeout: float,
    env: dict[str, str] | None = None,
    echo: Callable[[str], None] = _echo,
    label: str | None = None,
) -> Ran:
    """Run `cmd`, teeing each line to `echo` and to `log_path` as it comes (a runner killed at its limit
    still shows how far the step got); past `timeout` seconds its process group is killed and the result
    says TIMEOUT instead of raising. `label`: the command as shown (a `python -c` program is long)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    kept: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        echo("$ " + (label or " ".join(cmd)) + "\n")
        try:
            proc = subprocess.Popen(
                list(cmd),
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
        except OSError as exc:
            message = f"cannot start {cmd[0]}: {exc}\n"
            log.write(message)
            echo(message)
            return Ran(127, message, time.monotonic() - start)
        reader = threading.Thread(target=_tee, args=(proc.stdout, log, kept, echo), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BaseException:  # Ctrl-C or the runner's SIGTERM: the step's processes go first
            kill_group(proc, grace=1.0)
            raise
        reader.join(timeout=KILL_GRACE_S)  # a grandchild that left the group may hold the pipe: not forever
        seconds = time.monotonic() - start
        if timed_out:
            line = f"TIMEOUT after {timeout:.0f}s: process group killed\n"
            log.write(line)
            echo(line)
    out = "".join(kept)
    if timed_out:
        return Ran(None, out, seconds, timed_out=True, timeout=timeout)
    return Ran(proc.returncode, out, seconds, timeout=timeout)


def _tee(
    stream: IO[str] | None, log: IO[str], kept: collections.deque[str], echo: Callable[[str], None]
) -> None:
    if stream is None:
        return
    with contextlib.suppress(ValueError, OSError):  # the log closed under a reader that outlived its step
        for line in stream:
            kept.append(line)
            log.write(line)
            log.flush()
            echo(line)


# --- verdicts -------------------------------------------------------------------------------------------

ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
NO_TARGET = "Target application doesn't exist"
PYTEST_TOTALS = re.compile(r"(\d+ (passed|failed|errors?|skipped|deselected)|no tests ran).* in [\d.]+s")


def pytest_summary(out: str) -> str:
    """pytest's last totals line ("99 passed, 1 skipped in 15.2s"), or "no summary"."""
    last = [x for x in out.strip().splitlines() if PYTEST_TOTALS.search(x)]
    return last[-1].strip("= ") if last else "no summary"


def pytest_verdict(ran: Ran) -> tuple[str, str]:
    if ran.timed_out:
        return TIMEOUT, ran.timeout_detail() + f" ({pytest_summary(ran.out)})"
    summary = pytest_summary(ran.out)
    if ran.code == 0:
        return PASSED, summary
    return FAILED, f"{summary}, exit {ran.code}" + (" (no tests selected)" if ran.code == 5 else "")


def sanitizer_verdict(ran: Ran) -> tuple[str, str]:
    """Passed only on a summary of zero errors (racecheck: zero hazards) and exit 0: a sanitizer that
    never ran its target ("Target application doesn't exist") or printed no summary has checked nothing."""
    if ran.timed_out:
        return TIMEOUT, ran.timeout_detail()
    if NO_TARGET in ran.out:
        return FAILED, f"{NO_TARGET} (the sanitizer took an argument for the program), exit {ran.code}"
    errors = [int(n) for n in ERROR_SUMMARY.findall(ran.out)]
    races = [tuple(int(n) for n in found) for found in RACE_SUMMARY.findall(ran.out)]
    if not errors and not races:
        return FAILED, f"no ERROR SUMMARY in the output, exit {ran.code}"
    parts = [f"ERROR SUMMARY: {sum(errors)} errors"] if errors else []
    if races:
        hazards, errs, warns = (sum(r[i] for r in races) for i in range(3))
        parts.append(f"RACECHECK SUMMARY: {hazards} hazards ({errs} errors, {warns} warnings)")
    summary = "; ".join(parts)
    if any(errors) or any(any(r) for r in races):
        return FAILED, f"{summary}, exit {ran.code}"
    if ran.code != 0:
        tests = pytest_summary(ran.out)
        return FAILED, f"{summary}, but exit {ran.code} ({tests})"
    return PASSED, summary


# --- the time plan --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A step's time: what it usually takes (H100 measurements, with margin) and the most it may take
    under --budget. An optional step runs only where the steps after it keep their expected time."""

    name: str
    expected: float
    cap: float
    optional: bool = False


def step_timeout(step: Plan, remaining: float | None, later: Sequence[Plan]) -> float | None:
    """The step's timeout, or None: skip it, the budget cannot hold it. The later required steps' expected
    time is held back; a step whose own expected time no longer fits is skipped rather than started to be
    killed, and never given more than what is left."""
    if remaining is None:
        return UNBUDGETED_S
    reserve = sum(p.expected for p in later if not p.optional)
    if step.optional and remaining - reserve < step.expected:
        return None
    timeout = min(step.cap, max(remaining - reserve, step.expected), remaining)
    return timeout if timeout >= step.expected else None


class Clock:
    """The budget's clock: seconds left of --budget (None: no budget), from the script's start."""

    def __init__(self, budget: float | None, now: Callable[[], float] = time.monotonic) -> None:
        self.budget, self.now, self.start = budget, now, now()

    def remaining(self) -> float | None:
        return None if self.budget is None else max(0.0, self.budget - (self.now() - self.start))

    def elapsed(self) -> float:
        return self.now() - self.start


def calls_detail(doc: dict[str, Any]) -> str:
    """bench/cuda_calls.py's JSON in a line: launches and host synchronisations per step, per optimizer."""
    per = doc["per_step"]
    syncs = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
    parts = [
        f"{kind} {c['cudaLaunchKernel']:.1f} launches, {sum(c.get(k, 0.0) for k in syncs):.1f} syncs, "
        f"{c['cudaMalloc']:.1f} mallocs"
        for kind, c in per.items()
    ]
    return f"{doc['tool']}, per step: " + "; ".join(parts)


def skipped(name: str, why: str) -> Outcome:
    return Outcome(name, SKIPPED, f"SKIPPED ({why})")


# --- the summary ----------------------------------------------------------------------------------------


def exit_status(outcomes: Sequence[Outcome], failed: int = 1, passed: int = 0) -> int:
    """Passed only when every step passed: a skip (budget, no core, asked) is no pass, but for an optional
    step's skip for the budget (the CPU comparison run)."""
    return passed if outcomes and all(o.ok for o in outcomes if o.counts) else failed


def summary_table(outcomes: Sequence[Outcome]) -> str:
    rows = [("step", "result", "seconds", "detail")]
    rows += [(o.name, o.status, f"{o.seconds:.0f}", o.detail) for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def write_summary(path: Path, outcomes: Sequence[Outcome], meta: dict[str, Any]) -> None:
    """summary.json, rewritten after every step (atomically) so that a killed run leaves what it did."""
    doc = {**meta, "steps": [asdict(o) for o in outcomes], "result": _result_word(outcomes)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(path)


def _result_word(outcomes: Sequence[Outcome]) -> str:
    bad = [f"{o.name} ({o.status})" for o in outcomes if o.counts and not o.ok]
    if not outcomes or bad:
        return "FAILED: " + (", ".join(bad) or "no step ran")
    optional = [o.name for o in outcomes if not o.counts]
    return "every step passed" + (
        f" (optional, skipped for the budget: {', '.join(optional)})" if optional else ""
    )


def record_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """The steps as bench/RESULTS.md's bullet lines: "- step: detail (N s)", the status first but for a
    pass (a skip's or a timeout's detail already starts with its word)."""
    lines = []
    for o in outcomes:
        said = o.detail if o.ok or o.detail.startswith(o.status) else f"{o.status}: {o.detail}"
        lines.append(f"- {o.name}: {said}" + (f" ({o.seconds:.0f} s)" if o.seconds else ""))
    return lines


def result_line(outcomes: Sequence[Outcome]) -> str:
    return _result_word(outcomes)


# --- the end-to-end step --------------------------------------------------------------------------------

HEADLINES = ("test_accuracy", "test_mrr", "val_accuracy", "val_mrr")


def e2e_spec(text: str, device: str, epochs: int, trainers: str | None = None) -> str:
    """An example spec with its shard servers on `device` (its trainers on `trainers`, if given) and
    `epochs` epochs (its evaluation period held within them, so the run evaluates), as YAML."""
    import yaml  # the GPU image has PyYAML; the rest of this module needs only the standard library

    doc = yaml.safe_load(text)
    spec = doc["spec"]
    spec["shardServers"] = {**(spec.get("shardServers") or {}), "device": device}
    if trainers:
        spec["trainers"] = {**(spec.get("trainers") or {}), "device": trainers}
    training = spec.setdefault("training", {})
    training["epochs"] = epochs
    if training.get("evalEvery", 0) > epochs:
        training["evalEvery"] = epochs
    return yaml.safe_dump(doc, sort_keys=False)


def spec_dataset(text: str) -> str:
    import yaml

    return str(yaml.safe_load(text)["spec"]["graph"]["dataset"])


def e2e_figures(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    """What a finished run shows (its headline metric, samples/s of its last epoch) and what is wrong with
    it (None: a result with an accuracy or MRR)."""
    result_file = run_dir / "result.json"
    if not result_file.is_file():
        return {}, f"no {result_file.name} in the run directory"
    try:
        result = json.loads(result_file.read_text())
    except ValueError as exc:
        return {}, f"{result_file.name} is not JSON: {exc}"
    figures: dict[str, Any] = {}
    metric = next((k for k in HEADLINES if isinstance(result.get(k), int | float)), None)
    if metric is not None:
        figures["metric"], figures["value"] = metric, float(result[metric])
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, IndexError):
        history = json.loads((run_dir / "progress-history.json").read_text())
        rates = [float(h["samplesPerSecond"]) for h in history if h.get("samplesPerSecond")]
        if rates:
            figures["samples_per_second"] = rates[-1]
    if metric is None:
        return figures, f"no accuracy or MRR in {result_file.name} (keys: {', '.join(sorted(result))})"
    return figures, None


def e2e_detail(figures: dict[str, Any]) -> str:
    parts = []
    if "metric" in figures:
        parts.append(f"{figures['metric']} {figures['value']:.4f}")
    if figures.get("samples_per_second"):
        parts.append(f"{figures['samples_per_second']:,.0f} samples/s")
    return ", ".join(parts)


def e2e_comparison(gpu: Outcome, cpu: Outcome, tolerance: float = 0.01) -> str | None:
    """GPU against CPU shard servers, same spec (issue 29's acceptance: the metric within 0.01, samples/s
    at least equal); None where either did not produce its figures."""
    g, c = gpu.figures, cpu.figures
    if not (gpu.ok and cpu.ok and "value" in g and "value" in c):
        return None
    diff = g["value"] - c["value"]
    line = f"{g['metric']} GPU {g['value']:.4f} vs CPU {c['value']:.4f} (diff {diff:+.4f}, "
    line += "within" if abs(diff) <= tolerance else "NOT within"
    line += f" {tolerance})"
    if g.get("samples_per_second") and c.get("samples_per_second"):
        line += f"; samples/s GPU/CPU {g['samples_per_second'] / c['samples_per_second']:.2f}x"
    return line
