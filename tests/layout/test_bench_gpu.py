"""bench/gpu.py, the B1 bench a GPU lease runs in one budgeted command: its arguments are refused in one
line before the graph is drawn (minutes at --scale 1), a failed run loses no other figure, and a call
partitions the graph once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch
import yaml

from graphtrain.runtime.launch import partition_step

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import ceiling  # noqa: E402
import gpu  # noqa: E402
import products_like  # noqa: E402


def args(**given: object) -> argparse.Namespace:
    defaults = {"device": "cuda", "scale": 0.25, "variants": "features", "steps": 30, "epochs": 3}
    return argparse.Namespace(**{**defaults, **given})


@pytest.mark.parametrize(
    ("given", "gpus", "said"),
    [
        ({"steps": 0}, 1, "--steps and --epochs must be >= 1, got 0 and 3"),
        ({"epochs": -1}, 1, "--steps and --epochs must be >= 1, got 30 and -1"),
        ({"device": "cuda"}, 0, "--device cuda: no such GPU here (torch sees 0)"),
        ({"device": "cuda:1"}, 1, "--device cuda:1: no such GPU here (torch sees 1)"),
        ({"device": "gpu"}, 1, "--device must be cpu or cuda[:N], got 'gpu'"),
        ({"device": "meta"}, 1, "--device must be cpu or cuda[:N], got 'meta'"),
        ({"scale": 0}, 1, "--scale must be in (0, 1], got 0"),
        ({"variants": ","}, 1, "--variants: none given (known: features, table)"),
        ({"variants": "features,tables"}, 1, "--variants: unknown tables (known: features, table)"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_option(given: dict, gpus: int, said: str) -> None:
    assert gpu.arg_problem(args(**given), gpus) == said


@pytest.mark.parametrize(("device", "gpus"), [("cuda", 1), ("cuda:0", 1), ("cpu", 0)])
def test_good_arguments_pass(device: str, gpus: int) -> None:
    assert gpu.arg_problem(args(device=device), gpus) is None


def test_a_bad_option_exits_before_the_graph_is_drawn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--steps 0 ended in a ZeroDivisionError after the graph and three runs; --device cuda on a machine
    without a GPU in torch's AssertionError after the graph."""
    drawn: list[float] = []
    monkeypatch.setattr(gpu.products_like, "ensure", lambda out, scale, seed: drawn.append(scale))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["gpu.py", "--device", "cuda", "--scale", "0.01", "--cache", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        gpu.main()
    assert str(exc.value) == "bench/gpu.py: --device cuda: no such GPU here (torch sees 0)"
    assert drawn == []


def test_a_failed_run_keeps_the_figures_of_the_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The all-CPU baseline comes last in a GPU lease's bench: when it failed, the GPU's ceiling and whole
    rate measured before it were lost with a traceback. Each figure is printed as it is measured, the
    table shows what was, and the exit status says that a run failed."""
    npz = tmp_path / "products-like.npz"
    monkeypatch.setattr(gpu.products_like, "ensure", lambda out, scale, seed: npz)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "a GPU")
    monkeypatch.setattr(gpu, "model_ceiling", lambda doc, work, device, steps: 20_000.0)

    def run(doc: dict, work: Path, standalone: bool, measure: bool = False) -> dict:
        if doc["spec"]["trainers"]["device"] == "cpu":
            raise RuntimeError("products-like-features-cpu-standalone: too few progress reports to time\nlog")
        return {"samples_per_second": 10_000.0}

    monkeypatch.setattr(gpu, "graphtrain_run", run)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--device", "cuda", "--variants", "features"])
    with pytest.raises(SystemExit) as exc:
        gpu.main()
    assert str(exc.value) == "bench/gpu.py: a run failed (its FAILED line above)"
    out = capsys.readouterr().out
    assert "[bench] features: ceiling seeds/s 20,000" in out
    assert "[bench] features: whole seeds/s 10,000" in out
    assert "[bench] features: all-CPU seeds/s FAILED: products-like-features-cpu-standalone: too few" in out
    assert "| features | 20,000 | 10,000 | 50% | - | -x | - | - |" in out


def test_every_run_of_a_call_shares_one_run_directory() -> None:
    """graphtrain run reuses a run directory's partition for the same graph and partition settings: with
    one directory per variant and device, a call at --scale 0.25 partitioned the graph three times per
    variant (90 s of CPU each on the build VM), more than gpu-accept's 300 s step holds."""
    npz = Path("/g.npz")
    names = {
        gpu.b1_spec(npz, d, v, e, m)["metadata"]["name"]
        for d in ("cpu", "cuda")
        for v in gpu.VARIANTS
        for e in (1, gpu.TIMED_EPOCHS)
        for m in ("none", "bfloat16")
    }
    assert names == {gpu.RUN_NAME}


def test_the_ceiling_reads_a_partition_made_already(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    npz = products_like.ensure(tmp_path / "cache", 0.004, 0)
    spec = tmp_path / "b1.yaml"
    spec.write_text(yaml.safe_dump(gpu.b1_spec(npz, "cpu", "features", 1)))
    cpu = torch.device("cpu")
    _, _, first = ceiling.sampled_batches(spec, tmp_path / "made", 2, cpu)

    def partition(*args: object, **kwargs: object) -> None:
        raise AssertionError("partitioned again")

    monkeypatch.setattr(partition_step, "partition", partition)
    _, _, again = ceiling.sampled_batches(spec, tmp_path / "work", 2, cpu, tmp_path / "made" / "partition")
    assert [list(mb.seeds) for mb in again] == [list(mb.seeds) for mb in first]
    with pytest.raises(AssertionError, match="partitioned again"):  # none there: it partitions
        ceiling.sampled_batches(spec, tmp_path / "work", 2, cpu, tmp_path / "none")


@pytest.mark.parametrize("variant", gpu.VARIANTS)
@pytest.mark.parametrize("mixed", ["none", "bfloat16"])
def test_a_captured_b1_spec_is_one_the_spec_admits(variant: str, mixed: str, tmp_path: Path) -> None:
    """--cuda-graph: B1's runs on a GPU with training.cudaGraph, the table then collective (the spec's
    cuda-graph rule would refuse a server table at admission, after the graph was drawn)."""
    from graphtrain.contract.spec import check

    doc = gpu.b1_spec(tmp_path / "g.npz", "cuda", variant, 1, mixed, graph=True)
    assert check(doc)[1] == []
    assert doc["spec"]["training"]["cudaGraph"] is True
    assert all(t["sharding"] == "collective" for t in doc["spec"].get("embeddings") or [])
    assert "cudaGraph" not in gpu.b1_spec(tmp_path / "g.npz", "cpu", variant, 1, mixed)["spec"]["training"]
