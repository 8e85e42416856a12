"""Faults through the operator with real processes (the pod runner's process mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, ROOT, Cluster, events, fail_fast, wait_phase
from tests.podrunner import PodRunner

# offline: the partition pod finds no pre-seeded dataset on the fresh claim and fails, saying so
OPERATOR_CONFIG = f"""
images: {{runtime: "{IMAGE}", cuda: "{IMAGE}", pullPolicy: Never}}
storage: {{offline: true}}
"""
SPEC = ROOT / "examples" / "nations-transe.yaml"
NAME = "nations-transe"

pytestmark = pytest.mark.timeout(600)


def test_a_failed_partition_job_fails_the_training_with_the_pods_error(
    cluster: Cluster, tmp_path: Path
) -> None:
    kube, ns = cluster.kube, "fault-partition"
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner") as runner:
        kube("create", "namespace", ns)
        kube("apply", "-n", ns, "-f", str(SPEC))
        body = wait_phase(kube, ns, NAME, {"Failed", "Succeeded"}, 300, [], fail_fast(runner))
        pods = json.loads(kube("get", "pods", "-n", ns, "-o", "json"))["items"]
        assert runner.errors == []
    status = body["status"]
    assert status["phase"] == "Failed", json.dumps(status)[:2000]
    # the Job ran its pod backoffLimit + 1 times, each ended with the runtime's own words
    failed = [p for p in pods if p["status"]["phase"] == "Failed"]
    assert len(failed) == 2, [p["metadata"]["name"] for p in pods]
    said = failed[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert said["exitCode"] == 1 and said["reason"] == "Error"
    cond = next(c for c in status["conditions"] if c["type"] == "PartitionReady")
    assert cond["status"] == "False" and "BackoffLimitExceeded" in cond["message"]
    assert "graphtrain data fetch nations" in cond["message"], cond["message"]  # the pod's last line
    warnings = [e for e in events(kube, ns, NAME) if e["type"] == "Warning"]
    assert any("graphtrain data fetch nations" in e["message"] for e in warnings), warnings
