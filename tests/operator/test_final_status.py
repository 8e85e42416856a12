"""Issue 32: the status tells the truth at the end, on the real API server with the session's operator.

After Succeeded, Failed (a trainer past runPolicy.backoffLimit), the deadline and while being deleted,
`kubectl get gtr -o yaml` shows no role ready or running that is stopped: ShardsReady and TrainersReady
False, shard states Stopped; the printer columns and the REST API (api/, which reads the status) the
same. The test plays the kubelet and the controllers (status patches); a training being deleted is held
by a finalizer of the test's own, so its last status can be read before it goes.
"""

from __future__ import annotations

import json
import uuid

import pytest
from fastapi.testclient import TestClient

from graphtrain.api.app import create_app
from graphtrain.api.settings import Settings
from graphtrain.api.sources.kubernetes import KubernetesSource
from tests.api import cluster
from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import (
    apply_training,
    conditions,
    container,
    names_of,
    phase,
    status_patch,
    to_training,
)

pytestmark = pytest.mark.timeout(120)
HOLD = "test.graphtrain.io/hold"  # the test's finalizer: keeps a deleted training readable
RUNNING_WORDS = ("running", "ready")


@pytest.fixture
def ns(kube) -> str:
    name = f"f-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name


@pytest.fixture(scope="module")
def rest(kubeconfig: str) -> TestClient:
    """The REST API over this server (no cache: every request reads the API server)."""
    client = cluster.client(kubeconfig)
    return TestClient(create_app(KubernetesSource(timeout=5.0, client=client), Settings()))


def roles(kube, name: str, ns: str) -> dict[str, tuple[str, str, str]]:
    """ShardsReady, TrainersReady and Stalled: (status, reason, message)."""
    said = conditions(kube, name, ns)
    return {
        t: (c["status"], c["reason"], c["message"])
        for t, c in said.items()
        if t in ("ShardsReady", "TrainersReady", "Stalled")
    }


def assert_no_running_role(kube, rest: TestClient, name: str, ns: str) -> dict:
    """Nothing of the status, the printer columns or the REST API says a role is ready or running."""
    st = get(kube, "gtr", name, ns)["status"]
    for kind, (status, reason, message) in roles(kube, name, ns).items():
        assert status == "False", (kind, reason, message)
        assert not any(w in message for w in RUNNING_WORDS), (kind, message)
    assert [s["state"] for s in st["shards"]] == ["Stopped", "Stopped"]
    printed = kube("get", "gtr", name, "-n", ns).lower()
    assert not any(w in printed for w in RUNNING_WORDS), printed
    body = rest.get(f"/api/v1/trainings/{ns}/{name}").json()
    by_type = {c["type"]: c for c in body["status"]["conditions"]}
    assert by_type["ShardsReady"]["status"] == by_type["TrainersReady"]["status"] == "False"
    assert [s["state"] for s in rest.get(f"/api/v1/trainings/{ns}/{name}/shards").json()["items"]] == [
        "Stopped",
        "Stopped",
    ]
    assert "Running" not in [t["state"] for t in body["trainers"]]
    return st


def test_succeeded(kube, operator, rest: TestClient, ns: str) -> None:
    apply_training(kube, ns, "ok", "backoffLimit: 0")
    to_training(kube, ns, "ok")
    for r in range(2):
        status_patch(kube, "pod", f"ok-trainer-{r}", ns, {"phase": "Succeeded"})
    assert wait_for(lambda: phase(kube, "ok", ns) == "Succeeded", what="Succeeded")
    assert wait_for(lambda: names_of(kube, "statefulset", ns, "ok") == [], what="the shards stopped")
    assert_no_running_role(kube, rest, "ok", ns)
    said = roles(kube, "ok", ns)
    assert said["ShardsReady"] == (
        "False",
        "Stopped",
        "shard servers stopped: the training succeeded (runPolicy.cleanPodPolicy Running)",
    )
    assert said["TrainersReady"][:2] == ("False", "Completed")


def test_failed_past_the_backoff_limit(kube, operator, rest: TestClient, ns: str) -> None:
    apply_training(kube, ns, "bad", "backoffLimit: 0")
    to_training(kube, ns, "bad")
    killed = container(terminated={"exitCode": 137, "reason": "OOMKilled"})
    status_patch(kube, "pod", "bad-trainer-1", ns, {"phase": "Failed", "containerStatuses": killed})
    assert wait_for(lambda: phase(kube, "bad", ns) == "Failed", what="Failed")
    assert wait_for(lambda: names_of(kube, "pod", ns, "bad") == ["bad-trainer-1"], what="rank 0 stopped")
    assert_no_running_role(kube, rest, "bad", ns)
    said = roles(kube, "bad", ns)
    assert said["TrainersReady"][:2] == ("False", "TrainerFailed") and "OOMKilled" in said["TrainersReady"][2]
    assert conditions(kube, "bad", ns)["Failed"]["reason"] == "TrainerFailed"


def test_deadline(kube, operator, rest: TestClient, ns: str) -> None:
    """The issue's report: after a deadline failure TrainersReady said "2/2 trainers running"."""
    apply_training(kube, ns, "late", "backoffLimit: 0")
    to_training(kube, ns, "late")
    assert roles(kube, "late", ns)["TrainersReady"][:2] == ("True", "Running")
    # runPolicy may change while it runs: a deadline already past since its startTime fails it now
    patch = {"spec": {"runPolicy": {"activeDeadlineSeconds": 1}}}
    kube("patch", "gtr", "late", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    assert wait_for(lambda: phase(kube, "late", ns) == "Failed", timeout=30, what="the deadline")
    assert wait_for(lambda: names_of(kube, "statefulset", ns, "late") == [], what="the shards stopped")
    assert_no_running_role(kube, rest, "late", ns)
    why = "the training failed (runPolicy.cleanPodPolicy Running)"
    said = roles(kube, "late", ns)
    assert said["TrainersReady"] == ("False", "Stopped", f"trainers stopped: {why}")
    assert said["Stalled"][:2] == ("False", "Stopped")
    assert conditions(kube, "late", ns)["Failed"]["reason"] == "DeadlineExceeded"


def test_deleted_while_training(kube, operator, rest: TestClient, ns: str) -> None:
    apply_training(kube, ns, "gone", "backoffLimit: 0")
    to_training(kube, ns, "gone")
    assert not get(kube, "gtr", "gone", ns)["metadata"].get("finalizers")  # the operator adds none
    patch = {"metadata": {"finalizers": [HOLD]}}
    kube("patch", "gtr", "gone", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    kube("delete", "gtr", "gone", "-n", ns, "--wait=false")

    def stopped() -> bool:  # the operator deleted the children and wrote the status
        if names_of(kube, "statefulset", ns, "gone") or names_of(kube, "pod", ns, "gone"):
            return False
        said = roles(kube, "gone", ns)
        return all(reason == "Stopped" for _, reason, _ in said.values())

    assert wait_for(stopped, what="the children deleted and every role stopped")
    st = assert_no_running_role(kube, rest, "gone", ns)
    assert st["phase"] == "Training"  # the phase stays; metadata.deletionTimestamp says it is going
    for kind, (_, reason, message) in roles(kube, "gone", ns).items():
        assert reason == "Stopped", kind
        assert kind == "Stalled" or message.endswith("stopped: the GraphTraining is being deleted"), message
    kube("patch", "gtr", "gone", "-n", ns, "--type=merge", "-p", '{"metadata": {"finalizers": null}}')
    kube("wait", "--for=delete", "gtr/gone", "-n", ns, "--timeout=30s")
