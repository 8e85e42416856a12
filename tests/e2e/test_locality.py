"""Partition locality through the operator with real processes (the pod runner's process mode): Nations
TransE on 2 partitions with 1 trainer each, in worker pods (spec.placement.locality's default for
it): each trainer reads its own partition through shared memory and the other over TCP, and a killed
shard-server sidecar or a deleted worker pod recovers from the last checkpoint to Succeeded.

The WordNet figures beside `graphtrain run` (pull time per step, samples/s, accuracy, locality on and
off) are bench/locality.py's; these tests hold the behaviour.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from graphtrain.contract.children import SHARD_CONTAINER, worker_name
from tests.e2e.cluster import final_progress
from tests.e2e.conftest import EPOCHS, MRR_TOLERANCE, Cluster, events, no_errors
from tests.e2e.test_faults import NAME, finish, latest, pod, ready, start_training, wait_for
from tests.e2e.test_faults import write_spec as faults_spec
from tests.pod_security import violations
from tests.podrunner import PodRunner

pytestmark = pytest.mark.timeout(900)
READS = re.compile(r"reads: (shard 0: [a-z_]+ \d+ %); (shard 1: [a-z_]+ \d+ %)")


def write_spec(tmp_path: Path, epochs: int, run_policy: dict) -> Path:
    return faults_spec(tmp_path, epochs, run_policy, locality=None)  # unset: worker pods by default


def sidecar(p: dict | None) -> dict:
    statuses = ((p or {}).get("status") or {}).get("initContainerStatuses") or []
    return next((cs for cs in statuses if cs["name"] == SHARD_CONTAINER), {})


def reads_of(log: str) -> tuple[str, str]:
    """The last epoch line's reads by shard (the trainer's graphtrain_trainer_rows_read_total)."""
    found = READS.findall(log)
    assert found, log[-3000:]
    return found[-1]


def test_a_killed_shard_sidecar_restarts_in_place_and_the_training_succeeds(
    cluster: Cluster, nations_reference: float, tmp_path: Path
) -> None:
    """Worker pods: no StatefulSet, one pod per partition that passes the restricted Pod Security
    Standard; its trainer reads its own shard through shared memory and the other through requests.
    SIGKILL to worker 1's shard-server sidecar: the kubelet restarts it in place, it restores the last
    checkpoint, the trainers (whose mapped rows are stale) restart from it, and the training succeeds
    with a test MRR within MRR_TOLERANCE of undisturbed `graphtrain run`s."""
    kube, ns = cluster.kube, "locality-shard"
    spec = write_spec(tmp_path, epochs=EPOCHS, run_policy={"backoffLimit": 2})
    started = time.monotonic()
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner") as runner:
        uid, root = start_training(cluster, runner, ns, spec)
        victim = worker_name(NAME, 1)
        # ready: its sidecar's probe passes (under load a probe may time out once: waited for, bounded)
        before = wait_for(
            f"{victim} ready",
            lambda: (p := pod(kube, ns, victim)) is not None and ready(p) and sidecar(p).get("ready") and p,
            120,
        )
        assert json.loads(kube("get", "statefulsets", "-n", ns, "-o", "json"))["items"] == []
        for p in range(2):
            worker = pod(kube, ns, worker_name(NAME, p))
            assert worker is not None and violations(worker["spec"]) == [], worker_name(NAME, p)
        taken = latest(root)
        runner.kill_container(ns, victim, signal.SIGKILL, container=SHARD_CONTAINER)
        killed_at = time.monotonic()
        wait_for(
            f"{victim}'s shard server restarted",
            lambda: (
                int(sidecar(pod(kube, ns, victim)).get("restartCount", 0)) >= 1
                or (pod(kube, ns, victim) or {}).get("metadata", {}).get("uid") != before["metadata"]["uid"]
            ),
            120,
        )
        back = time.monotonic() - killed_at
        seen: list[str] = []
        body = finish(cluster, runner, ns, seen)
        elapsed = time.monotonic() - started
        logs = {p: runner.logs(ns, worker_name(NAME, p), tail=None) for p in range(2)}
        no_errors(runner)
    status = body["status"]
    assert status["phase"] == "Succeeded", json.dumps(status)[:3000]
    restored = [line for line in logs[1].splitlines() if "restores" in line and "step-" in line]
    assert restored, logs[1][-3000:]
    assert restored[-1].rsplit("step-", 1)[1][:9] >= taken.split("-", 1)[1], (restored[-1], taken)
    assert 1 <= status["restarts"] <= 2, status["restarts"]
    assert any(e["reason"] == "Restarting" for e in events(kube, ns, NAME)) or "Restarting" in seen
    # rank 0 (worker 0) reads shard 0 through shared memory and shard 1 by requests (answered by its fast
    # lane); rank 1 the reverse
    assert reads_of(logs[0]) == ("shard 0: shared_memory 100 %", "shard 1: fast_lane 100 %")
    assert reads_of(logs[1]) == ("shard 0: fast_lane 100 %", "shard 1: shared_memory 100 %")
    addresses = [s["address"] for s in status["shards"]]
    assert addresses == [f"tcp://{worker_name(NAME, i)}.{NAME}-trainers.{ns}.svc:7000" for i in range(2)]
    mrr = final_progress(kube, ns, NAME, "test_mrr")["evalValue"]
    print(
        f"locality shard fault: sidecar back {back:.1f} s after SIGKILL; {status['restarts']} restart(s); "
        f"{elapsed:.0f} s to Succeeded; test MRR {mrr:.4f}, undisturbed graphtrain run "
        f"{nations_reference:.4f}"
    )
    assert abs(mrr - nations_reference) <= MRR_TOLERANCE, (mrr, nations_reference)


def test_a_deleted_worker_pod_is_made_again_and_the_training_succeeds(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`kubectl delete pod <name>-worker-1` mid-run (a node lost, its shard server and trainer with it):
    the operator restarts every worker pod as the next attempt, whose servers restore the last
    checkpoint and whose trainers resume from it; Succeeded within runPolicy.backoffLimit."""
    kube, ns = cluster.kube, "locality-pod"
    spec = write_spec(tmp_path, epochs=EPOCHS, run_policy={"backoffLimit": 2})
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner") as runner:
        _, root = start_training(cluster, runner, ns, spec)
        taken = latest(root)
        assert taken is not None
        kube("delete", "pod", worker_name(NAME, 1), "-n", ns, "--wait=false")
        seen: list[str] = []
        body = finish(cluster, runner, ns, seen)
        trainer_log = runner.logs(ns, worker_name(NAME, 0), tail=None)
        no_errors(runner)
    status = body["status"]
    assert status["phase"] == "Succeeded", json.dumps(status)[:3000]
    assert 1 <= status["restarts"] <= 2, status["restarts"]
    resumed = re.findall(r"resuming from step \d+ \(epoch \d+, checkpoint (step-\d+)\)", trainer_log)
    assert resumed and resumed[-1] >= taken, (trainer_log[-3000:], taken)
