"""The memory the partition measured, against a real API server: trainers of a collective table get
their share as their memory request; a stated limit below a role's need fails the training (Failed /
InsufficientMemory, an event naming field, limit and need) with no StatefulSet or trainer pod made; a
limit that holds it proceeds."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import (
    SPEC,
    conditions,
    container,
    names_of,
    partition_pod,
    phase,
    status_patch,
)

pytestmark = pytest.mark.timeout(240)
MiB, GiB = 2**20, 2**30
NEED = {"shardServer": 600 * MiB, "trainer": 5 * GiB}
REPORT = {"algorithm": "metis", "parts": 2, "numNodes": 40943, "numEdges": 151442, "cutEdges": 900}


def limits(memory: str) -> dict:
    """A role's section stating only its memory limit."""
    return {"resources": {"limits": {"memory": memory}}}


def partitioned(kube, ns: str, name: str, trainers: dict | None = None, shards: dict | None = None) -> None:
    """The apiserver tests' training with its node table collective (and `trainers`, `shards` in those
    sections), its partition job succeeded saying NEED."""
    doc = yaml.safe_load(SPEC.format(name=name, extra_model=""))
    doc["spec"]["embeddings"][0]["sharding"] = "collective"
    doc["spec"]["trainers"].update(trainers or {})
    doc["spec"]["shardServers"] = shards or {}
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))
    assert wait_for(lambda: names_of(kube, "job", ns, name) == [f"{name}-partition"], what="the job")
    message = json.dumps({**REPORT, "edgeCutFraction": 0.01, "memory": NEED})
    partition_pod(
        kube,
        ns,
        name,
        {
            "phase": "Succeeded",
            "containerStatuses": container(terminated={"exitCode": 0, "message": message}),
        },
    )
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status_patch(kube, "job", f"{name}-partition", ns, done)


def test_trainers_get_their_collective_share_as_their_memory_request(kube, operator, ns: str) -> None:
    partitioned(kube, ns, "share")
    assert wait_for(lambda: names_of(kube, "statefulset", ns, "share") == ["share-shards"], what="shards")
    assert get(kube, "gtr", "share", ns)["status"]["partition"]["memory"] == NEED
    status_patch(kube, "statefulset", "share-shards", ns, {"replicas": 2, "readyReplicas": 2})
    assert wait_for(lambda: "share-trainer-1" in names_of(kube, "pod", ns, "share"), what="the trainers")
    resources = get(kube, "pod", "share-trainer-1", ns)["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == "5120Mi"  # 2Gi by default: raised to the need
    assert resources["limits"]["memory"] == "11264Mi"  # the default 8Gi, by as much


@pytest.mark.parametrize(
    ("trainers", "shards", "said"),
    [
        (
            limits("4Gi"),
            None,
            "spec.trainers.resources.limits.memory: 4Gi is below the 5120Mi",
        ),
        (
            None,
            limits("512Mi"),
            "spec.shardServers.resources.limits.memory: 512Mi is below the 600Mi",
        ),
    ],
    ids=["trainers", "shardServers"],
)
def test_a_limit_below_the_need_fails_with_no_pod_made(
    kube, operator, ns: str, trainers, shards, said
) -> None:
    partitioned(kube, ns, "small", trainers, shards)
    assert wait_for(lambda: phase(kube, "small", ns) == "Failed", what="Failed")
    failed = conditions(kube, "small", ns)["Failed"]
    assert failed["reason"] == "InsufficientMemory" and failed["message"].startswith(said)
    events = yaml.safe_load(kube("get", "events", "-n", ns, "-o", "yaml"))["items"]
    warned = [e for e in events if e["reason"] == "InsufficientMemory"]
    assert warned and warned[0]["type"] == "Warning" and said in warned[0]["message"]
    assert names_of(kube, "statefulset", ns, "small") == []
    assert names_of(kube, "pod", ns, "small") == ["small-partition-x"]  # no trainer: nothing half made


def test_a_limit_that_holds_the_need_proceeds(kube, operator, ns: str) -> None:
    partitioned(kube, ns, "roomy", limits("6Gi"), limits("1Gi"))
    assert wait_for(lambda: names_of(kube, "statefulset", ns, "roomy") == ["roomy-shards"], what="shards")
    assert phase(kube, "roomy", ns) == "Starting"
