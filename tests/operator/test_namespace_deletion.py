"""A namespace being deleted: its trainings go with it, and while the namespace controller deletes
their children, a reconcile that sees a child gone tries to make it again and the API server answers
403 (NamespaceTerminating). Raised, each such create was a traceback in the operator's log and a retry
until the training's own deletion came; now the plan's creates stop there and the rest is written."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.rest import ApiException

from graphtrain.operator import k8s
from graphtrain.operator.context import Action, Plan
from graphtrain.operator.observation import Observed
from graphtrain.operator.refusals import namespace_terminating
from tests.operator.test_admission_refusals import bare_pods

TERMINATING = {
    "kind": "Status",
    "status": "Failure",
    "message": 'pods "wn-trainer-1" is forbidden: unable to create new content in namespace ml because it '
    "is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "wn-trainer-1",
        "kind": "pods",
        "causes": [{"reason": "NamespaceTerminating", "message": "namespace ml is being terminated"}],
    },
    "code": 403,
}
RBAC = {  # the authorizer's words: the operator's own rights
    **TERMINATING,
    "message": 'pods is forbidden: User "system:serviceaccount:graphtrain:graphtrain-operator" cannot create '
    'resource "pods" in API group "" in the namespace "ml"',
    "details": {"kind": "pods"},
}


def forbidden(body: dict) -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps(body)
    return exc


def test_a_namespace_terminating_refusal_is_told_from_any_other() -> None:
    assert namespace_terminating(403, json.dumps(TERMINATING))
    assert not namespace_terminating(403, json.dumps(RBAC))  # the operator's rights: an error
    assert not namespace_terminating(409, json.dumps(TERMINATING))
    assert not namespace_terminating(403, "not json") and not namespace_terminating(403, None)


class Api:
    """Every kind's API: creates answer `refused`, the calls are recorded."""

    def __init__(self, refused: ApiException):
        self.refused, self.calls = refused, []
        self.status = self

    def create(self, **kw: Any) -> Any:
        self.calls.append(("dry-run" if kw.get("dry_run") else "create", kw["body"]["metadata"]["name"]))
        raise self.refused

    def patch(self, **kw: Any) -> Any:
        self.calls.append(("patch", kw["name"]))


def test_creates_in_a_terminating_namespace_stop_without_an_error(monkeypatch) -> None:
    api = Api(forbidden(TERMINATING))
    monkeypatch.setattr(k8s, "_res", lambda *a: api)
    monkeypatch.setattr(k8s, "post_event", lambda *a: None)
    training = {"metadata": {"name": "wn", "namespace": "ml", "uid": "u"}, "status": {}}
    pods = bare_pods("wn-trainer", 2)
    plan = Plan([Action("create", p) for p in pods], {"phase": "Training"}, [])
    assert k8s.apply(plan, Observed(training))
    dry_runs = [("dry-run", f"wn-trainer-{r}") for r in ("0-gang", "0", "1")]  # they say nothing here
    assert api.calls == [
        *dry_runs,
        ("create", "wn-trainer-0"),
        ("patch", "wn"),
    ]  # no second create; the status
