"""The handlers' own logic without an API server: the timed requeue a plan asks for (its deadline)."""

from __future__ import annotations

import queue

import pytest

from graphtrain.operator import handlers


@pytest.fixture
def reconciled(monkeypatch: pytest.MonkeyPatch) -> queue.Queue:
    """The trainings of namespace "ns" reconcile() is called for, instead of reconciling them; any other
    (the session operator's own requeues, live in this process) is reconciled as usual."""
    calls: queue.Queue = queue.Queue()
    real = handlers.reconcile

    def record(namespace: str, name: str) -> None:
        calls.put((namespace, name)) if namespace == "ns" else real(namespace, name)

    monkeypatch.setattr(handlers, "reconcile", record)
    monkeypatch.setattr(handlers, "REQUEUE_SLACK", 0.0)
    return calls


def test_a_requeue_reconciles_once_when_it_falls(reconciled: queue.Queue) -> None:
    handlers.requeue("ns", "a", 0.01)
    assert reconciled.get(timeout=30) == ("ns", "a")
    assert reconciled.empty()


def test_a_new_plan_replaces_the_pending_requeue_and_none_cancels_it(reconciled: queue.Queue) -> None:
    handlers.requeue("ns", "b", 3600)
    first = handlers._timers[("ns", "b")]
    handlers.requeue("ns", "b", 1800)
    assert first.finished.is_set()  # cancelled: it will never run
    second = handlers._timers[("ns", "b")]
    handlers.requeue("ns", "b", None)
    assert second.finished.is_set() and ("ns", "b") not in handlers._timers
    assert reconciled.empty()


def test_a_failed_requeued_reconcile_is_logged(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    real = handlers.reconcile

    def fail(namespace: str, name: str) -> None:
        if namespace != "ns":  # the session operator's own requeues
            return real(namespace, name)
        raise RuntimeError("the API server is away")

    monkeypatch.setattr(handlers, "reconcile", fail)
    monkeypatch.setattr(handlers, "REQUEUE_SLACK", 0.0)
    handlers.requeue("ns", "c", 0.01)
    timer = handlers._timers.pop(("ns", "c"))
    timer.join(timeout=30)
    assert not timer.is_alive()
    assert "requeued reconcile of ns/c failed" in caplog.text and "the API server is away" in caplog.text
    assert ("ns", "c") in handlers._timers  # tried again a timer period later
    handlers.requeue("ns", "c", None)
