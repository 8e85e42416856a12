"""spec.scheduling on the operator's side: the gang's PodGroup (Volcano's or the coscheduling plugin's),
Kueue's pod-group labels, the pods made together, and their wait for the group said by a condition
instead of counted as pods that cannot start."""

from __future__ import annotations

import datetime as dt

import pytest

from graphtrain.contract.spec import parse
from graphtrain.contract.spec.scheduling import COSCHEDULING_API, VOLCANO_API
from graphtrain.operator import gang, manifests
from graphtrain.operator.config import built_in
from tests.operator.reconcile_cluster import NAME, Cluster, cond, kinds, training

GROUP = f"{NAME}-gang"


def gang_training(**scheduling: object) -> dict:
    return training(**{f"scheduling.{k}": v for k, v in scheduling.items()})


def first_shard_step(body: dict) -> tuple[Cluster, object]:
    c = Cluster(body)
    c.step()
    c.finish_partition()
    return c, c.step()


@pytest.mark.parametrize(
    ("scheduler", "api", "where", "key"),
    [
        ("volcano", VOLCANO_API, "annotations", "scheduling.k8s.io/group-name"),
        ("scheduler-plugins-scheduler", COSCHEDULING_API, "labels", "scheduling.x-k8s.io/pod-group"),
    ],
)
def test_a_gang_gets_its_pod_group_and_every_pod_joins_it_at_once(
    scheduler: str, api: str, where: str, key: str
) -> None:
    c, p = first_shard_step(gang_training(gang=True, schedulerName=scheduler))
    made = {a.key: a.obj for a in p.actions if a.verb == "create"}
    group = made[f"PodGroup/{GROUP}"]
    assert group["apiVersion"] == api and group["spec"]["minMember"] == 4  # 2 shard servers + 2 trainers
    assert group["metadata"]["ownerReferences"][0]["kind"] == "GraphTraining"
    # the trainers are made with the servers: a gang binds none of its pods until all exist
    assert {f"Pod/{NAME}-trainer-0", f"Pod/{NAME}-trainer-1", f"StatefulSet/{NAME}-shards"} <= set(made)
    template = made[f"StatefulSet/{NAME}-shards"]["spec"]["template"]
    for meta, spec in (
        (template["metadata"], template["spec"]),
        *(
            (made[f"Pod/{NAME}-trainer-{r}"]["metadata"], made[f"Pod/{NAME}-trainer-{r}"]["spec"])
            for r in (0, 1)
        ),
    ):
        assert meta[where][key] == GROUP and spec["schedulerName"] == scheduler
    assert kinds(c.step(), "create") == []  # made once, not again at every reconcile


def test_a_kueue_queue_labels_every_pod_as_one_group_of_every_member() -> None:
    _, p = first_shard_step(gang_training(queue="team-a"))
    made = {a.key: a.obj for a in p.actions if a.verb == "create"}
    assert not any(k.startswith("PodGroup/") for k in made)  # Kueue admits the pods; no PodGroup
    trainer = made[f"Pod/{NAME}-trainer-1"]["metadata"]
    shards = made[f"StatefulSet/{NAME}-shards"]["spec"]["template"]["metadata"]
    for meta in (trainer, shards):
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == GROUP
        assert meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"
    assert "schedulerName" not in made[f"Pod/{NAME}-trainer-1"]["spec"]


def test_without_scheduling_the_trainers_wait_for_the_shard_servers_and_nothing_is_grouped() -> None:
    _, p = first_shard_step(training())
    made = {a.key: a.obj for a in p.actions if a.verb == "create"}
    assert not any(k.startswith(("Pod/", "PodGroup/")) for k in made)
    assert "annotations" not in made[f"StatefulSet/{NAME}-shards"]["spec"]["template"]["metadata"]


def test_pods_gated_or_pending_for_their_group_wait_with_a_condition_and_no_start_timeout() -> None:
    c, _ = first_shard_step(gang_training(gang=True, schedulerName="volcano"))
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes",
    }
    for i in (0, 1):
        c.pod(f"{NAME}-shards-{i}", "shards", "Pending", conditions=[unschedulable])
    for r in (0, 1):
        c.children[f"Pod/{NAME}-trainer-{r}"]["status"] = {"phase": "Pending", "conditions": [unschedulable]}
    c.now += dt.timedelta(hours=3)  # far past runPolicy.startTimeoutSeconds
    p = c.step()
    assert p.status["phase"] != "Failed", p.status
    shards, trainers = cond(p, "ShardsReady"), cond(p, "TrainersReady")
    assert shards["reason"] == trainers["reason"] == "WaitingForGroup"
    assert GROUP in shards["message"] and f"{NAME}-trainer-0" in trainers["message"]
    # a pod that cannot start for another reason is still named as one
    pulling = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
    c.pod(f"{NAME}-shards-0", "shards", "Pending", containerStatuses=[pulling])
    assert cond(c.step(), "ShardsReady")["reason"] == "PodsNotStarting"


def test_volcano_takes_the_trainers_priority_for_the_group() -> None:
    body = training(**{"scheduling.gang": True, "scheduling.schedulerName": "volcano"})
    body["spec"]["trainers"]["priorityClassName"] = "high"
    group = gang.pod_group(body, parse(body))
    assert group is not None and group["spec"] == {"minMember": 4, "priorityClassName": "high"}
    assert (
        manifests.shard_statefulset(body, parse(body), built_in())["spec"]["template"]["spec"][
            "schedulerName"
        ]
        == "volcano"
    )
