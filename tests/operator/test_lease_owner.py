"""The operator's Lease belongs to the chart's Deployment (issue 32: `helm uninstall` left it behind):
lease_store.owner_reference reads the owner once, LeaseClient writes the reference on create and on every
update (a Lease an earlier version made without one gets it at its next renewal), and
`graphtrain operator --lease-owner` refuses to start when it cannot read its owner. On the session's
API server; tests/chart/test_install.py checks that uninstall then leaves no Lease."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from graphtrain.operator import k8s, lease_store, ownership

pytestmark = pytest.mark.timeout(60)
OWNER = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "op", "uid": "u-2"}


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"name": "l"}, [OWNER]),
        ({"name": "l", "ownerReferences": [OWNER]}, [OWNER]),  # idempotent
        ({"name": "l", "ownerReferences": [{**OWNER, "uid": "u-1"}]}, [OWNER]),  # the chart re-installed
        (
            {"name": "l", "ownerReferences": [{"kind": "ConfigMap", "name": "x", "uid": "c"}]},
            [{"kind": "ConfigMap", "name": "x", "uid": "c"}, OWNER],  # someone else's reference stays
        ),
    ],
)
def test_with_owner(metadata: dict, expected: list[dict]) -> None:
    assert ownership.with_owner(metadata, OWNER) == {**metadata, "ownerReferences": expected}
    assert ownership.with_owner(metadata, None) == metadata


@pytest.fixture
def ns(kube, kubeconfig: str, monkeypatch) -> str:
    name = f"l-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    k8s.load_config()
    return name


def test_an_ownerless_lease_gets_its_owner_at_the_next_renewal(kube, ns: str) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op"}, "spec": {}}
    kube("apply", "-n", ns, "-f", "-", input=json.dumps(deployment))
    uid = json.loads(kube("get", "deployment", "op", "-n", ns, "-o", "json"))["metadata"]["uid"]
    owner = lease_store.owner_reference("apps/v1", "Deployment", ns, "op", timeout=5)
    assert owner == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "op", "uid": uid}

    before = lease_store.LeaseClient(ns, "old", timeout=5)  # as an operator without --lease-owner made it
    made = before.create({"holderIdentity": "a", "leaseDurationSeconds": 15})
    assert made is not None and not made["metadata"].get("ownerReferences")
    renewed = lease_store.LeaseClient(ns, "old", timeout=5, owner=owner).update(made, {"holderIdentity": "b"})
    assert renewed is not None and renewed["metadata"]["ownerReferences"] == [owner]
    assert renewed["spec"]["holderIdentity"] == "b"

    fresh = lease_store.LeaseClient(ns, "new", timeout=5, owner=owner).create({"holderIdentity": "c"})
    assert fresh is not None and fresh["metadata"]["ownerReferences"] == [owner]


def test_an_owner_that_cannot_be_read_is_refused(ns: str) -> None:
    with pytest.raises(lease_store.LeaseUnavailable) as raised:
        lease_store.owner_reference("apps/v1", "Deployment", ns, "nope", timeout=5)
    assert raised.value.status == 404 and f"get Deployment {ns}/nope: 404" in str(raised.value)


def test_the_command_stops_in_one_line_without_its_owner(ns: str, kubeconfig: str, tmp_path: Path) -> None:
    cmd = [str(Path(sys.executable).parent / "graphtrain"), "operator", "--leader-elect"]
    cmd += [f"--lease-namespace={ns}", "--lease-owner=nope", "--health-address=127.0.0.1:0"]
    cmd += ["--metrics-address=127.0.0.1:0"]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=30, env={"KUBECONFIG": kubeconfig, "PATH": ""}
    )
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"error: --lease-owner: get Deployment {ns}/nope: 404 ") and "not found" in line
