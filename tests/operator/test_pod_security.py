"""Every pod of a training runs as the restricted profile says (non-root uid 10001, no privilege
escalation, a read-only root), and the kubelet chowns its data claim to the pod's group only when the
claim's root is not already the group's, not at every pod start (a walk over every file)."""

from __future__ import annotations

import pytest

from graphtrain.contract.spec import parse
from graphtrain.operator import manifests
from graphtrain.operator.config import built_in
from tests.operator.test_reconcile import training


def pod_specs() -> dict[str, dict]:
    owner, config = training(), built_in()
    gt = parse(owner)
    return {
        "partition": manifests.partition_job(owner, gt, config)["spec"]["template"]["spec"],
        "shards": manifests.shard_statefulset(owner, gt, config)["spec"]["template"]["spec"],
        "trainer": manifests.trainer_pod(owner, gt, config, 0, 0)["spec"],
    }


@pytest.mark.parametrize("role", ["partition", "shards", "trainer"])
def test_a_pod_chowns_its_claim_only_on_a_root_mismatch(role: str) -> None:
    security = pod_specs()[role]["securityContext"]
    assert security["fsGroup"] == 10001 and security["fsGroupChangePolicy"] == "OnRootMismatch"
    (container,) = pod_specs()[role]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
