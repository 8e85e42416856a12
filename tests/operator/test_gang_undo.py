"""The trainers' gang when the dry runs said yes and a create then says no (operator/gang_admission.py,
k8s._undo): the quota taken by another client's pod between the dry runs and the creates, or a
LimitRange's per-pod max below the gang's sum, which refuses the one-pod dry run before the quota sees
it (so the quota's answer is unknown). Before, the trainer made waited in rendezvous for its refused
peer up to the trainers' timeout (600 s), holding the quota; now it is deleted (only this training's)
and the gang waits whole, said in TrainersReady, until the quota has room for all.

The operator and the pods are the real API server's; the quota's and the LimitRange's answers come
from test_gang_admission.Quota (the test server runs no admission plugin), which counts requests.cpu
as the quota plugin does and frees a pod's share when it is deleted."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.utils import parse_quantity

from graphtrain.operator import handlers
from tests.operator.conftest import get, wait_for
from tests.operator.test_gang_admission import quota_on_pods, to_pods
from tests.operator.test_operator_apiserver import SPEC, conditions, names_of, status_patch

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize(
    ("taken", "pod_max", "quota_said"),
    [
        ("500m", None, "used: requests.cpu=1500m"),  # 2 cpu: the gang fit at the dry runs, 500m taken after
        ("0", "1500m", "used: requests.cpu=1, limited: requests.cpu=1500m"),  # the LimitRange hid the quota
    ],
    ids=["quota-taken-between", "limitrange-hides-quota"],
)
def test_a_gang_refused_midway_deletes_the_pods_it_made_and_waits(
    kube,
    operator,
    ns: str,
    monkeypatch,
    taken: str,
    pod_max: str | None,
    quota_said: str,
) -> None:
    hard = "2" if pod_max is None else "1500m"  # a trainer asks for 1 cpu
    quota = quota_on_pods(monkeypatch, ns, hard, taken=taken, pod_max=pod_max)
    name = "gang"
    to_pods(kube, ns, name)

    def said() -> str:  # the event stays; the condition says the latest reconcile's refusal
        events = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
        return next((e["message"] for e in events if "were deleted" in e["message"]), "")

    message = wait_for(said, what="a ChildRefused event saying the made trainer was deleted")
    assert (
        f'Pod/{name}-trainer-1 was refused by the API server: pods "{name}-trainer-1" is forbidden: '
        in message
    )
    assert quota_said in message and "exceeded quota" in message
    assert f"the pods of the gang made before it ({name}-trainer-0) were deleted" in message
    waiting = conditions(kube, name, ns)["TrainersReady"]
    assert waiting["status"] == "False" and "exceeded quota" in waiting["message"], waiting
    # not a LimitRange's refusal of the one pod read as "quota full": the quota's own answer, on the create
    assert "exceed a ResourceQuota together" not in message and "maximum cpu" not in message
    # none left, nor its quota share (with the LimitRange each reconcile makes the first trainer and
    # deletes it again within its apply: the quota's answer for the gang is known only on the create)
    wait_for(
        lambda: names_of(kube, "pod", ns, name) == [] and quota.used == parse_quantity(taken), what="none"
    )

    # the quota's room back (the other client's pod gone, or the LimitRange's quota raised): both made
    quota.used, quota.hard = parse_quantity("0"), parse_quantity("2")
    quota.pod_max = None
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == trainers, what="both trainers")
    assert quota.used == parse_quantity("2")


def test_a_gang_left_partial_whose_missing_pod_cannot_be_made_is_undone(
    kube, operator, ns: str, monkeypatch
) -> None:
    """A trainer deleted before the trainers ran (or an apply cut short by a restart of the operator
    between its creates), and the quota's room taken meanwhile: its create was refused, and the
    trainer made before waited in rendezvous up to the trainers' timeout (600 s), holding its quota.
    Now the gang's pods made before are deleted too (only this training's), said in the ChildRefused
    event and TrainersReady, and the whole gang is made once the quota has room for all."""
    quota = quota_on_pods(monkeypatch, ns, "2")  # a trainer asks for 1 cpu: room for the gang of 2
    name = "part"
    to_pods(kube, ns, name)
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == trainers, what="both trainers")
    status_patch(kube, "pod", trainers[0], ns, {"phase": "Running"})  # waiting in rendezvous for rank 1
    kube("delete", "pod", trainers[1], "-n", ns)  # its quota share taken by another client's pod meanwhile

    def said() -> str:
        events = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
        return next((e["message"] for e in events if "the gang was partial" in e["message"]), "")

    message = wait_for(said, what="a ChildRefused event saying the partial gang was undone")
    assert f"Pod/{name}-trainer-1 was refused by the API server: " in message and "exceeded quota" in message
    assert f"the gang was partial (made before: {name}-trainer-0;" in message, message
    assert "none of the 2 pods of the gang is made" in message
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == [], what="the trainer made before deleted")
    waiting = conditions(kube, name, ns)["TrainersReady"]  # the latest reconcile's: the whole gang waits
    assert waiting["status"] == "False" and "exceeded quota" in waiting["message"], waiting
    assert get(kube, "gtr", name, ns)["status"].get("restarts", 0) == 0  # not a failure of the attempt
    quota.used, quota.pods = parse_quantity("0"), {}  # the other client's pod gone: the gang made whole
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == trainers, what="both trainers again")


LOCALITY = SPEC.replace("{{locality: none}}", "{{locality: partition}}")


def test_worker_pods_with_sidecars_are_asked_of_the_quota_in_full(
    kube, operator, ns: str, monkeypatch
) -> None:
    """Worker pods (partition locality): each a trainer (1 cpu) and its shard server, a native sidecar
    (1 cpu): 2 cpu a pod, 4 the gang. The one pod of the dry run carried only the first pod's init
    containers: 3 cpu, so a quota of 3500m admitted the gang and refused the second worker's create."""
    quota = quota_on_pods(monkeypatch, ns, "3500m")
    name = "wk"
    to_pods(kube, ns, name, LOCALITY)

    def said() -> str:
        messages = [c.get("message", "") for c in conditions(kube, name, ns).values()]
        return next((m for m in messages if "ResourceQuota" in m or "were deleted" in m), "")

    message = wait_for(said, what="a condition saying the quota")
    assert "exceed a ResourceQuota together" in message and "requests.cpu=4," in message, message
    assert names_of(kube, "pod", ns, name) == [] and quota.used == 0
    quota.hard = parse_quantity("4")
    workers = [f"{name}-worker-0", f"{name}-worker-1"]
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == workers, what="both workers")


def test_an_undone_gang_waits_before_it_is_made_again(kube, operator, ns: str, monkeypatch) -> None:
    """A LimitRange hiding a full quota: the pods each undo made and deleted were child events, each
    asking for a reconcile at once, whose dry runs said yes again: 514 pod creates in 5 s. Now the gang
    is held after an undo (gang_holds.py: 5 s, doubling): no create for 5 s after the first try."""
    quota = quota_on_pods(monkeypatch, ns, "1500m", pod_max="1500m")
    creates: list[float] = []  # when each real create was asked
    create = quota.create

    def counted(body: dict, namespace: str, **kw: object) -> object:
        if namespace == ns and not kw.get("dry_run"):
            creates.append(time.monotonic())
        return create(body=body, namespace=namespace, **kw)

    monkeypatch.setattr(quota, "create", counted)
    name = "held"
    to_pods(kube, ns, name)
    wait_for(lambda: len(creates) >= 2, what="the first try: a trainer made, the second refused")
    time.sleep(3)  # under the first hold: the operator's timer (1 s) ticks meanwhile
    tried = creates[1]
    assert [round(t - tried, 2) for t in creates[2:] if t - tried < 4.5] == []  # held: 400 creates before
    waiting = conditions(kube, name, ns)["TrainersReady"]
    assert "were deleted" in waiting["message"] and "tried again in 5 s to 1 min" in waiting["message"]
    quota.hard, quota.pod_max = parse_quantity("2"), None  # room: made once the hold ends
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == trainers, what="both trainers")


FOREIGN = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
"""


def test_a_gang_pods_name_held_by_another_pod_deletes_the_pods_made_before_it(
    kube, operator, ns: str
) -> None:
    """The second trainer's name holds someone else's pod: its dry run's 409 was no refusal that waits,
    so the first trainer was made and waited for its peer up to the trainers' timeout (600 s); then,
    with the made pods undone on the create's 409, every reconcile made and deleted it again. Now the
    dry run's 409 from another's pod holds the training (NameTaken) before any pod is made."""
    name = "taken"
    kube("apply", "-n", ns, "-f", "-", input=FOREIGN.format(name=f"{name}-trainer-1"))
    to_pods(kube, ns, name)
    held = lambda: conditions(kube, name, ns).get("SpecValid", {}).get("reason") == "NameConflict"  # noqa: E731
    assert wait_for(held, what="SpecValid NameConflict")
    for _ in range(6):  # the operator's timer (1 s) ticks meanwhile: no reconcile makes a trainer
        assert kube("get", "pods", "-n", ns, "-o", "name").split() == [f"pod/{name}-trainer-1"]
        time.sleep(0.5)


def test_a_partial_gang_whose_missing_pods_name_is_held_by_another_pod_deletes_the_pods_made_before(
    kube, operator, ns: str, monkeypatch
) -> None:
    """A trainer deleted before the trainers ran, its name then taken by someone else's pod: the dry
    run's 409 held the training (NameConflict) before any pod was made, but the trainer made before
    stayed, waiting in rendezvous for its peer up to the trainers' timeout (600 s) and holding its
    share of the quota, unlike a create's 409, which deletes the gang's pods made before it."""
    name = "ptaken"
    to_pods(kube, ns, name)
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == trainers, what="both trainers")
    status_patch(kube, "pod", trainers[0], ns, {"phase": "Running"})  # waiting in rendezvous for rank 1
    acts = handlers.may_act  # the operator held off this namespace while the name changes hands
    monkeypatch.setattr(handlers, "may_act", lambda namespace, n: namespace != ns and acts(namespace, n))
    kube("delete", "pod", trainers[1], "-n", ns)
    kube("apply", "-n", ns, "-f", "-", input=FOREIGN.format(name=trainers[1]))
    monkeypatch.setattr(handlers, "may_act", acts)
    handlers.reconcile(ns, name)
    held = lambda: conditions(kube, name, ns).get("SpecValid", {}).get("reason") == "NameConflict"  # noqa: E731
    assert wait_for(held, what="SpecValid NameConflict")
    assert wait_for(lambda: names_of(kube, "pod", ns, name) == [], what="the trainer made before deleted")
    assert kube("get", "pods", "-n", ns, "-o", "name").split() == [f"pod/{trainers[1]}"]  # the other's kept
