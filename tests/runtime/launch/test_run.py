"""`graphtrain run` end to end with real processes: shard servers and trainers on one machine.

A small planted-block graph (dense features, labels, masks) trains GraphSAGE with a learnable node
embedding on 2 shard servers x 2 trainers and in standalone mode; Nations trains TransE. A trainer or
a shard server killed mid-run either stops the run naming it, or (backoffLimit > 0) the run restarts
from its last checkpoint and finishes. The launcher owns its run directory: its children die with it
even on SIGKILL, a second launcher is refused, a re-run never deletes checkpoints unasked, every file is
private to the user, and a damaged latest checkpoint is skipped (a failure's log and the deadline:
test_run_failures.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch.local import LocalRun, RunFailed
from tests.conftest import planted_graph


def planted_npz(path: Path) -> Path:
    """The planted-partition graph of these tests as an .npz at `path`: 2,000 nodes in 4 blocks."""
    g = planted_graph(n=2000, k=4, seed=3)
    rng = np.random.default_rng(0)
    # Dense features that carry the block a little: the model has something to learn from both inputs.
    feat = rng.standard_normal((g.num_nodes, 16)).astype(np.float32)
    feat[np.arange(g.num_nodes), g.label] += 1.0
    np.savez(
        path,
        indptr=g.indptr,
        indices=g.indices,
        feat=feat,
        label=g.label,
        **{f"{k}_mask": v for k, v in g.masks.items()},
    )
    return path


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> Path:
    return planted_npz(tmp_path_factory.mktemp("graph") / "planted.npz")


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


CLI = [sys.executable, "-m", "graphtrain.runtime.cli"]
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def write_spec(doc: dict, run_dir: Path) -> Path:
    spec_path = run_dir.parent / f"{run_dir.name}.yaml"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(yaml.safe_dump(doc))
    return spec_path


def launch(doc: dict, run_dir: Path, standalone: bool = False, **options: bool) -> LocalRun:
    spec_path = write_spec(doc, run_dir)
    return LocalRun(
        load_yaml(spec_path.read_text()), spec_path, run_dir, standalone=standalone, echo=False, **options
    )


def nations(epochs: int) -> dict:
    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-transe.yaml").read_text())
    doc["spec"]["training"].update(epochs=epochs, evalEvery=1000)
    return doc


def graphtrain_run(run_dir: Path, *args: str) -> list[str]:
    """The command line of `graphtrain run` for the spec `launch` or `write_spec` wrote beside run_dir."""
    spec_path = run_dir.parent / f"{run_dir.name}.yaml"
    return [*CLI, "run", str(spec_path), "--run-dir", str(run_dir), *args]


def start_launcher(doc: dict, run_dir: Path, *args: str) -> subprocess.Popen:
    """`graphtrain run` in the background, its output in <run_dir>.out (a file: nothing blocks on a pipe)."""
    write_spec(doc, run_dir)
    out = open(run_dir.parent / f"{run_dir.name}.out", "wb")  # noqa: SIM115 - closed when the child has it
    try:
        return subprocess.Popen(
            graphtrain_run(run_dir, *args), stdout=out, stderr=subprocess.STDOUT, env=ONE_THREAD
        )
    finally:
        out.close()


def complete(run_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`graphtrain run` to its end."""
    return subprocess.run(
        graphtrain_run(run_dir, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ONE_THREAD,
    )


def wait_for(ready, proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        assert proc.poll() is None, f"the launcher ended (code {proc.returncode}) before {what}"
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout:g} s")


def stop_launcher(proc: subprocess.Popen, children: list[psutil.Process]) -> None:
    """Whatever a test's outcome: the launcher, and the children recorded from it, end."""
    with contextlib.suppress(psutil.Error):
        children = [*children, *psutil.Process(proc.pid).children(recursive=True)]
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


class Finished:
    """A `sage_spec` run trained to its end (3 epochs), kept for the tests that only read it or a copy
    of it: its result and the umask around the launch."""

    def __init__(self, graph_file: Path, root: Path, standalone: bool, sampler: str) -> None:
        self.run_dir = root / "run"
        doc = sage_spec(graph_file)
        doc["spec"]["training"]["sampler"] = sampler
        self.mask_before = umask()
        self.result = launch(doc, self.run_dir, standalone).run()
        self.mask_after = umask()

    def copy(self, run_dir: Path) -> Path:
        """A copy of the finished run directory at `run_dir`, its spec beside it as `launch` writes it."""
        shutil.copytree(self.run_dir, run_dir, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))
        shutil.copy(self.run_dir.parent / "run.yaml", run_dir.parent / f"{run_dir.name}.yaml")
        return run_dir


@pytest.fixture(scope="module")
def finished(graph_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[bool, str], Finished]:
    """finished(standalone, sampler): the run of that mode, trained once per module and shared by
    test_graphsage_trains_and_reports (which reads it) and the tests that damage or re-run a copy of it
    (test_resume_skips_a_damaged_latest_checkpoint, test_a_rerun_without_resume_refuses_...)."""
    runs: dict[tuple[bool, str], Finished] = {}

    def get(standalone: bool, sampler: str) -> Finished:
        key = (standalone, sampler)
        if key not in runs:
            runs[key] = Finished(graph_file, tmp_path_factory.mktemp("finished"), standalone, sampler)
        return runs[key]

    return get


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("standalone", "sampler"),
    [(False, "auto"), (True, "auto"), (False, "device")],
    ids=["2x2", "standalone", "2x2-device-sampler"],
)
def test_graphsage_trains_and_reports(
    finished: Callable[[bool, str], Finished], standalone: bool, sampler: str
) -> None:
    """device: the trainers sample with tensor ops on their device (the host's here), the graph joined
    from the servers' shared memory (on a GPU: tests/gpu)."""
    done = finished(standalone, sampler)
    run_dir, result = done.run_dir, done.result
    assert done.mask_after == done.mask_before  # the launcher's own umask (0o077) ends with the launch
    assert result["test_accuracy"] > 0.6, result  # 4 planted blocks: chance is 0.25
    if sampler == "device":  # the features and labels beside the graph: batches gather there
        assert "node data on cpu: feat, label" in (run_dir / "logs" / "trainer-0.log").read_text()
    st = status(run_dir)
    assert st["phase"] == "Succeeded"
    assert st["partition"]["parts"] == 2 and st["progress"]["epoch"] == 3
    # the final report names the test metric (what status.progress shows through the operator)
    assert st["progress"]["evalMetric"] == "test_accuracy", st["progress"]
    assert st["progress"]["evalValue"] == pytest.approx(result["test_accuracy"])
    assert {c["type"] for c in st["conditions"]} >= {"SpecValid", "PartitionReady", "Succeeded"}
    if not standalone:
        assert [s["state"] for s in st["shards"]] == ["Stopped", "Stopped"]  # every server stopped at the end
        assert not list(run_dir.glob("shard-*.sock*"))  # nor their sockets (and lanes'): a live run's look
    assert (
        run_dir / "checkpoints" / "LATEST"
    ).read_text().strip() == "step-" + f"{st['progress']['step']:09d}"
    assert (run_dir / "token").stat().st_mode & 0o777 == 0o600
    for log in (run_dir / "logs").glob("*.log"):
        assert (run_dir / "token").read_text() not in log.read_text()  # no secret in any log
    # Private to the user: the run directory and all in it, checkpoints the servers and trainers wrote too.
    checkpoints = run_dir / "checkpoints"
    assert any(checkpoints.rglob("data.npy")) and any(checkpoints.rglob("trainer.json"))
    every = [run_dir, *run_dir.rglob("*")]
    shared = [f"{p} {p.lstat().st_mode & 0o777:o}" for p in every if p.lstat().st_mode & 0o077]
    assert not shared, shared


def run_in_thread(run: LocalRun) -> tuple[threading.Thread, dict]:
    """`run` started in a thread; its result lands in the dict under "result", its error under "error"."""
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = run.run()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def run_and_kill(
    run: LocalRun,
    victim: str,
    after_checkpoint: bool,
    at_once: bool = False,
    sig: signal.Signals = signal.SIGKILL,
    gone: list[float] | None = None,
) -> tuple[dict | None, Exception | None]:
    """Run in a thread; send `sig` to `victim` (trainer-1, shard-0) once training reports progress (and, if
    asked, once a checkpoint exists; or, at_once, as soon as it is started); return the run's result or its
    error. `gone` receives the seconds the victim took to exit."""
    thread, out = run_in_thread(run)
    deadline = time.monotonic() + 180
    latest = run.run_dir / "checkpoints" / "LATEST"
    while time.monotonic() < deadline:
        reporting = (run.run_dir / "progress.json").exists() and (latest.exists() or not after_checkpoint)
        ready = at_once or reporting
        procs = {c.plan.name: c for c in [*run.trainers, *run.servers]}
        if ready and victim in procs and procs[victim].proc.poll() is None:
            proc, sent = procs[victim].proc, time.monotonic()
            proc.send_signal(sig)
            while proc.poll() is None and time.monotonic() < sent + 30:
                time.sleep(0.02)
            if gone is not None:
                gone.append(time.monotonic() - sent)
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
    # the headline names the signal, not a raw return code (the log path after it may hold "-9")
    assert str(error).split(";")[0] == "trainer-1 was killed by SIGKILL"
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
    # the launch is over: its targets file lists nothing; what it lists for the processes as they ended
    # names the ones that came back, on their new ports
    assert json.loads((run.run_dir / "prometheus" / "targets.json").read_text()) == []
    doc = json.loads(run.write_targets().read_text())
    ports = {
        (t["labels"]["job"], t["labels"].get("shard", t["labels"].get("rank"))): t["targets"] for t in doc
    }
    for kind, children in (("shard", run.servers), ("trainer", run.trainers)):
        for i, c in enumerate(children):
            assert ports[(f"graphtrain-{kind}", str(i))] == [f"127.0.0.1:{c.metrics_port}"], (kind, i, doc)


@pytest.mark.timeout(400)
def test_a_trainer_stops_on_sigterm_within_3_s_and_resumes_from_its_checkpoint(
    graph_file: Path, tmp_path: Path
) -> None:
    """SIGTERM mid-epoch (after a checkpoint): the trainer is gone within 3 s, and the restarted one
    resumes from the newest complete checkpoint and finishes (roles/stop.py)."""
    run = launch(sage_spec(graph_file, epochs=6, backoff=1), tmp_path / "run")
    gone: list[float] = []
    result, error = run_and_kill(run, "trainer-1", after_checkpoint=True, sig=signal.SIGTERM, gone=gone)
    assert gone and gone[0] < 3.0, gone
    assert error is None, error
    assert result is not None and result["test_accuracy"] > 0.6, result
    st = status(run.run_dir)
    assert st["phase"] == "Succeeded" and st["restarts"] == 1 and st["progress"]["epoch"] == 6
    log = (run.run_dir / "logs" / "trainer-1.log").read_text()
    assert "[trainer 1] SIGTERM: stopping now" in log


@pytest.mark.timeout(300)
def test_transe_on_nations_standalone(tmp_path: Path) -> None:
    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-transe.yaml").read_text())
    doc["spec"]["training"].update(epochs=20, evalEvery=10)
    result = launch(doc, tmp_path / "run", standalone=True).run()
    # 14 entities: a random scorer's filtered MRR is about 0.25; TransE reaches about 0.4 in 20 epochs.
    assert result["test_mrr"] > 0.33, result
    assert result["test_triples"] == 201.0 and 0 <= result["test_hits@1"] <= result["test_hits@10"] <= 1


@pytest.mark.timeout(300)
def test_rotate_learns_nations_with_free_entities_and_unit_relations(tmp_path: Path) -> None:
    """examples/nations-rotate.yaml (standalone: its tables on the trainer's in-process shard servers,
    the same optimizer code a server runs) for 10 epochs: well above a random
    scorer's filtered MRR (~0.25); its entity rows are not put on the unit sphere as TransE's are
    (PyKEEN's RotatE keeps them free), and its relation rows are unit rotations (each complex number of
    modulus 1, as the shard servers' constraint keeps them after every step)."""
    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-rotate.yaml").read_text())
    doc["spec"]["training"].update(epochs=10, evalEvery=1000)
    run = launch(doc, tmp_path / "run", standalone=True)
    result = run.run()
    assert result["test_mrr"] > 0.45, result
    root = run.run_dir / "checkpoints"
    latest = root / (root / "LATEST").read_text().strip()
    rows = {name: ckpt.export_table(latest, name) for name in ("entity", "relation")}  # row order
    norms = np.linalg.norm(rows["entity"], axis=1)
    assert norms.shape == (14,) and np.ptp(norms) > 0.1, norms
    rel = rows["relation"]
    np.testing.assert_allclose(np.hypot(rel[:, :64], rel[:, 64:]), 1.0, rtol=1e-4)


@pytest.mark.timeout(300)
def test_transe_reproduces_on_two_threads(tmp_path: Path) -> None:
    """Same seed, same result with 2 intra-op threads (an index backward with atomic adds made TransE
    differ from run to run)."""
    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-transe.yaml").read_text())
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


@pytest.mark.timeout(400)
def test_kill_9_of_the_launcher_takes_every_child_and_resume_works(graph_file: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    doc = sage_spec(graph_file, epochs=5)
    proc = start_launcher(doc, run_dir)
    children: list[psutil.Process] = []
    try:
        wait_for((run_dir / "checkpoints" / "LATEST").exists, proc, "checkpoint")
        # every descendant: the zygote, the 2 shard servers and 2 trainers it forked (training), and
        # theirs (multiprocessing's resource trackers)
        children = psutil.Process(proc.pid).children(recursive=True)
        roles = [p for p in children if "-m graphtrain.runtime.cli " in " ".join(p.cmdline())]
        assert len(roles) == 4, children
        proc.kill()
        proc.wait(timeout=10)
        killed = time.monotonic()
        _, alive = psutil.wait_procs(children, timeout=5)
        print(f"children gone {time.monotonic() - killed:.2f} s after kill -9 of the launcher")
    finally:
        stop_launcher(proc, children)
    assert not alive, f"still running 5 s after kill -9 of the launcher: {alive}"
    assert status(run_dir)["phase"] == "Training"  # the killed launcher could not write a final status

    done = complete(run_dir, "--resume")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the previous launch ended without a final status (killed?)" in done.stderr  # [run] lines
    st = status(run_dir)
    assert st["phase"] == "Succeeded" and st["progress"]["epoch"] == 5


class Training:
    """A `graphtrain run` of a 2x2 sage_spec that trains for minutes (500 epochs), started in the
    background once per module and shared by the tests that only need a launcher in the middle of a
    training: test_a_second_launcher_on_the_same_run_directory_is_refused, which leaves it running, then
    test_sigterm_to_the_launcher_stops_every_process, which ends it. A test that finds it ended (run
    alone, or in another order) gets a new one."""

    def __init__(self, graph_file: Path, root: Path) -> None:
        self.graph_file, self.root = graph_file, root
        self.proc: subprocess.Popen | None = None
        self.children: list[psutil.Process] = []
        self.started = 0

    def live(self) -> tuple[subprocess.Popen, Path]:
        """The launcher, training (its progress.json written), and its run directory."""
        if self.proc is None or self.proc.poll() is not None:
            self.started += 1
            self.run_dir = self.root / f"run{self.started}"
            self.proc = start_launcher(sage_spec(self.graph_file, epochs=500, batch=32), self.run_dir)
            self.children = []
            wait_for((self.run_dir / "progress.json").exists, self.proc, "training")
            self.children = psutil.Process(self.proc.pid).children(recursive=True)
        return self.proc, self.run_dir

    def output(self) -> str:
        return (self.root / f"run{self.started}.out").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            stop_launcher(self.proc, self.children)


@pytest.fixture(scope="module")
def training(graph_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Training]:
    shared = Training(graph_file, tmp_path_factory.mktemp("training"))
    try:
        yield shared
    finally:
        shared.stop()


@pytest.mark.timeout(300)
def test_a_second_launcher_on_the_same_run_directory_is_refused(training: Training) -> None:
    first, run_dir = training.live()
    children = training.children
    token = (run_dir / "token").read_text()
    second = complete(run_dir, "--resume", timeout=60)
    assert first.poll() is None and all(c.is_running() for c in children)  # the first run goes on
    assert (run_dir / "token").read_text() == token
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and str(run_dir) in lines[0] and f"pid {first.pid}" in lines[0], second.stderr


@pytest.mark.timeout(300)
def test_sigterm_to_the_launcher_stops_every_process(training: Training) -> None:
    """SIGTERM to a `graphtrain run` in the middle of its training (the shared one, which a second
    launcher may have been refused on first: a refused launcher leaves nothing of its own running)."""
    proc, run_dir = training.live()
    children = [p for p in processes_mentioning(str(run_dir)) if p != proc.pid]
    assert len(children) == 4, children  # 2 shard servers, 2 trainers
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(training.output()[-3000:]) from None
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


@pytest.mark.timeout(300)
def test_a_rerun_without_resume_refuses_and_keeps_the_checkpoints(
    finished: Callable[[bool, str], Finished], graph_file: Path, tmp_path: Path
) -> None:
    """On a copy of the shared standalone run (finished, its checkpoints in place)."""
    run_dir = finished(True, "auto").copy(tmp_path / "run")
    kept = tree_hashes(run_dir / "checkpoints")
    latest = (run_dir / "checkpoints" / "LATEST").read_text().strip()
    ended = (run_dir / "status.json").read_bytes()

    refused = complete(run_dir, "--standalone")
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and str(run_dir) in lines[0] and latest in lines[0], lines
    assert "--resume" in lines[0] and "--overwrite" in lines[0]
    assert tree_hashes(run_dir / "checkpoints") == kept
    assert (run_dir / "status.json").read_bytes() == ended

    # asked for, with an input that cannot be read: refused, and the checkpoints are still there
    bad = tmp_path / "broken.npz"
    bad.write_bytes(b"not an npz")
    with pytest.raises(GraphtrainError):
        launch(sage_spec(bad, epochs=1), run_dir, standalone=True, overwrite=True).run()
    assert tree_hashes(run_dir / "checkpoints") == kept

    # asked for: starts over
    launch(sage_spec(graph_file, epochs=1), run_dir, standalone=True, overwrite=True).run()
    assert (run_dir / "checkpoints" / "LATEST").read_text().strip() != latest
    assert status(run_dir)["progress"]["epoch"] == 1


@pytest.mark.timeout(400)
def test_resume_skips_a_damaged_latest_checkpoint(
    finished: Callable[[bool, str], Finished], graph_file: Path, tmp_path: Path
) -> None:
    """A copy of the shared 2x2 run (3 epochs, its checkpoints at epochs 2 and 3) with its latest
    checkpoint damaged resumes from the one before, to a 4th epoch."""
    run_dir = finished(False, "auto").copy(tmp_path / "run")
    root = run_dir / "checkpoints"
    damaged = root / (root / "LATEST").read_text().strip()
    older = max(p.name for p in root.iterdir() if p.is_dir() and p.name < damaged.name)
    piece = sorted((damaged / "node").glob("rows-*"))[0] / "data.npy"
    raw = bytearray(piece.read_bytes())
    raw[-1] ^= 1
    piece.write_bytes(bytes(raw))

    write_spec(sage_spec(graph_file, epochs=4), run_dir)
    done = complete(run_dir, "--resume")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if damaged.name in line]  # [run] lines: stderr
    assert len(said) == 1 and "does not match the recorded" in said[0], done.stderr
    assert re.search(rf"resuming from step \d+ \(epoch 2, checkpoint {older}\)", done.stderr), done.stderr
    st = status(run_dir)
    assert st["phase"] == "Succeeded" and st["progress"]["epoch"] == 4
