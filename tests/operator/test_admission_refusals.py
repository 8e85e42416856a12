"""A create that an admission plugin forbids (403): a ResourceQuota too small for the trainers, one that
asks for limits the spec gives none of, a LimitRange whose max is below the spec's requests, Pod
Security. Raised, each reconcile was a traceback in the operator's log, no event was posted, and the
status stayed what the last plan wrote (PartitionReady "job ... is running" after the job succeeded,
the worker pods refused). Now the refusal is said once as a Warning event and in the condition of the
stage the training waits at, the creates after it wait, and the next reconcile tries again (it goes on
once the quota is raised). The authorizer's 403 (a right the operator's Role lacks, such as the chart's
default rbac.podGroups [] withholds for a gang) is said alike, and logged as an error.

The test API server runs no admission plugin, so these answers are the API server's literal words."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from graphtrain.operator import k8s, refusals
from graphtrain.operator.context import Action, Plan
from graphtrain.operator.observation import Observed


def status_body(message: str, **details: Any) -> str:
    return json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "message": message,
            "reason": "Forbidden",
            "details": {"kind": "pods", **details},
            "code": 403,
        }
    )


QUOTA = (
    'pods "wn-worker-0" is forbidden: exceeded quota: compute, requested: requests.cpu=2, '
    "used: requests.cpu=0, limited: requests.cpu=1"
)
LIMITS = 'pods "wn-worker-0" is forbidden: failed quota: compute: must specify limits.cpu for: trainer-0'
RANGE = 'pods "wn-worker-0" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
PSS = 'pods "wn-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'
RBAC = (
    'pods is forbidden: User "system:serviceaccount:graphtrain:graphtrain-operator" cannot create '
    'resource "pods" in API group "" in the namespace "ml"'
)
TERMINATING = status_body(
    "unable to create new content in namespace ml because it is being terminated",
    causes=[{"reason": "NamespaceTerminating"}],
)


@pytest.mark.parametrize("message", [QUOTA, LIMITS, RANGE, PSS], ids=["quota", "limits", "range", "pss"])
def test_an_admission_plugins_refusal_is_told_from_the_authorizers(message: str) -> None:
    assert refusals.admission_forbidden(403, status_body(message))
    assert not refusals.admission_forbidden(422, status_body(message))


def test_the_authorizers_and_the_namespaces_refusals_are_not_admissions() -> None:
    assert not refusals.admission_forbidden(403, status_body(RBAC))
    assert not refusals.admission_forbidden(403, TERMINATING)
    assert not refusals.admission_forbidden(403, "not json") and not refusals.admission_forbidden(403, None)


def conditions(partition: str = "True", shards: str = "False") -> list[dict]:
    return [
        {"type": "SpecValid", "status": "True", "reason": "Valid", "message": ""},
        {"type": "PartitionReady", "status": partition, "reason": "Partitioned", "message": "done"},
        {"type": "ShardsReady", "status": shards, "reason": "Waiting", "message": "0/2 shard servers ready"},
        {"type": "TrainersReady", "status": "False", "reason": "NotStarted", "message": ""},
    ]


def test_the_refusal_is_said_in_the_condition_the_training_waits_at() -> None:
    status = {"phase": "Starting", "conditions": conditions()}
    said = refusals.told(status, {"Pod/wn-worker-0": QUOTA})
    by_type = {c["type"]: c for c in said["conditions"]}
    assert by_type["ShardsReady"]["message"] == (
        f"0/2 shard servers ready; Pod/wn-worker-0 was refused by the API server: {QUOTA}"
    )
    assert by_type["ShardsReady"]["status"] == "False" and by_type["ShardsReady"]["reason"] == "Waiting"
    assert by_type["PartitionReady"]["message"] == "done"  # a stage done is left as it is
    assert status["conditions"] == conditions()  # not changed in place
    assert refusals.told(status, {}) is status


class Api:
    """Every kind's API: pod creates answer `refused`, other creates succeed; the calls are recorded."""

    def __init__(self, refused: ApiException):
        self.refused, self.calls, self.patched = refused, [], []
        self.status = Status(self)

    def create(self, **kw: Any) -> Any:
        self.calls.append(("dry-run" if kw.get("dry_run") else "create", kw["body"]["metadata"]["name"]))
        if kw["body"]["kind"] == "Pod":
            raise self.refused
        return Answer(kw["body"])


class Answer:
    """An answer asked for with serialize=False: its JSON in `data`."""

    def __init__(self, obj: dict):
        self.data = json.dumps(obj)


class Status:
    def __init__(self, api: Api):
        self.api = api

    def patch(self, **kw: Any) -> None:
        self.api.patched.append(kw["body"]["status"])


def forbidden(message: str) -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = status_body(message)
    return exc


def bare_pods(prefix: str, n: int) -> list[dict]:
    """Pod creates as apply() sees them, no more: `prefix`-0 .. n-1 (a gang: they are dry-run first)."""
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}-{i}"}, "spec": {"containers": []}}
        for i in range(n)
    ]


def test_a_quota_refusal_is_said_once_and_the_creates_after_it_wait(monkeypatch) -> None:
    api = Api(forbidden(QUOTA))
    posted: list[Any] = []
    monkeypatch.setattr(k8s, "_res", lambda *a: api)
    monkeypatch.setattr(k8s, "_cache", None)  # the session's operator may have set its own
    monkeypatch.setattr(k8s, "post_event", lambda body, event: posted.append(event))
    training = {"metadata": {"name": "wn", "namespace": "ml", "uid": "u-quota"}, "status": {}}
    pods = bare_pods("wn-worker", 2)
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "wn-trainers"}}
    actions = [Action("create", pdb), *(Action("create", p) for p in pods)]
    plan = Plan(actions, {"phase": "Starting", "conditions": conditions()}, [])
    assert k8s.apply(plan, Observed(training))  # no traceback: the status and the events are written
    # the worker pods dry-run first (gang_admission.py), as one pod then alone until one is refused:
    # the one pod over quota, the first alone too (its words), none is made; 2 dry runs, not N+1
    calls = [("dry-run", "wn-worker-0-gang"), ("dry-run", "wn-worker-0"), ("create", "wn-trainers")]
    assert api.calls == calls
    (status,) = api.patched
    shards = next(c for c in status["conditions"] if c["type"] == "ShardsReady")
    said = f"Pod/wn-worker-0 was refused by the API server: {QUOTA}; none of the 2 pods of the gang is made "
    said += "until all are admitted (a dry run)"
    assert shards["message"].endswith(said)
    assert [(e.type.value, e.reason) for e in posted] == [("Warning", "ChildRefused")]
    assert posted[0].message == said
    # the next reconcile tries again, refused alike: said no second time
    assert k8s.apply(plan, Observed({**training, "status": status}))
    assert len(posted) == 1 and len(api.patched) == 1  # the status already says it


POD_GROUPS = (
    'podgroups.scheduling.volcano.sh is forbidden: User "system:serviceaccount:graphtrain:graphtrain-'
    'operator" cannot create resource "podgroups" in API group "scheduling.volcano.sh" in the namespace "ml"'
)


def test_a_right_the_chart_withholds_is_said_with_what_grants_it(monkeypatch, caplog) -> None:
    """The chart's default rbac.podGroups [] and a gang training on a cluster with Volcano: its PodGroup
    was a traceback at each reconcile and the training read "job ... is running" for ever."""
    api = Api(forbidden(POD_GROUPS))
    api.create = lambda **kw: (_ for _ in ()).throw(api.refused)  # type: ignore[method-assign]
    posted: list[Any] = []
    monkeypatch.setattr(k8s, "_res", lambda *a: api)
    monkeypatch.setattr(k8s, "post_event", lambda body, event: posted.append(event))
    training = {"metadata": {"name": "wn", "namespace": "ml", "uid": "u-rbac"}, "status": {}}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "wn"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wn-worker-0"}}
    plan = Plan([Action("create", group), Action("create", pod)], {"conditions": conditions()}, [])
    with caplog.at_level("WARNING", logger="graphtrain.operator"):
        assert k8s.apply(plan, Observed(training))
    (status,) = api.patched
    shards = next(c for c in status["conditions"] if c["type"] == "ShardsReady")
    assert f"PodGroup/wn was refused by the API server: {POD_GROUPS}: " in shards["message"]
    assert "--set rbac.podGroups={volcano} or {coscheduling}" in shards["message"]
    assert [(e.type.value, e.reason) for e in posted] == [("Warning", "ChildRefused")]
    (line,) = [r for r in caplog.records if "refused by the API server" in r.getMessage()]
    assert line.levelname == "ERROR" and not line.exc_info  # a right missing: an error, no traceback
    assert refusals.rights_forbidden(403, status_body(RBAC)) and not refusals.rights_forbidden(
        403, TERMINATING
    )
    assert not refusals.rights_forbidden(403, status_body(QUOTA))


def test_a_webhooks_400_and_an_unserved_kind_are_said_in_the_condition_too(monkeypatch) -> None:
    """A validating webhook's denial comes as 400 unless the webhook sets a code (Kyverno's), an
    invalid child as 422: they were said in a Warning event only, the condition reading "creating 2
    worker pods" while none was."""
    webhook = 'admission webhook "validate.kyverno.svc-fail" denied the request: label team is required'
    denied = ApiException(status=400, reason="Bad Request")
    denied.body = json.dumps({"kind": "Status", "message": webhook, "reason": "BadRequest", "code": 400})
    api = Api(denied)
    monkeypatch.setattr(k8s, "_res", lambda *a: api)
    monkeypatch.setattr(k8s, "post_event", lambda *a: None)
    training = {"metadata": {"name": "wn", "namespace": "ml", "uid": "u-webhook"}, "status": {}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wn-worker-0"}}
    assert k8s.apply(Plan([Action("create", pod)], {"conditions": conditions()}, []), Observed(training))
    shards = next(c for c in api.patched[-1]["conditions"] if c["type"] == "ShardsReady")
    assert shards["message"].endswith(f"Pod/wn-worker-0 was refused by the API server: {webhook}")
