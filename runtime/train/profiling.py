"""training.profileSteps: a window of training steps profiled with torch.profiler on each trainer.

Why: the GPU runs' question is where a step's milliseconds go. The stage line says which stage; this says
what inside it: the ops that cost the host (launches, Python) or the device (kernels, copies), how busy the
device was, and how often the host waited for it. CUPTI sees the statically linked CUDA core's calls too,
so its launches and synchronisations count (bench/cuda_calls.py counts them per optimizer step the same way).

The window opens after a few warm-up steps of the first epoch this process trains (allocator, first
launches; a run resumed at an epoch's end: the next epoch), so a steady step is measured, and closes after
`steps` steps, at that epoch's end or before a checkpoint, whichever comes first: evaluation and
checkpoints are not in it. The device is synchronised at both ends only. The profiler's own time (its
start, stop, summary and trace) is not in the epoch's samples/s (take_overhead); the profiled steps are,
a little slower than the rest. The summary goes to the trainer log and, where the trainer has a run
directory, to profile-rank<R>.txt with a Chrome trace beside it (profile-rank<R>.json, for
chrome://tracing or Perfetto).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from graphtrain.runtime.data.cache import atomic_file
from graphtrain.runtime.errors import GraphtrainError

WARMUP = 10  # steps of the epoch before the window, where the epoch has them to spare
TOP = 15  # rows of each op table
NAME = 60  # characters of an op's name in them

# CUDA API calls, by column: each counts the runtime and driver API names that start with one of its
# prefixes (so cudaLaunchKernelExC, the per-thread-stream _ptsz variants and cuLaunchKernel count as launches)
COLUMNS = {
    "cudaLaunchKernel": ("cudaLaunchKernel", "cuLaunchKernel"),
    "cudaStreamSynchronize": ("cudaStreamSynchronize", "cuStreamSynchronize"),
    "cudaDeviceSynchronize": ("cudaDeviceSynchronize", "cuCtxSynchronize"),
    "cudaEventSynchronize": ("cudaEventSynchronize", "cuEventSynchronize"),
    "cudaMalloc": ("cudaMalloc", "cuMemAlloc"),
    "cudaFree": ("cudaFree", "cuMemFree"),
    "cudaMemcpyAsync": ("cudaMemcpy", "cuMemcpy"),
    "cudaMemsetAsync": ("cudaMemset", "cuMemset"),
}


def api_names(names: Iterable[str]) -> Counter[str]:
    """How often each CUDA runtime or driver API name occurs among profiler event names."""
    return Counter(n for n in names if n.startswith("cuda") or (n.startswith("cu") and n[2:3].isupper()))


def per_step(counts: Counter[str], steps: int) -> dict[str, float]:
    """The columns' counts per step."""
    return {col: sum(c for n, c in counts.items() if n.startswith(p)) / steps for col, p in COLUMNS.items()}


def window(steps_per_epoch: int, done: int, steps: int) -> tuple[int, int]:
    """The profiled steps of an epoch of `steps_per_epoch` whose first `done` are behind it (a resumed
    run): (first, count), by their index in the epoch. Up to WARMUP steps go first where the epoch has
    room for them and the window; count is 0 when nothing is left to profile."""
    left = max(0, steps_per_epoch - done)
    count = min(steps, left)
    first = done + max(0, min(WARMUP, left - count))
    return first, count


# the host's waits for the device, by CUDA API name (the synchronisation columns of COLUMNS)
WAITS = (
    "cudaStreamSynchronize",
    "cuStreamSynchronize",
    "cudaDeviceSynchronize",
    "cuCtxSynchronize",
    "cudaEventSynchronize",
    "cuEventSynchronize",
)
# a Python frame's event, as the profiler names it with_stack: "runtime/train/kge.py(221): step"
FRAME = re.compile(r"^(?P<path>.+\.py)\((?P<line>\d+)\): (?P<func>.+)$")


def wait_sites(events: Iterable[Any], waits: Callable[[str], bool]) -> Counter[str]:
    """Where the host waited: for each event whose name `waits` picks, the innermost Python frame above it
    that is not torch's (an event's cpu_parent chain holds the frames when profiled with_stack), as
    `runtime/...py:LINE func`; "?" when none is. The next lease's question of a step with 7 waits is which
    lines they are."""
    sites: Counter[str] = Counter()
    for event in events:
        if not waits(event.name):
            continue
        site, parent = "?", getattr(event, "cpu_parent", None)
        while parent is not None:
            frame = FRAME.match(parent.name)
            if frame and "torch/" not in frame["path"] and not frame["path"].endswith("profiling.py"):
                path = frame["path"]
                path = path[path.index("runtime/") :] if "runtime/" in path else path
                site = f"{path}:{frame['line']} {frame['func']}"
                break
            parent = getattr(parent, "cpu_parent", None)
        sites[site] += 1
    return sites


def device_busy_us(averages: Any) -> float:
    """Microseconds the device spent in kernels, copies and sets (its own events' self time)."""
    return sum(
        float(getattr(e, "self_device_time_total", 0.0))
        for e in averages
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
    )


def summary(
    averages: Any,
    counts: Counter[str],
    steps: int,
    wall_s: float,
    where: str,
    cuda: bool,
    waited: Counter[str] | None = None,
) -> str:
    """The profile's text: the step's wall time and device time, CUDA API calls per step, and the ops
    that cost the most host time (and, on a GPU, device time)."""
    wall_ms = 1e3 * wall_s / steps
    lines = [f"profile of {steps} training steps {where}: {wall_ms:.2f} ms per step (wall)"]
    in_ops = sum(float(e.self_cpu_time_total) for e in averages) / 1e3 / steps
    lines.append(
        f"host time inside torch ops {in_ops:.2f} ms per step, every thread (the rest: Python, "
        "native calls outside torch, waits)"
    )
    if cuda:
        busy_ms = device_busy_us(averages) / 1e3 / steps
        share = busy_ms / wall_ms if wall_ms > 0 else 0.0
        lines.append(f"device busy {busy_ms:.2f} ms per step ({share:.0%} of the wall time)")
        calls = per_step(counts, steps)
        lines.append("CUDA API calls per step: " + ", ".join(f"{k} {v:.1f}" for k, v in calls.items()))
        if waited:
            lines.append(
                "the host's waits by line, per step: "
                + "; ".join(f"{site} {n / steps:.1f}" for site, n in waited.most_common(TOP))
            )
        lines += ["", "ops by device time:"]
        lines.append(_ops(averages, "self_device_time_total"))
    lines += ["", "ops by host time:"]
    lines.append(_ops(averages, "self_cpu_time_total"))
    return "\n".join(lines)


def _ops(averages: Any, key: str) -> str:
    return str(averages.table(sort_by=key, row_limit=TOP, max_name_column_width=NAME))


class StepProfiler:
    """Opens the window at its first step, closes it after its last (or at the epoch's end) and writes the
    summary. The loop calls before_step(index) before waiting for each batch, after_step(index) after each
    step, and epoch_end() after each epoch's last step; a profiler of 0 steps does nothing."""

    def __init__(self, steps: int, device: torch.device, rank: int, run_dir: Path | None, log: Any):
        self.steps, self.device, self.rank, self.run_dir, self.log = steps, device, rank, run_dir, log
        self.cuda = device.type == "cuda"
        self.planned: tuple[int, int] | None = None  # (first, count) in the first epoch trained
        self.prof: Any = None
        self.began = 0.0
        self.taken = 0
        self.finished = steps <= 0
        self.cut_short = False  # ended by a checkpoint before its last step
        self.overhead = 0.0  # seconds the profiler took for itself (start, stop, summary, trace), untaken

    def plan(self, steps_per_epoch: int, done: int) -> None:
        """The window in the first epoch this process trains (a resumed one has `done` steps behind it)."""
        if self.finished or self.planned is not None:
            return
        first, count = window(steps_per_epoch, done, self.steps)
        if count:  # else resumed at this epoch's end: the next epoch's window
            self.planned = (first, count)

    def before_step(self, index: int) -> None:
        if self.finished or self.prof is not None or self.planned is None or index != self.planned[0]:
            return
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._sync()  # the steps before it: training's time
        started = time.perf_counter()
        self.prof = profile(activities=activities, with_stack=self.cuda)  # a GPU's waits by line
        self.prof.__enter__()
        self.began = time.perf_counter()
        self.overhead += self.began - started

    def take_overhead(self) -> float:
        """The profiler's own seconds since the last call, which the epoch's training rate leaves out (on
        a GPU its start and trace export took ~5 s: a one-epoch run's rate was mostly the profiler's)."""
        taken, self.overhead = self.overhead, 0.0
        return taken

    def after_step(self, index: int) -> None:
        if self.prof is None:
            return
        self.taken += 1
        if self.planned is not None and self.taken >= self.planned[1]:
            self._close()

    def epoch_end(self) -> None:
        if self.prof is not None:
            self._close()
        self.finished = self.finished or self.planned is not None

    def cut(self) -> None:
        """A checkpoint comes next: the window ends before its pause (a step's time, not a checkpoint's)."""
        if self.prof is not None:
            self.cut_short = True
            self._close()

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _close(self) -> None:
        self._sync()
        ended = time.perf_counter()
        try:
            self._summarise(ended - self.began)
        finally:
            self.overhead += time.perf_counter() - ended

    def _summarise(self, wall: float) -> None:
        prof, self.prof = self.prof, None
        prof.__exit__(None, None, None)
        self.finished = True
        if not self.taken:
            return
        averages = prof.key_averages()
        events = prof.events()
        counts = api_names(e.name for e in events)
        waited = wait_sites(events, lambda name: name.startswith(WAITS)) if self.cuda else None
        where = f"of trainer {self.rank} on {self.device}"
        if self.cut_short and self.planned is not None:
            where += f" (of {self.planned[1]} asked: a checkpoint came next)"
        text = summary(averages, counts, self.taken, wall, where, self.cuda, waited)
        self.log(text)
        if self.run_dir is None:
            return
        try:  # a profile that cannot be kept is said, not a reason to stop training
            self._write(prof, text)
        except (OSError, RuntimeError, GraphtrainError) as exc:
            self.log(f"[trainer] the profile was not written to {self.run_dir}: {exc}")

    def _write(self, prof: Any, text: str) -> None:
        """profile-rank<R>.txt and .json, each written under a name of its own and renamed into place
        (never through a link planted at the final name)."""
        assert self.run_dir is not None
        name = f"profile-rank{self.rank}"
        with atomic_file(self.run_dir / f"{name}.txt") as f:
            f.write((text + "\n").encode())
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".json", dir=self.run_dir)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            os.replace(tmp, self.run_dir / f"{name}.json")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
