"""One partition pipeline (launch/partition_step.py) for the operator's partition Job (`graphtrain
partition --spec ... --report-file ...`) and the local run (`graphtrain run`): the same checks in the same
order, the same messages (issue 32, item 2). Before, only the Job refused a graph too big for
partition.memoryLimit before loading it; the local run loaded it and was stopped by another check, with
another message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from graphtrain.contract.spec import API_VERSION, load_yaml
from graphtrain.runtime.cli import app
from graphtrain.runtime.data import datasets
from graphtrain.runtime.errors import MemoryEstimateError
from graphtrain.runtime.launch import partition_step
from graphtrain.runtime.launch.local import LocalRun

GRAPHTRAIN = [sys.executable, "-m", "graphtrain.cli"]  # the `graphtrain` command, as a pod runs it
HUGE = 10**12  # nodes: about 175 TiB of estimate, and more than this machine could allocate


def write_spec(tmp_path: Path, graph: dict, partition: dict) -> Path:
    spec = tmp_path / "huge.yaml"
    doc = {
        "apiVersion": API_VERSION,
        "kind": "GraphTraining",
        "metadata": {"name": "huge"},
        "spec": {
            "graph": graph,
            "partition": {"parts": 2, **partition},
            "model": {"kind": "graphsage", "hiddenDim": 8},
            "training": {"epochs": 1, "fanouts": [2, 2]},
        },
    }
    spec.write_text(yaml.safe_dump(doc))
    return spec


def error_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.startswith("error: ")]


def test_the_partition_job_and_the_local_run_print_the_same_memory_refusal(tmp_path: Path) -> None:
    (tmp_path / "edges.tsv").write_text("0\t1\n1\t2\n2\t0\n")
    spec = write_spec(tmp_path, {"path": "edges.tsv", "numNodes": HUGE}, {"memoryLimit": "1Gi"})
    env = {**os.environ, "GRAPHTRAIN_QUIET": "1"}
    job = subprocess.run(
        [*GRAPHTRAIN, "partition", "--spec", str(spec), "--out", str(tmp_path / "part"), "--overwrite"]
        + ["--report-file", str(tmp_path / "termination-log")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    run = subprocess.run(
        [*GRAPHTRAIN, "run", str(spec), "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    print("partition Job:", *error_lines(job), sep="\n  ")
    print("graphtrain run:", *error_lines(run), sep="\n  ")
    assert (job.returncode, run.returncode) == (1, 1), job.stderr + run.stderr
    assert (
        error_lines(job)
        == error_lines(run)
        == [
            "error: partitioning a graph of 1,000,000,000,000 nodes needs about 174.6 TiB, above the memory "
            "limit of 1.0 GiB"
        ]
    ), job.stderr + run.stderr
    assert "Traceback" not in job.stderr + run.stderr
    assert not (tmp_path / "part").exists() and not (tmp_path / "termination-log").exists()
    assert not (tmp_path / "run").exists()  # a run refused before it started leaves no directory


def test_the_memory_refusal_comes_before_the_graph_is_loaded(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "edges.tsv").write_text("0\t1\n")
    spec = write_spec(tmp_path, {"path": "edges.tsv", "numNodes": HUGE}, {"memoryLimit": "1Gi"})

    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the graph was loaded before the memory refusal")

    monkeypatch.setattr(datasets, "load_source", never)
    work = partition_step.from_spec(load_yaml(spec.read_text()), tmp_path)
    with pytest.raises(MemoryEstimateError, match="above the memory limit of 1.0 GiB"):
        partition_step.partition(work, tmp_path / "out", overwrite=False, data_dir=None, warn=print)


def test_both_paths_word_the_data_warnings_alike(tmp_path: Path) -> None:
    """A one-direction edge list for GraphSAGE (no reverseEdges) is named by the Job and the run alike."""
    n = 60
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "one_way.npz",
        src=rng.integers(0, n, 240),
        dst=rng.integers(0, n, 240),
        num_nodes=np.int64(n),
        feat=rng.normal(size=(n, 4)).astype(np.float32),
        label=np.arange(n) % 2,
    )
    spec = write_spec(tmp_path, {"path": "one_way.npz"}, {})
    job = CliRunner().invoke(app, ["partition", "--spec", str(spec), "--out", str(tmp_path / "part")])
    assert job.exit_code == 0, job.output
    job_warnings = [line for line in job.output.splitlines() if line.startswith("warning: ")]
    said: list[str] = []
    run = LocalRun(load_yaml(spec.read_text()), spec, tmp_path / "run", echo=False)
    run.say = said.append  # type: ignore[method-assign]
    (tmp_path / "run").mkdir()
    run.partition()
    run_warnings = [line.removeprefix("[run] ") for line in said if line.startswith("[run] warning: ")]
    assert job_warnings and job_warnings == run_warnings, (job.output, said)
    assert any("reverseEdges: true" in line for line in job_warnings)
