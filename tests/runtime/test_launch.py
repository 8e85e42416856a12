"""`graphtrain run` end to end with real processes: shard servers and trainers on one machine.

A small planted-block graph (dense features, labels, masks) trains GraphSAGE with a learnable node
embedding on 2 shard servers x 2 trainers and in standalone mode; Nations trains TransE. A trainer or
a shard server killed mid-run either stops the run naming it, or (backoffLimit > 0) the run restarts
from its last checkpoint and finishes.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from graphtrain.runtime import spec as S
from graphtrain.runtime.launch.local import LocalRun, RunFailed
from tests.conftest import planted_graph


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> Path:
    g = planted_graph(n=2000, k=4, seed=3)
    rng = np.random.default_rng(0)
    # Dense features that carry the block a little: the model has something to learn from both inputs.
    feat = rng.standard_normal((g.num_nodes, 16)).astype(np.float32)
    feat[np.arange(g.num_nodes), g.label] += 1.0
    path = tmp_path_factory.mktemp("graph") / "planted.npz"
    np.savez(
        path,
        indptr=g.indptr,
        indices=g.indices,
        feat=feat,
        label=g.label,
        **{f"{k}_mask": v for k, v in g.masks.items()},
    )
    return path


def sage_spec(graph: Path, epochs: int = 3, backoff: int = 0, batch: int = 128) -> dict:
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "planted"},
        "spec": {
            "graph": {"path": str(graph)},
            "partition": {"parts": 2, "balance": ["nodes", "train"], "maxImbalance": 0.1},
            "embeddings": [
                {"name": "node", "dim": 8, "optimizer": {"kind": "adam", "lr": 0.01, "eps": 1e-8}}
            ],
            "model": {"hiddenDim": 32, "nodeEmbedding": "node", "dropout": 0.2},
            "training": {"epochs": epochs, "batchSize": batch, "fanouts": [5, 5], "denseLr": 0.01},
            "trainers": {"replicas": 2},
            "runPolicy": {"backoffLimit": backoff, "stallTimeoutSeconds": 120},
        },
    }


def launch(doc: dict, run_dir: Path, standalone: bool = False) -> LocalRun:
    spec_path = run_dir.parent / f"{run_dir.name}.yaml"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(yaml.safe_dump(doc))
    return LocalRun(S.load_yaml(spec_path.read_text()), spec_path, run_dir, standalone=standalone, echo=False)


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("standalone", [False, True], ids=["2x2", "standalone"])
def test_graphsage_trains_and_reports(graph_file: Path, tmp_path: Path, standalone: bool) -> None:
    run_dir = tmp_path / "run"
    result = launch(sage_spec(graph_file), run_dir, standalone).run()
    assert result["test_accuracy"] > 0.6, result  # 4 planted blocks: chance is 0.25
    st = status(run_dir)
    assert st["phase"] == "Succeeded"
    assert st["partition"]["parts"] == 2 and st["progress"]["epoch"] == 3
    assert {c["type"] for c in st["conditions"]} >= {"SpecValid", "PartitionReady", "Succeeded"}
    if not standalone:
        assert [s["state"] for s in st["shards"]] == ["Ready", "Ready"]
    assert (
        run_dir / "checkpoints" / "LATEST"
    ).read_text().strip() == "step-" + f"{st['progress']['step']:09d}"
    assert (run_dir / "token").stat().st_mode & 0o777 == 0o600
    for log in (run_dir / "logs").glob("*.log"):
        assert (run_dir / "token").read_text() not in log.read_text()  # no secret in any log


def run_and_kill(run: LocalRun, victim: str, after_checkpoint: bool) -> tuple[dict | None, Exception | None]:
    """Run in a thread; kill `victim` (trainer-1, shard-0) once training reports progress (and, if asked,
    once a checkpoint exists); return the run's result or its error."""
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = run.run()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 180
    latest = run.run_dir / "checkpoints" / "LATEST"
    while time.monotonic() < deadline:
        ready = (run.run_dir / "progress.json").exists() and (latest.exists() or not after_checkpoint)
        procs = {c.plan.name: c for c in [*run.trainers, *run.servers]}
        if ready and victim in procs and procs[victim].proc.poll() is None:
            procs[victim].proc.kill()
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"{victim} never ran")
    thread.join(timeout=240)
    assert not thread.is_alive(), "the run did not stop"
    return out.get("result"), out.get("error")


@pytest.mark.timeout(300)
def test_killed_trainer_stops_the_run_naming_it(graph_file: Path, tmp_path: Path) -> None:
    run = launch(sage_spec(graph_file, epochs=200, batch=32), tmp_path / "run")
    result, error = run_and_kill(run, "trainer-1", after_checkpoint=False)
    assert result is None and isinstance(error, RunFailed)
    assert "trainer-1" in str(error)
    st = status(run.run_dir)
    assert st["phase"] == "Failed"
    assert any(c["type"] == "Failed" and "trainer-1" in c["message"] for c in st["conditions"])
    assert all(c.proc.poll() is not None for c in [*run.trainers, *run.servers])  # nothing left running


@pytest.mark.timeout(400)
@pytest.mark.parametrize("victim", ["trainer-1", "shard-0"])
def test_restart_from_the_last_checkpoint(graph_file: Path, tmp_path: Path, victim: str) -> None:
    run = launch(sage_spec(graph_file, epochs=6, backoff=1), tmp_path / "run")
    result, error = run_and_kill(run, victim, after_checkpoint=True)
    assert error is None, error
    assert result is not None and result["test_accuracy"] > 0.6, result
    st = status(run.run_dir)
    assert st["phase"] == "Succeeded" and st["restarts"] == 1
    assert st["progress"]["epoch"] == 6
    if victim == "shard-0":
        assert st["shards"][0]["restarts"] == 1


@pytest.mark.timeout(300)
def test_transe_on_nations_standalone(tmp_path: Path) -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "nations-transe.yaml").read_text())
    doc["spec"]["training"].update(epochs=20, evalEvery=10)
    result = launch(doc, tmp_path / "run", standalone=True).run()
    # 14 entities: a random scorer's filtered MRR is about 0.25; TransE reaches about 0.4 in 20 epochs.
    assert result["test_mrr"] > 0.33, result
    assert result["test_triples"] == 201.0 and 0 <= result["test_hits@1"] <= result["test_hits@10"] <= 1


@pytest.mark.timeout(300)
def test_transe_reproduces_on_two_threads(tmp_path: Path) -> None:
    """Same seed, same result with 2 intra-op threads (an index backward with atomic adds made TransE
    differ from run to run)."""
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "nations-transe.yaml").read_text())
    doc["spec"]["training"].update(epochs=4, evalEvery=100, threads=2)
    first, second = (launch(doc, tmp_path / f"run{i}", standalone=True).run() for i in range(2))
    assert first == second


def processes_mentioning(text: str) -> list[int]:
    """Live pids whose command line mentions `text` (zombies excluded)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


@pytest.mark.timeout(300)
def test_sigterm_to_the_launcher_stops_every_process(graph_file: Path, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    spec_path = tmp_path / "planted.yaml"
    spec_path.write_text(yaml.safe_dump(sage_spec(graph_file, epochs=500, batch=32)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphtrain.runtime.cli", "run", str(spec_path), "--run-dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (run_dir / "progress.json").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        children = [p for p in processes_mentioning(str(run_dir)) if p != proc.pid]
        assert len(children) == 4, children  # 2 shard servers, 2 trainers
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    left = [p for p in processes_mentioning(str(run_dir)) if p != proc.pid]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after the launcher stopped: {left}"
    st = status(run_dir)
    assert st["phase"] == "Failed"
    assert any(c["type"] == "Failed" and "SIGTERM" in c["message"] for c in st["conditions"]), st[
        "conditions"
    ]
