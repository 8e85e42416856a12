"""Nations TransE through the operator, its pods run by the pod runner: what a user sees after
`kubectl apply -f examples/nations-transe.yaml` (trained for conftest.EPOCHS epochs instead of its 100),
and the same test MRR as `graphtrain run` of the spec.

podman mode runs the operator's pods from the runtime image as a restricted pod (uid 10001, read-only
root, no capabilities): the proof that the manifests and the image train together (in CI). process
mode runs the same command lines as host processes, for quick local work: the one-trainer test, and
two short trainings at once on one operator and one runner (each pod in its own network namespace,
both ranks 0 on port 29500).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.e2e.cluster import final_progress, seed_claim
from tests.e2e.conftest import (
    MRR_TOLERANCE,
    ROOT,
    Cluster,
    events,
    fail_fast,
    nations_spec,
    wait_phase,
)
from tests.podrunner import PodRunner

SPEC = ROOT / "examples" / "nations-transe.yaml"
NAME = "nations-transe"
# Pending is never a phase of its own here: the first reconcile of a valid spec creates the partition
# Job and writes Partitioning (no Pending event is posted either)
PHASES = ["Partitioning", "Starting", "Training", "Succeeded"]
GRAPHTRAIN = str(Path(sys.executable).parent / "graphtrain")

pytestmark = pytest.mark.timeout(1800)


def in_order(seen: list[str], expected: list[str]) -> bool:
    it = iter(seen)
    return all(p in it for p in expected)


@pytest.mark.parametrize("mode", ["podman"])  # process mode: the one-trainer and fault tests
def test_nations_transe_trains_through_the_operator(
    mode: str, cluster: Cluster, nations_reference: float, tmp_path: Path, request
) -> None:
    kube, ns = cluster.kube, f"e2e-{mode}"
    image = request.getfixturevalue("runtime_image") if mode == "podman" else None
    started = time.monotonic()
    with PodRunner(cluster.kubeconfig, mode=mode, image=image, root=tmp_path / "runner") as runner:
        kube("create", "namespace", ns)
        kube("apply", "-n", ns, "-f", str(nations_spec(tmp_path / "nations.yaml")))
        seen: list[str] = []
        columns: list[str] = []

        def look(body: dict) -> None:
            assert not runner.errors, runner.errors[-3:]  # a broken runner fails now, not at the timeout
            training = (body.get("status") or {}).get("phase") == "Training"
            if training and not any("epoch" in line for line in columns):  # until it shows an epoch
                columns.append(kube("get", "gtr", NAME, "-n", ns, "--no-headers"))

        try:
            body = wait_phase(kube, ns, NAME, {"Succeeded", "Failed"}, 1200, seen, look)
        except AssertionError:
            print(cluster.operator_log.read_text()[-5000:])
            raise
        finally:
            elapsed = time.monotonic() - started
            print(f"e2e {mode}: {elapsed:.0f} s to {seen[-1] if seen else 'no phase'}; phases {seen}")
        pods = json.loads(kube("get", "pods", "-n", ns, "-o", "json"))["items"]
        logs = "\n".join(runner.logs(ns, p["metadata"]["name"]) for p in pods)
        status = body["status"]
        assert status["phase"] == "Succeeded", f"{json.dumps(status)[:3000]}\n{logs[-8000:]}"
        assert runner.errors == []

    # every phase in order, each told by an event (polling may miss one that lasted a moment: the
    # phases polled are only printed, as test_typed's 1.7 s Training phase showed on a loaded CI)
    posted = events(kube, ns, NAME)
    reasons = [e["reason"] for e in posted]
    assert in_order(reasons, PHASES), reasons
    assert {e["type"] for e in posted} == {"Normal"}, [e["message"] for e in posted if e["type"] != "Normal"]
    assert any("epoch" in line for line in columns), columns[-3:]  # `kubectl get gtr`'s Progress column
    # the same result as the local executor
    progress = final_progress(kube, ns, NAME, "test_mrr")
    # Not 0.01 (issue 17's acceptance): two trainers push asynchronously, so each run is one draw
    # (conftest.MRR_TOLERANCE). The exact comparison is the one-trainer test below (equal to the last bit).
    reference = nations_reference
    assert abs(progress["evalValue"] - reference) <= MRR_TOLERANCE, (progress["evalValue"], reference)
    print(f"test MRR through the operator {progress['evalValue']:.4f}, graphtrain run {reference:.4f}")
    # the trained entity table, exported from the claim's checkpoint in original node order
    work = runner.root / "claims" / ns / f"{NAME}-data" / "runs" / NAME / body["metadata"]["uid"]
    (config,) = (work / "partition").glob("*.json")
    latest = (work / "checkpoints" / "LATEST").read_text().strip()
    out = tmp_path / "entity.npy"
    res = subprocess.run(
        [
            GRAPHTRAIN,
            "export",
            str(work / "checkpoints" / latest),
            "--name",
            "entity",
            "--partition",
            str(config),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    entity = np.load(out)
    assert entity.shape == (14, 128)
    np.testing.assert_allclose(np.linalg.norm(entity, axis=1), 1.0, atol=1e-4)  # TransE keeps unit norm


def one_trainer_spec(path: Path) -> Path:
    """The example with one trainer and 10 epochs: one trainer's updates land in one order, so the
    result is exact (two `graphtrain run`s of it gave the same MRR to the last bit)."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["metadata"]["name"] = "nations-one"
    spec["spec"]["trainers"]["replicas"] = 1
    spec["spec"]["training"].update(epochs=10, evalEvery=10)
    path.write_text(yaml.safe_dump(spec))
    return path


def test_one_trainer_through_the_operator_computes_what_graphtrain_run_computes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The same partition, shard servers and trainer through the operator's pods as in `graphtrain run`:
    the same test MRR to 1e-9 (the two-trainer test above can only bound an asynchronous spread)."""
    spec = one_trainer_spec(tmp_path / "one.yaml")
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [GRAPHTRAIN, "run", str(spec), "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stderr[-3000:]
    local = json.loads((run_dir / "status.json").read_text())["progress"]["evalValue"]
    kube, ns = cluster.kube, "e2e-one"
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner") as runner:
        kube("create", "namespace", ns)
        kube("apply", "-n", ns, "-f", str(spec))
        body = wait_phase(kube, ns, "nations-one", {"Succeeded", "Failed"}, 900, [], fail_fast(runner))
        assert body["status"]["phase"] == "Succeeded", json.dumps(body["status"])[:3000]
        assert runner.errors == []
        through = final_progress(kube, ns, "nations-one", "test_mrr")["evalValue"]
    print(f"one trainer: test MRR through the operator {through!r}, graphtrain run {local!r}")
    assert abs(through - local) <= 1e-9, (through, local)


def test_two_trainings_at_once_each_find_their_own_rendezvous(cluster: Cluster, tmp_path: Path) -> None:
    """Issue 32 item 7.1: two trainings of the same name in two namespaces, at once, on one runner and
    one operator: pods of the same names and host names, both ranks 0 binding every interface on
    port 29500 (torch's TCPStore). Each pod in its own network namespace, both train to Succeeded
    with no restart, and each rank 0 reports through the API server (the final test_mrr)."""
    doc = yaml.safe_load(SPEC.read_text())
    doc["spec"]["training"].update(epochs=2, evalEvery=2)
    spec = tmp_path / "short.yaml"
    spec.write_text(yaml.safe_dump(doc))
    kube, namespaces = cluster.kube, ["twice-a", "twice-b"]
    started = time.monotonic()
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner") as runner:
        for ns in namespaces:  # the dataset on each claim: no pod downloads (the test's time is training)
            kube("create", "namespace", ns)
            seed_claim(runner.root, ns, f"{NAME}-data", "nations")
        for ns in namespaces:
            kube("apply", "-n", ns, "-f", str(spec))
        bodies = {
            ns: wait_phase(kube, ns, NAME, {"Succeeded", "Failed"}, 600, [], fail_fast(runner))
            for ns in namespaces
        }
        elapsed = time.monotonic() - started
        rank0 = {
            ns: json.loads(kube("get", "pod", f"{NAME}-worker-0", "-n", ns, "-o", "json"))
            for ns in namespaces
        }
        logs = {ns: runner.logs(ns, f"{NAME}-worker-1") for ns in namespaces}
        assert runner.errors == []
    for ns, body in bodies.items():
        assert body["status"]["phase"] == "Succeeded", (
            f"{json.dumps(body['status'])[:2000]}\n{logs[ns][-3000:]}"
        )
        assert body["status"]["restarts"] == 0, json.dumps(body["status"])[:2000]
        assert final_progress(kube, ns, NAME, "test_mrr")["evalValue"] > 0
    ips = {ns: p["status"]["podIP"] for ns, p in rank0.items()}
    assert len(set(ips.values())) == 2, ips
    # rank 0 in worker 0 (the spec's default locality): the same host name in both
    assert {p["spec"]["hostname"] for p in rank0.values()} == {f"{NAME}-worker-0"}
    print(f"two trainings at once: {elapsed:.0f} s to both Succeeded; ranks 0 at {ips}")
