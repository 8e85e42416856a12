"""Gang trainings against a real API server with the PodGroup CRDs of Volcano and the scheduler-plugins
coscheduling plugin installed (tests/operator/crds: their published schemas; no controller of theirs
runs): the operator's PodGroup is accepted by each schema as written, owned by its training, and every
shard-server and trainer pod joins it; a PodGroup breaking the schema is refused, so the schema is
really checked. The first test runs before the CRDs are installed (a cluster without Volcano or the
plugin), and the CRDs are removed after the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import SPEC, names_of, status_patch

pytestmark = pytest.mark.timeout(240)
CRDS = Path(__file__).parent / "crds"
PLURALS = {"volcano": "podgroups.scheduling.volcano.sh", "coscheduling": "podgroups.scheduling.x-k8s.io"}


def served(kube) -> set[str]:
    """The PodGroup kinds (PLURALS' values) the API server serves now."""
    names = set()
    for group in ("scheduling.volcano.sh", "scheduling.x-k8s.io"):
        names |= set(kube("api-resources", f"--api-group={group}", "-o", "name").split())
    return names & set(PLURALS.values())


@pytest.fixture(scope="module")
def podgroup_crds(kube) -> Iterator[None]:
    for path in sorted(CRDS.glob("*.yaml")):
        kube("apply", "-f", str(path))
    for crd in PLURALS.values():
        kube("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    yield
    for path in sorted(CRDS.glob("*.yaml")):
        kube("delete", "-f", str(path), "--wait=true", "--timeout=60s")


def test_a_gang_without_its_pod_group_crd_is_said_once_and_starts_no_pods(
    kube, operator, ns: str, caplog
) -> None:
    """No PodGroup CRD (the usual first try: no Volcano, no coscheduling plugin): one Warning event
    naming the PodGroup and spec.scheduling.gang, no shard servers or trainers that would wait for the
    group forever, and no traceback at each reconcile (its create raised past the refusal handling)."""
    assert served(kube) == set()  # this module's first test: its CRDs come later and go after it
    name = "gang-none"
    spec = SPEC.format(name=name, extra_model="") + "  scheduling: {gang: true, schedulerName: volcano}\n"
    caplog.set_level("INFO", logger="graphtrain.operator")
    kube("apply", "-n", ns, "-f", "-", input=spec)
    wait_for(lambda: names_of(kube, "job", ns, name) == [f"{name}-partition"], what="the partition job")
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status_patch(kube, "job", f"{name}-partition", ns, done)

    def warned() -> list[dict]:
        events = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
        return [e for e in events if e["reason"] == "ChildRefused"]

    said = wait_for(warned, what="a ChildRefused event")
    assert len(said) == 1 and said[0]["type"] == "Warning", said
    assert said[0]["message"].startswith(f"PodGroup/{name}-gang was refused"), said[0]["message"]
    assert "spec.scheduling.gang" in said[0]["message"]
    assert names_of(kube, "statefulset", ns, name) == []
    assert names_of(kube, "pod", ns, name) == []
    failed = [r for r in caplog.records if r.exc_info and name in r.getMessage() + str(r.args)]
    assert not failed, failed[0].getMessage()


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
