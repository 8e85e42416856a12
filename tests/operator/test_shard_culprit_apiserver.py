"""Against a real API server: a shard server's pod restarted by the kubelet (OOM-killed) and both trainers
failed on its loss (backoffLimit 0): the Failed and TrainersReady conditions and their events name the
shard pod, and status.shards[].restarts is the kubelet's count. The restart accounting with a
backoffLimit left: test_shard_culprit.py (a condition of the moment is gone once the next attempt runs)."""

from __future__ import annotations

import calendar
import time

import pytest
import yaml

from graphtrain.contract import failures
from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import (
    apply_training,
    conditions,
    controlled_pod,
    ns,  # noqa: F401 - the fixture, used by name
    phase,
    status_patch,
    to_training,
)

pytestmark = pytest.mark.timeout(240)


def shard_pod(kube, namespace: str, name: str, i: int, status: dict) -> None:
    """The StatefulSet controller's pod <name>-shards-<i>, with `status` (the kubelet's)."""
    labels = {"graphtrain.io/training": name, "graphtrain.io/role": "shards"}
    owner = ("apps/v1", "StatefulSet", f"{name}-shards")
    controlled_pod(kube, namespace, owner, f"{name}-shards-{i}", labels, "shard-server", status)


def server(restarts: int, **last: object) -> dict:
    cs = {"name": "shard-server", "ready": True, "restartCount": restarts, "image": "x", "imageID": ""}
    cs |= {"state": {"running": {}}, "lastState": {"terminated": last} if last else {}}
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [cs],
    }


def test_a_shard_restart_is_named_not_the_trainers_that_lost_it(kube, operator, ns: str) -> None:  # noqa: F811
    apply_training(kube, ns, "sl", "backoffLimit: 0")
    to_training(kube, ns, "sl")
    for i in range(2):
        shard_pod(kube, ns, "sl", i, server(0))
    stamp = lambda at: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))  # noqa: E731
    # the trainers start after the servers' pods were made (whole seconds), as the operator orders them
    made = get(kube, "pod", "sl-shards-1", ns)["metadata"]["creationTimestamp"]
    began = calendar.timegm(time.strptime(made, "%Y-%m-%dT%H:%M:%SZ")) + 1
    for r in range(2):
        status_patch(kube, "pod", f"sl-trainer-{r}", ns, {"phase": "Running", "startTime": stamp(began)})
    # both trainers fail on shard 1's loss before the kubelet reports its server's restart (as it goes):
    # the operator waits for that end (culprit_due), then names the shard pod
    said = "error: " + failures.shard_gone(1, "tcp://sl-shards-1.sl-shards:7000", failures.NO_ANSWER, "pull")
    for r in range(2):
        ended = {"exitCode": 1, "reason": "Error", "message": said, "finishedAt": stamp(began + 2)}
        cs = [{"name": "trainer", "ready": False, "restartCount": 0, "image": "x", "imageID": ""}]
        cs[0]["state"] = {"terminated": ended}
        status_patch(kube, "pod", f"sl-trainer-{r}", ns, {"phase": "Failed", "containerStatuses": cs})
    assert phase(kube, "sl", ns) == "Training"  # held: its cause is not seen yet (up to 30 s)
    killed = {"exitCode": 137, "reason": "OOMKilled", "finishedAt": stamp(began + 1)}
    shard_pod(kube, ns, "sl", 1, server(1, **killed))
    assert wait_for(lambda: phase(kube, "sl", ns) == "Failed", what="Failed")  # backoffLimit 0
    named = "shard server 1 (pod sl-shards-1) ended (OOMKilled, exit code 137)"
    said = conditions(kube, "sl", ns)
    assert said["Failed"]["reason"] == "TrainerFailed" and said["Failed"]["message"].startswith(named)
    assert said["TrainersReady"]["reason"] == "TrainerFailed"  # how the trainers ended stays
    assert said["TrainersReady"]["message"].startswith(named)
    status = get(kube, "gtr", "sl", ns)["status"]
    assert status.get("restarts", 0) == 0 and status["shards"][1]["restarts"] == 1
    events = yaml.safe_load(kube("get", "events", "-n", ns, "-o", "yaml"))["items"]
    mine = [e for e in events if e["involvedObject"]["name"] == "sl" and e["type"] == "Warning"]
    failed = [e["message"] for e in mine if e["reason"] == "TrainerFailed"]  # TrainersReady's and Failed's
    assert failed and all(m.startswith(named) for m in failed), failed
