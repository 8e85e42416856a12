"""The handlers' own logic without an API server: the timed requeue a plan asks for (its deadline)."""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import kopf
import pytest
from kopf._core.actions import invocation

from graphtrain.operator import handlers
from graphtrain.operator.workqueue import WorkQueue


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


def test_a_timer_tick_needs_no_thread_of_kopfs_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf holds a deletion until the training's timer handler returns. A sync on_timer waits for a
    thread of kopf's executor, which a burst of deletions fills with on_delete handlers (each a dozen
    API calls): 300 trainings deleted at once held 180 of them for 30 s, and kopf, rechecking, ran
    their on_delete a second time. Here every thread of the executor is busy; the tick still returns."""
    asked: list[tuple[str, str]] = []
    work = WorkQueue(lambda key: None, workers=1)  # never started: add() only records the key
    monkeypatch.setattr(work, "add", lambda key, periodic=False: asked.append(key))
    monkeypatch.setattr(handlers, "_queue", work)
    settings = kopf.OperatorSettings()
    settings.execution.executor = ThreadPoolExecutor(max_workers=1)
    busy = threading.Event()
    settings.execution.executor.submit(busy.wait, 10)  # the one thread, taken by another handler
    try:
        tick = invocation.invoke(
            handlers.on_timer, settings=settings, kwargs={"name": "a", "namespace": "ns", "status": {}}
        )
        asyncio.run(asyncio.wait_for(tick, timeout=5))
    finally:
        busy.set()
        settings.execution.executor.shutdown(wait=True)
    assert asked == [("ns", "a")]


def test_a_gone_trainings_lock_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-training locks were a defaultdict that kept one lock (and its key) for every training
    the operator ever reconciled, for its whole life: a lock now lives while a reconcile holds or
    waits for it."""
    monkeypatch.setattr(handlers.k8s, "observe", lambda namespace, name: None)
    for i in range(50):
        handlers.reconcile("ns", f"gone-{i}")
    assert not [key for key in list(handlers._locks.keys()) if key[0] == "ns"]
