"""Gang trainings against a real API server with the PodGroup CRDs of Volcano and the scheduler-plugins
coscheduling plugin installed (tests/operator/crds: their published schemas; no controller of theirs
runs): the operator's PodGroup is accepted by each schema as written, owned by its training, and every
shard-server and trainer pod joins it; a PodGroup breaking the schema is refused, so the schema is
really checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import SPEC, status_patch

pytestmark = pytest.mark.timeout(240)
CRDS = Path(__file__).parent / "crds"
PLURALS = {"volcano": "podgroups.scheduling.volcano.sh", "coscheduling": "podgroups.scheduling.x-k8s.io"}


@pytest.fixture(scope="module")
def podgroup_crds(kube) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        kube("apply", "-f", str(path))
    for crd in PLURALS.values():
        kube("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


@pytest.mark.parametrize(
    ("scheduler", "kind", "joined"),
    [
        ("volcano", "volcano", ("annotations", "scheduling.k8s.io/group-name")),
        ("scheduler-plugins-scheduler", "coscheduling", ("labels", "scheduling.x-k8s.io/pod-group")),
    ],
)
def test_the_gang_pod_group_validates_and_every_pod_joins_it(
    kube, operator, ns: str, podgroup_crds: None, scheduler: str, kind: str, joined: tuple[str, str]
) -> None:
    name = f"gang-{kind}"
    spec = (
        SPEC.format(name=name, extra_model="") + f"  scheduling: {{gang: true, schedulerName: {scheduler}}}\n"
    )
    kube("apply", "-n", ns, "-f", "-", input=spec)
    job = f"{name}-partition"
    wait_for(lambda: _exists(kube, "job", job, ns), what=f"{job} created")
    status_patch(
        kube, "job", job, ns, {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    )
    group = f"{name}-gang"
    wait_for(lambda: _exists(kube, PLURALS[kind], group, ns), what=f"PodGroup {group} created")
    body = get(kube, PLURALS[kind], group, ns)
    assert body["spec"]["minMember"] == 4, body  # 2 shard servers + 2 trainers, kept by the schema
    owner = body["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "GraphTraining" and owner["name"] == name
    # the trainers are made with the servers (the group waits for every member), all in the group
    wait_for(
        lambda: _exists(kube, "pod", f"{name}-trainer-1", ns), what="trainer pods created with the servers"
    )
    sts = get(kube, "statefulset", f"{name}-shards", ns)["spec"]["template"]
    trainer = get(kube, "pod", f"{name}-trainer-0", ns)
    where, key = joined
    for meta, pod_spec in ((sts["metadata"], sts["spec"]), (trainer["metadata"], trainer["spec"])):
        assert meta[where][key] == group and pod_spec["schedulerName"] == scheduler
    # the schema is enforced: a PodGroup whose minMember is no integer is refused
    bad = dict(body, metadata={"name": f"{group}-bad", "namespace": ns}, spec={"minMember": "four"})
    said = kube("apply", "-n", ns, "-f", "-", input=json.dumps(bad), check=False)
    assert "minMember" in said and not _exists(kube, PLURALS[kind], f"{group}-bad", ns), said


def _exists(kube, kind: str, name: str, ns: str) -> bool:
    try:
        get(kube, kind, name, ns)
        return True
    except Exception:  # noqa: BLE001 - not there yet
        return False
