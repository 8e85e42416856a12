"""training.profileSteps: the step window a trainer profiles, and the profile a real training writes."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from graphtrain.contract.spec import GraphTraining
from graphtrain.runtime.train import profiling
from graphtrain.runtime.train.profiling import api_names, per_step, window
from tests.runtime.train.test_resume import one_thread, partitions, train  # noqa: F401 - fixtures


@pytest.mark.parametrize(
    ("per_epoch", "done", "steps", "want"),
    [
        (100, 0, 20, (10, 20)),  # warm-up steps first
        (25, 0, 20, (5, 20)),  # as many warm-up steps as the epoch leaves room for
        (13, 0, 20, (0, 13)),  # a short epoch: all of it
        (100, 95, 20, (95, 5)),  # resumed near its end: what is left
        (100, 100, 20, (100, 0)),  # nothing left
        (100, 0, 0, (10, 0)),  # not asked
    ],
)
def test_the_window_is_steady_steps_of_one_epoch(
    per_epoch: int, done: int, steps: int, want: tuple[int, int]
) -> None:
    assert window(per_epoch, done, steps) == want


def test_cuda_calls_are_counted_by_column() -> None:
    counts = api_names(
        [
            "cudaLaunchKernel",
            "cuLaunchKernelEx",
            "cudaStreamSynchronize",
            "cudaMemcpyAsync",
            "aten::add",
            "cudaLaunchKernel",
            "custom_op",
            "cuda_helper",
        ]
    )
    assert counts == Counter(
        {
            "cudaLaunchKernel": 2,
            "cuLaunchKernelEx": 1,
            "cudaStreamSynchronize": 1,
            "cudaMemcpyAsync": 1,
            "cuda_helper": 1,
        }
    )
    cols = per_step(counts, 2)
    assert cols["cudaLaunchKernel"] == 1.5 and cols["cudaStreamSynchronize"] == 0.5
    assert cols["cudaMemcpyAsync"] == 0.5 and cols["cudaMalloc"] == 0.0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["graphsage", "transe"])
def test_a_training_writes_the_profile_of_its_window(
    kind: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gt, partition = partitions[kind]
    gt = gt.model_copy(deep=True)
    gt.spec.training.profile_steps = 3
    monkeypatch.setattr(profiling, "WARMUP", 2)
    seen: list[int] = []
    original = profiling.StepProfiler.after_step

    def after_step(self: profiling.StepProfiler, index: int) -> None:
        if self.prof is not None:
            seen.append(index)
        original(self, index)

    monkeypatch.setattr(profiling.StepProfiler, "after_step", after_step)
    _, result = train(kind, gt, partition, tmp_path)
    assert result is not None
    assert seen == [2, 3, 4]  # three steps after two warm-up ones, once: not in the later epochs
    text = (tmp_path / "profile-rank0.txt").read_text()
    assert text.startswith("profile of 3 training steps of trainer 0 on cpu: ")
    assert "ops by host time:" in text and "Self CPU" in text
    assert "device busy" not in text  # nothing to say about a device on the CPU
    assert text.strip() in capsys.readouterr().err  # the trainer log has it too
    trace = json.loads((tmp_path / "profile-rank0.json").read_text())
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])


def test_a_profile_that_cannot_be_written_is_said_and_training_goes_on(tmp_path: Path) -> None:
    import torch

    blocked = tmp_path / "run"
    blocked.write_text("a file where the run directory should be")
    said: list[str] = []
    prof = profiling.StepProfiler(2, torch.device("cpu"), 0, blocked, said.append)
    prof.plan(steps_per_epoch=2, done=0)
    a = torch.randn(64, 64)
    for i in range(2):
        prof.before_step(i)
        a = torch.tanh(a @ a)
        prof.after_step(i)
    prof.epoch_end()
    assert said[0].startswith("profile of 2 training steps of trainer 0 on cpu")
    assert said[1].startswith(f"[trainer] the profile was not written to {blocked}: ")


def _profiler(run_dir: Path | None, steps: int, said: list[str]) -> profiling.StepProfiler:
    import torch

    return profiling.StepProfiler(steps, torch.device("cpu"), 0, run_dir, said.append)


def _steps(prof: profiling.StepProfiler, indices: range) -> None:
    import torch

    a = torch.randn(32, 32)
    for i in indices:
        prof.before_step(i)
        a = torch.tanh(a @ a)
        prof.after_step(i)


def test_a_run_resumed_at_an_epochs_end_profiles_the_next_epoch() -> None:
    said: list[str] = []
    prof = _profiler(None, 3, said)
    prof.plan(steps_per_epoch=20, done=20)  # the checkpoint was the epoch's last step
    prof.epoch_end()
    prof.plan(steps_per_epoch=20, done=0)
    _steps(prof, range(20))
    prof.epoch_end()
    assert len(said) == 1 and said[0].startswith("profile of 3 training steps of trainer 0 on cpu:")


def test_a_checkpoint_ends_the_window_before_its_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profiling, "WARMUP", 0)
    said: list[str] = []
    prof = _profiler(None, 5, said)
    prof.plan(steps_per_epoch=20, done=0)
    _steps(prof, range(2))
    prof.cut()  # the loop's checkpoint
    _steps(prof, range(2, 20))
    prof.epoch_end()
    assert len(said) == 1
    assert said[0].startswith(
        "profile of 2 training steps of trainer 0 on cpu (of 5 asked: a checkpoint came next)"
    )


def test_the_profilers_own_time_is_not_the_epochs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its trace export took ~5 s on an H200: a one-epoch run's samples/s was then mostly the profiler's."""
    from graphtrain.runtime.train.tally import Throughput

    slow = profiling.StepProfiler._write

    def slow_write(self: profiling.StepProfiler, prof: object, text: str) -> None:
        time.sleep(0.5)
        slow(self, prof, text)

    monkeypatch.setattr(profiling.StepProfiler, "_write", slow_write)
    monkeypatch.setattr(profiling, "WARMUP", 0)
    prof = _profiler(tmp_path, 2, [])
    prof.plan(steps_per_epoch=4, done=0)
    epoch = Throughput()
    _steps(prof, range(4))
    epoch.exclude(prof.take_overhead())
    epoch.add(4_000)
    epoch.stop()
    assert prof.take_overhead() == 0.0  # taken once
    assert (tmp_path / "profile-rank0.json").exists()
    assert epoch.excluded >= 0.5
    assert epoch.end is not None and epoch.end - epoch.start - epoch.excluded < 0.4


def test_a_throughput_leaves_out_what_it_is_told() -> None:
    from graphtrain.runtime.train.tally import Throughput

    window = Throughput()
    window.start, window.end = 100.0, 110.0
    window.add(1_000)
    assert window.rate() == pytest.approx(100.0)
    window.exclude(5.0)
    assert window.rate(world=2) == pytest.approx(400.0)


def test_the_profile_replaces_a_link_at_its_name_instead_of_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    for name in ("profile-rank0.txt", "profile-rank0.json"):
        (run / name).symlink_to(victim)
    said: list[str] = []
    prof = _profiler(run, 2, said)
    prof.plan(steps_per_epoch=2, done=0)
    _steps(prof, range(2))
    prof.epoch_end()
    assert victim.read_text() == "keep me"
    assert not (run / "profile-rank0.txt").is_symlink() and (
        run / "profile-rank0.txt"
    ).read_text().startswith("profile of 2")
    assert json.loads((run / "profile-rank0.json").read_text())["traceEvents"]
    assert sorted(p.name for p in run.iterdir()) == [
        "profile-rank0.json",
        "profile-rank0.txt",
    ]  # no leftovers


def _reads_back(x: object) -> float:
    return float(x.sum().item())  # type: ignore[attr-defined]


def test_the_host_waits_are_named_by_the_line_that_made_them() -> None:
    """On a GPU the waits are cudaStreamSynchronize under an .item(); here the same walk up the event
    tree from aten::_local_scalar_dense (what .item() runs) finds the line, through torch's frames."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            _reads_back(x)
    sites = profiling.wait_sites(prof.events(), lambda name: name == "aten::_local_scalar_dense")
    assert len(sites) == 1, sites
    ((site, count),) = sites.items()
    assert count == 3
    assert site.startswith("runtime/train/test_profile.py:") and site.endswith(" _reads_back"), site


def test_a_wait_with_no_python_frame_above_it_is_unplaced() -> None:
    class Event:
        def __init__(self, name: str, parent: object | None = None):
            self.name, self.cpu_parent = name, parent

    top = Event("torch/nn/modules/module.py(1): _call_impl")
    events = [Event("cudaStreamSynchronize", Event("aten::item", top)), Event("cudaLaunchKernel", top)]
    sites = profiling.wait_sites(events, lambda name: name.startswith(profiling.WAITS))
    assert sites == {"?": 1}

    class Averages(list):
        def table(self, **_: object) -> str:
            return ""

    waited = Counter({"a.py:3 f": 4})
    lines = profiling.summary(Averages(), Counter(), 2, 0.01, "of trainer 0 on cuda:0", True, waited)
    assert "the host's waits by line, per step: a.py:3 f 2.0" in lines
