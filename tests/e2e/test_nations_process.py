"""Nations TransE through the operator with the pods run as host processes (the pod runner's process
mode: the same command lines as the pods', each pod in its own network namespace): one trainer computes
what `graphtrain run` computes to the last bit, and two trainings of one name in two namespaces train at
once. Apart from test_nations.py, whose podman training needs the runtime image, so that these go to
any xdist worker (tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.cluster import final_progress, seed_claim
from tests.e2e.conftest import Cluster, fail_fast, wait_phase
from tests.e2e.test_nations import GRAPHTRAIN, NAME, SPEC
from tests.podrunner import PodRunner

pytestmark = pytest.mark.timeout(1800)


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
    the same test MRR to 1e-9 (test_nations.py's two-trainer test can only bound an asynchronous spread)."""
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
    fetched = subprocess.run(
        [GRAPHTRAIN, "data", "fetch", "nations"], capture_output=True, text=True, timeout=300
    )
    assert fetched.returncode == 0, fetched.stderr
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
            ns: json.loads(kube("get", "pod", f"{NAME}-trainer-0", "-n", ns, "-o", "json"))
            for ns in namespaces
        }
        logs = {ns: runner.logs(ns, f"{NAME}-trainer-1") for ns in namespaces}
        assert runner.errors == []
    for ns, body in bodies.items():
        assert body["status"]["phase"] == "Succeeded", (
            f"{json.dumps(body['status'])[:2000]}\n{logs[ns][-3000:]}"
        )
        assert body["status"]["restarts"] == 0, json.dumps(body["status"])[:2000]
        assert final_progress(kube, ns, NAME, "test_mrr")["evalValue"] > 0
    ips = {ns: p["status"]["podIP"] for ns, p in rank0.items()}
    assert len(set(ips.values())) == 2, ips
    assert {p["spec"]["hostname"] for p in rank0.values()} == {f"{NAME}-trainer-0"}  # the same host name
    print(f"two trainings at once: {elapsed:.0f} s to both Succeeded; ranks 0 at {ips}")
