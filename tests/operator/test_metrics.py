"""The operator's metrics: failed Kubernetes API calls counted by verb (the 404s and 409s it expects
are not failures), restarts by role from two statuses, trainings exported until forgotten."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from graphtrain.operator import endpoints, k8s, lease_store
from graphtrain.operator.context import Action, Plan
from graphtrain.operator.observation import Observed


@pytest.fixture
def metrics(monkeypatch: pytest.MonkeyPatch) -> endpoints.OperatorMetrics:
    m = endpoints.OperatorMetrics()
    monkeypatch.setattr(k8s, "_count_error", m.api_error)
    return m


def errors(m: endpoints.OperatorMetrics) -> dict[str, float]:
    return {
        v: m.registry.get_sample_value("graphtrain_operator_api_errors_total", {"verb": v}) or 0
        for v in endpoints.VERBS
    }


class FakeResource:
    """One kind's API: every call answers with `outcome` (an exception is raised)."""

    def __init__(self, outcome: dict[str, BaseException | None]):
        self.outcome = outcome
        self.status = self

    def _answer(self, verb: str) -> Any:
        exc = self.outcome.get(verb)
        if exc is not None:
            raise exc
        # the object itself (serialize=False: its JSON), owned by the test's training (uid "u"): a
        # create's 409 is then an earlier reconcile's, not another's object under the name
        raw = json.dumps({"metadata": {"name": "x", "ownerReferences": [{"uid": "u"}]}}).encode()
        return type("Obj", (), {"to_dict": lambda _: {"metadata": {"name": "x"}}, "items": [], "data": raw})()

    def get(self, **kw: Any) -> Any:
        return self._answer("list" if "label_selector" in kw else "get")

    def create(self, **kw: Any) -> Any:
        return self._answer("create")

    def replace(self, **kw: Any) -> Any:
        return self._answer("replace")

    def delete(self, **kw: Any) -> Any:
        return self._answer("delete")

    def patch(self, **kw: Any) -> Any:
        return self._answer("patch")


def api(status: int) -> ApiException:
    return ApiException(status=status, reason="x")


@pytest.mark.parametrize(
    ("verb", "raised", "expected", "counted"),
    [
        ("get", api(404), (404,), False),  # gone: what observe expects
        ("get", api(500), (404,), True),
        ("create", api(409), (404, 409), False),  # another reconcile got there first
        ("create", api(422), (404, 409), True),  # refused: a failure, said as an event too
        ("delete", api(404), (404, 409), False),
        ("patch", api(403), (), True),
        ("list", urllib3.exceptions.ProtocolError("reset"), (), True),  # no answer at all
        ("replace", OSError("unreachable"), (409,), True),
    ],
)
def test_a_failed_call_is_counted_by_verb_unless_expected(
    metrics: endpoints.OperatorMetrics,
    verb: str,
    raised: BaseException,
    expected: tuple[int, ...],
    counted: bool,
) -> None:
    with pytest.raises(type(raised)), k8s.calling(verb, expected):
        raise raised
    assert errors(metrics) == {v: float(counted and v == verb) for v in endpoints.VERBS}


def test_a_call_that_succeeds_is_not_counted(metrics: endpoints.OperatorMetrics) -> None:
    with k8s.calling("get"):
        pass
    assert set(errors(metrics).values()) == {0}


def test_the_lease_client_counts_only_real_failures(metrics: endpoints.OperatorMetrics, monkeypatch) -> None:
    outcome: dict[str, BaseException | None] = {"get": api(404), "create": api(409), "replace": api(409)}
    monkeypatch.setattr(k8s, "_res", lambda *a: FakeResource(outcome))
    lease = lease_store.LeaseClient("ns", "l", timeout=1)
    assert lease.get() is None and lease.create({}) is None and lease.update({}, {}) is None
    assert set(errors(metrics).values()) == {0}
    outcome.update(get=api(503), replace=api(500))
    for call in (lease.get, lambda: lease.update({}, {})):
        with pytest.raises(lease_store.LeaseUnavailable):
            call()
    assert errors(metrics) == {**dict.fromkeys(endpoints.VERBS, 0.0), "get": 1.0, "replace": 1.0}


def test_apply_counts_a_refused_create_and_a_failed_status_patch(
    metrics: endpoints.OperatorMetrics, monkeypatch
) -> None:
    outcome: dict[str, BaseException | None] = {"create": api(409), "delete": api(404), "patch": api(500)}
    monkeypatch.setattr(k8s, "_res", lambda *a: FakeResource(outcome))
    monkeypatch.setattr(k8s, "post_event", lambda *a: None)
    training = {"metadata": {"name": "t", "namespace": "ns", "uid": "u"}, "status": {}}
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t-config"}}
    plan = Plan([Action("create", obj), Action("delete", obj)], {"phase": "Pending"}, [])
    with pytest.raises(ApiException):
        k8s.apply(plan, Observed(training))
    assert errors(metrics) == {**dict.fromkeys(endpoints.VERBS, 0.0), "patch": 1.0}  # 409 and 404: expected
    assert not k8s.apply(plan, Observed(training), fence=lambda: False)  # fenced: nothing written


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ({}, {"restarts": 0}, {"trainer": 0, "shard": 0}),
        ({"restarts": 1}, {"restarts": 2}, {"trainer": 1, "shard": 0}),
        (
            {"shards": [{"index": 0, "restarts": 1}, {"index": 1}]},
            {"shards": [{"index": 0, "restarts": 3}, {"index": 1, "restarts": 1}]},
            {"trainer": 0, "shard": 3},
        ),
        ({}, {"shards": [{"index": 0, "restarts": 2}]}, {"trainer": 0, "shard": 2}),  # first seen
        (
            {"restarts": 3, "shards": [{"index": 0, "restarts": 2}]},
            {"restarts": 3},
            {"trainer": 0, "shard": 0},
        ),
        ({"restarts": 3}, {"restarts": 1}, {"trainer": 0, "shard": 0}),  # never negative
    ],
)
def test_restarts_between_two_statuses(old: dict, new: dict, expected: dict[str, int]) -> None:
    assert endpoints.restarts(old, new) == expected


def test_a_training_is_exported_until_forgotten() -> None:
    m = endpoints.OperatorMetrics()
    reg = m.registry
    m.training("ns", "a", {"restarts": 0}, {"phase": "Restarting", "restarts": 1})
    m.training("ns", "b", {}, {"phase": "Training", "shards": [{"index": 0, "restarts": 2}]})
    assert reg.get_sample_value("graphtrain_operator_restarts_total", {"role": "trainer"}) == 1
    assert reg.get_sample_value("graphtrain_operator_restarts_total", {"role": "shard"}) == 2
    phase = {"namespace": "ns", "training": "a", "phase": "Restarting"}
    assert reg.get_sample_value("graphtrain_training_phase", phase) == 1
    assert reg.get_sample_value("graphtrain_training_restarts", {"namespace": "ns", "training": "a"}) == 1
    m.training("ns", "a", {}, {"phase": "NotAPhase"})  # does not parse: the last one stays
    assert reg.get_sample_value("graphtrain_training_phase", phase) == 1
    m.forget("ns", "a")
    assert reg.get_sample_value("graphtrain_training_phase", phase) is None
    assert reg.get_sample_value("graphtrain_training_epoch", {"namespace": "ns", "training": "b"}) == 0
    # a suspension's status removes its shards and startTime (None in the merge patch): still exported
    m.training(
        "ns", "b", {"phase": "Training", "shards": [{"index": 0}]}, {"phase": "Suspended", "shards": None}
    )
    suspended = {"namespace": "ns", "training": "b", "phase": "Suspended"}
    assert reg.get_sample_value("graphtrain_training_phase", suspended) == 1
    m.reconciled("ok", 0.25)
    assert reg.get_sample_value("graphtrain_operator_reconciles_total", {"result": "ok"}) == 1
    assert reg.get_sample_value("graphtrain_operator_reconciles_total", {"result": "skipped"}) == 0
    assert reg.get_sample_value("graphtrain_operator_reconcile_seconds_sum") == 0.25


class ThisThread:
    """The handlers' metrics as seen from the test's own thread only. The session operator
    (tests/operator/conftest.py) may run in this pytest process, and its timed reconciles read
    handlers._metrics too: one of them counted a second reconcile in CI."""

    def __init__(self, metrics: endpoints.OperatorMetrics) -> None:
        self._metrics, self._thread = metrics, threading.get_ident()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._metrics, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs) if threading.get_ident() == self._thread else None

        return call


def test_reconcile_counts_each_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphtrain.operator import handlers

    m = endpoints.OperatorMetrics()
    monkeypatch.setattr(handlers, "_metrics", ThisThread(m))
    monkeypatch.setattr(handlers, "requeue", lambda *a: None)
    training = {"metadata": {"name": "t", "namespace": "ns", "uid": "u"}, "status": {}}
    observed: list[Any] = [Observed(training)]
    monkeypatch.setattr(handlers.k8s, "observe", lambda ns, name, *_, **__: observed[0])
    monkeypatch.setattr(handlers, "plan", lambda *a, **kw: Plan([], {"phase": "Training"}, []))
    monkeypatch.setattr(handlers.k8s, "apply", lambda *a, **kw: True)

    def counts() -> dict[str, float]:
        return {
            r: m.registry.get_sample_value("graphtrain_operator_reconciles_total", {"result": r}) or 0
            for r in endpoints.RESULTS
        }

    handlers.reconcile("ns", "t")
    assert counts() == {"ok": 1, "error": 0, "skipped": 0}
    assert (
        m.registry.get_sample_value(
            "graphtrain_training_phase", {"namespace": "ns", "training": "t", "phase": "Training"}
        )
        == 1
    )
    monkeypatch.setattr(handlers, "_fence", lambda: False)  # not leading
    handlers.reconcile("ns", "t")
    monkeypatch.setattr(handlers, "_fence", lambda: True)
    observed[0] = None  # gone: its metrics go
    handlers.reconcile("ns", "t")
    assert counts() == {"ok": 1, "error": 0, "skipped": 2}
    assert (
        m.registry.get_sample_value(
            "graphtrain_training_phase", {"namespace": "ns", "training": "t", "phase": "Training"}
        )
        is None
    )

    def broken(ns: str, name: str, *_: object, **__: object) -> None:
        raise RuntimeError("the API server is down")

    monkeypatch.setattr(handlers.k8s, "observe", broken)
    with pytest.raises(RuntimeError):
        handlers.reconcile("ns", "t")
    assert counts() == {"ok": 1, "error": 1, "skipped": 2}
    assert m.registry.get_sample_value("graphtrain_operator_reconcile_seconds_count") == 4


def test_a_reconcile_of_a_training_being_deleted_does_not_export_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """handlers.ended forgets the training once; a timed reconcile that waited for the lock meanwhile
    and observed it still there (held by a finalizer) re-exported it for good. A reconcile of a
    training with a deletionTimestamp counts its restarts but exports nothing."""
    from graphtrain.operator import handlers

    m = endpoints.OperatorMetrics()
    monkeypatch.setattr(handlers, "_metrics", ThisThread(m))
    monkeypatch.setattr(handlers, "requeue", lambda *a: None)
    going = {
        "metadata": {"name": "t", "namespace": "ns", "uid": "u", "deletionTimestamp": "2026-11-27T00:00:00Z"}
    }
    monkeypatch.setattr(handlers.k8s, "observe", lambda ns, name, *_, **__: Observed({**going, "status": {}}))
    monkeypatch.setattr(handlers, "plan", lambda *a, **kw: Plan([], {"phase": "Failed"}, []))
    monkeypatch.setattr(handlers.k8s, "apply", lambda *a, **kw: True)
    m.training("ns", "t", {}, {"phase": "Training"})  # exported before the delete
    handlers.reconcile("ns", "t")
    labels = {"namespace": "ns", "training": "t", "phase": "Failed"}
    assert m.registry.get_sample_value("graphtrain_training_phase", labels) is None
    assert m.registry.get_sample_value("graphtrain_operator_reconciles_total", {"result": "ok"}) == 1
