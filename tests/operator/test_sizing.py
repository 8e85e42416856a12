"""The memory the partition measured (status.partition.memory): trainers and shard servers whose spec
states no memory get it as their request; a stated limit below it fails the training before any shard
server or trainer is made (operator/sizing.py, placement.py)."""

from __future__ import annotations

import json

import pytest

from graphtrain.contract.spec import MemoryNeed, parse
from graphtrain.operator import placement, sizing
from graphtrain.operator.config import built_in
from graphtrain.operator.observation import key
from tests.operator.reconcile_cluster import NAME, Cluster, cond, kinds, training

MiB, GiB = 2**20, 2**30
NEED = {"shardServer": 600 * MiB, "trainer": 5 * GiB}
COLLECTIVE = [{"name": "node", "dim": 16, "sharding": "collective"}]


def partitioned(c: Cluster, need: dict | None = NEED) -> None:
    """The partition job succeeded, its pod's report saying `need` (None: an older one, saying none)."""
    c.step()
    c.finish_partition()
    term = c.children[key("Pod", f"{NAME}-partition-x1")]["status"]["containerStatuses"][0]["state"]
    report = json.loads(term["terminated"]["message"])
    term["terminated"]["message"] = json.dumps({**report, **({"memory": need} if need else {})})


def trainer_resources(c: Cluster) -> dict:
    c.step()  # the shard servers
    c.ready_shards()
    p = c.step()
    pod = next(a.obj for a in p.actions if a.key == f"Pod/{NAME}-trainer-0")
    return pod["spec"]["containers"][0]["resources"]


def test_trainers_of_a_collective_table_get_their_share_as_their_memory_request() -> None:
    c = Cluster(training(embeddings=COLLECTIVE))
    partitioned(c)
    got = trainer_resources(c)
    # the default request (2Gi) raised to the need, the default limit (8Gi) by as much
    assert got == {"requests": {"cpu": "1", "memory": "5120Mi"}, "limits": {"cpu": "2", "memory": "11264Mi"}}
    assert c.body["status"]["partition"]["memory"] == NEED  # status.partition says what each role needs


def test_a_users_own_trainer_memory_is_kept_and_an_older_partition_changes_nothing() -> None:
    own = {"requests": {"memory": "1Gi"}, "limits": {"memory": "64Gi"}}
    c = Cluster(training(embeddings=COLLECTIVE, **{"trainers.resources": own}))
    partitioned(c)
    assert trainer_resources(c) == own  # never lowered nor raised: a request is the user's to make
    c = Cluster(training(embeddings=COLLECTIVE))
    partitioned(c, None)
    assert trainer_resources(c)["requests"]["memory"] == "2Gi"  # no need said: the default as before


@pytest.mark.parametrize(
    ("role", "field", "limit", "need"),
    [
        ("trainers", "spec.trainers.resources.limits.memory", "4Gi", "5120Mi a trainer needs"),
        ("shardServers", "spec.shardServers.resources.limits.memory", "512Mi", "600Mi a shard server needs"),
    ],
)
def test_a_limit_below_the_need_fails_the_training_before_any_pod(role, field, limit, need) -> None:
    c = Cluster(training(embeddings=COLLECTIVE, **{f"{role}.resources": {"limits": {"memory": limit}}}))
    partitioned(c)
    p = c.step()
    assert p.status["phase"] == "Failed"
    failed = cond(p, "Failed")
    assert failed["reason"] == "InsufficientMemory"
    assert failed["message"].startswith(f"{field}: {limit} is below the {need}")
    assert kinds(p, "create") == []  # no StatefulSet, no trainer pod, nothing half made
    assert not any(k.startswith(("StatefulSet/", "Pod/" + NAME + "-trainer")) for k in c.children)
    event = next(e for e in p.events if e.reason == "InsufficientMemory")
    assert event.type == "Warning" and field in event.message
    assert c.step().status["phase"] == "Failed"  # and it stays so, making nothing


def test_a_limit_that_holds_the_need_proceeds() -> None:
    c = Cluster(training(embeddings=COLLECTIVE, **{"trainers.resources": {"limits": {"memory": "6Gi"}}}))
    partitioned(c)
    p = c.step()
    assert p.status["phase"] == "Starting" and f"StatefulSet/{NAME}-shards" in kinds(p, "create")


@pytest.mark.parametrize(
    ("resources", "limits"),
    [
        (None, {"shardServers": "8Gi", "trainers": "11264Mi"}),  # defaults: sized, never refused
        ({"requests": {"cpu": "2"}}, {"shardServers": "8Gi", "trainers": None}),  # no memory limit at all
        ({"limits": {"memory": "1Gi"}}, {"shardServers": "8Gi", "trainers": "1Gi"}),  # the user's
    ],
)
def test_the_limits_checked_are_the_pods_own(resources: dict | None, limits: dict) -> None:
    extra = {"trainers.resources": resources} if resources else {}
    spec = parse(training(**extra)).spec
    assert sizing.pod_limits(spec, built_in(), MemoryNeed(shard_server=GiB, trainer=5 * GiB)) == limits


def test_a_shard_servers_request_is_sized_too_and_the_partition_jobs_never() -> None:
    spec = parse(training()).spec
    shards = placement.pod_settings(spec, built_in(), "shards", 3 * GiB).resources
    assert shards["requests"]["memory"] == "3072Mi" and shards["limits"]["memory"] == "9216Mi"
    assert placement.pod_settings(spec, built_in(), "partition").resources["requests"]["memory"] == "1Gi"
