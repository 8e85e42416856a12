"""A pod's effective requests and limits, Kubernetes' formula (operator/pod_resources.py), and the
gang's one pod of the dry run asking the quota for their sum (gang_admission.as_one)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from graphtrain.operator import gang_admission, pod_resources


def c(name: str, cpu: str, limit: str | None = None, sidecar: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu}}
    if limit is not None:
        resources["limits"] = {"cpu": limit}
    return {
        "name": name,
        "image": "i",
        "resources": resources,
        **({"restartPolicy": "Always"} if sidecar else {}),
    }


def pod(name: str, containers: list, init: list | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, **({"initContainers": init} if init else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def cpu(p: dict[str, Any], field: str = "requests") -> Decimal:
    return pod_resources.effective(p["spec"], field).get("cpu", Decimal(0))


def test_the_formula_of_kubernetes() -> None:
    """max(largest init container with the sidecars started before it, containers + sidecars)."""
    assert cpu(pod("p", [c("a", "1"), c("b", "500m")])) == Decimal("1.5")
    assert cpu(pod("p", [c("a", "1")], [c("side", "1", sidecar=True)])) == 2  # a sidecar adds
    assert cpu(pod("p", [c("a", "1")], [c("init", "4")])) == 4  # an init container larger than the rest
    # an init container after a sidecar runs beside it: 4 + 1
    assert cpu(pod("p", [c("a", "2")], [c("side", "1", sidecar=True), c("init", "4")])) == 5
    assert cpu(pod("p", [c("a", "2")], [c("init", "4"), c("side", "1", sidecar=True)])) == 4  # before it
    assert cpu(pod("p", [c("a", "1", "2")], [c("init", "1", "3")]), "limits") == 3


def test_the_one_pod_asks_for_every_pods_effective_sum() -> None:
    """Each pod's sidecars (once per pod, not the first pod's alone) and init containers larger than the
    running ones (a container of the difference): the one pod's sum is the gang's."""
    gang = [
        pod("w-0", [c("trainer", "1", "2")], [c("shard", "1", "2", sidecar=True)]),
        pod("w-1", [c("trainer", "1", "2")], [c("shard", "1", "2", sidecar=True)]),
        pod("w-2", [c("trainer", "1", "1")], [c("load", "3", "5")]),
    ]
    one = gang_admission.as_one(gang)
    assert "initContainers" not in one["spec"]
    assert not any("restartPolicy" in x for x in one["spec"]["containers"])
    for field in ("requests", "limits"):
        assert cpu(one, field) == sum(cpu(p, field) for p in gang), field  # 2+2+3 requests, 4+4+5 limits
    pads = [x for x in one["spec"]["containers"] if x["name"].startswith("init-2")]
    assert [x["resources"] for x in pads] == [
        {"requests": {"cpu": "2"}},
        {"requests": {"cpu": "0"}, "limits": {"cpu": "4"}},
    ]
    assert "initContainers" in gang[0]["spec"]  # the pods themselves unchanged
