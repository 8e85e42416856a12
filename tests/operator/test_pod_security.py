"""Every pod of a training runs as the restricted profile says (non-root uid 10001, no privilege
escalation, a read-only root), and the kubelet chowns its data claim to the pod's group only when the
claim's root is not already the group's, not at every pod start (a walk over every file). With
`podSecurity.runAsUser: null` the pods state no uid, gid or fsGroup (OpenShift assigns them)."""

from __future__ import annotations

import pytest

from graphtrain.contract.spec import parse
from graphtrain.operator import manifests, workers
from graphtrain.operator.config import OperatorConfig, built_in
from graphtrain.operator.config import parse as parse_config
from tests.operator.reconcile_cluster import training
from tests.operator.test_workers import body, gt_body
from tests.pod_security import violations

IDS = ("runAsUser", "runAsGroup", "fsGroup")


def pod_specs(config: OperatorConfig | None = None) -> dict[str, dict]:
    owner, config = training(), config or built_in()
    gt = parse(owner)
    worker_gt = parse(body(4))
    return {
        "partition": manifests.partition_job(owner, gt, config)["spec"]["template"]["spec"],
        "shards": manifests.shard_statefulset(owner, gt, config)["spec"]["template"]["spec"],
        "trainer": manifests.trainer_pod(owner, gt, config, 0, 0)["spec"],
        "worker": workers.worker_pod(gt_body(worker_gt), worker_gt, config, partition=1, attempt=0)["spec"],
    }


def containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("role", ["partition", "shards", "trainer", "worker"])
def test_every_pod_is_restricted_and_runs_as_the_configured_uid(role: str) -> None:
    spec = pod_specs()[role]
    assert violations(spec) == []
    assert {k: spec["securityContext"][k] for k in IDS} == dict.fromkeys(IDS, 10001)
    assert all(c["securityContext"]["runAsUser"] == 10001 for c in containers(spec))
    own = pod_specs(parse_config({"podSecurity": {"runAsUser": 5000}}))[role]
    assert {k: own["securityContext"][k] for k in IDS} == dict.fromkeys(IDS, 5000)


@pytest.mark.parametrize("role", ["partition", "shards", "trainer", "worker"])
def test_without_a_uid_the_pods_state_none_and_stay_restricted(role: str) -> None:
    """OpenShift's restricted SCC refuses a pod whose runAsUser is outside its namespace's range."""
    spec = pod_specs(parse_config({"podSecurity": {"runAsUser": None}}))[role]
    assert violations(spec) == []
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert not set(IDS) & set(spec["securityContext"])
    assert all(not set(IDS) & set(c["securityContext"]) for c in containers(spec))


@pytest.mark.parametrize("role", ["partition", "shards", "trainer"])
def test_a_pod_chowns_its_claim_only_on_a_root_mismatch(role: str) -> None:
    security = pod_specs()[role]["securityContext"]
    assert security["fsGroup"] == 10001 and security["fsGroupChangePolicy"] == "OnRootMismatch"
    (container,) = pod_specs()[role]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
