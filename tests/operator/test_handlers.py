"""The handlers' own logic without an API server: the timed requeue a plan asks for (its deadline)."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

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


def event(name: str, status: dict | None = None, **metadata: str) -> dict:
    """kopf's keyword arguments of a GraphTraining's watch event in namespace "ns"."""
    body = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **metadata}}
    return {"name": name, "namespace": "ns", "uid": f"uid-{name}", "body": {**body, "status": status or {}}}


def test_the_tick_asks_for_the_trainings_the_watch_events_showed_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """The periodic reconciles are a thread of ours, not a kopf timer (a timer makes kopf add its
    finalizer): the tick asks the work queue's periodic lane for each training not finished."""
    asked: list[tuple[tuple[str, str], bool]] = []
    work = WorkQueue(lambda key: None, workers=1)  # never started: add() only records the key
    monkeypatch.setattr(work, "add", lambda key, periodic=False: asked.append((key, periodic)))
    monkeypatch.setattr(handlers, "_known", {})
    ended = {"type": "Succeeded", "status": "True", "reason": "Completed"}
    asyncio.run(handlers.on_event(type=None, **event("new")))  # the first list: no status yet
    asyncio.run(
        handlers.on_event(type="ADDED", **event("done", {"phase": "Succeeded", "conditions": [ended]}))
    )
    asyncio.run(handlers.on_event(type="MODIFIED", **event("running", {"phase": "Training"})))
    asyncio.run(
        handlers.on_event(type="MODIFIED", **event("running", {"phase": "Succeeded", "conditions": [ended]}))
    )
    assert handlers.tick(work) == 1 and asked == [(("ns", "new"), True)]
    asked.clear()  # a sweep: every one known, whose DELETED a watch gap may have taken
    monkeypatch.setattr(handlers.k8s, "training_versions", lambda namespaces: {})
    assert handlers.tick(work, sweep=True) == 3 and {key for key, _ in asked} == {
        ("ns", n) for n in ("new", "done", "running")
    }


def test_a_trainings_end_deletes_its_children_once_and_forgets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gone (no finalizer holds it): its children are deleted (the garbage collector would, slower) and
    its metrics forgotten. Held by someone else's finalizer: the same, once, and a reconcile writes
    the status that says every role stopped; its DELETED event later does nothing more."""
    deleted: list[tuple[str, str, str]] = []
    forgotten: list[tuple[str, str]] = []
    reconciled: list[str] = []
    monkeypatch.setattr(handlers, "_known", {})
    monkeypatch.setattr(handlers.k8s, "delete_children", lambda *a: deleted.append(a) or 3)
    monkeypatch.setattr(handlers._metrics, "forget", lambda ns, name: forgotten.append((ns, name)))
    monkeypatch.setattr(handlers, "reconcile", lambda ns, name: reconciled.append(name))
    asyncio.run(handlers.on_event(type="MODIFIED", **event("a", {"phase": "Training"})))
    asyncio.run(handlers.on_event(type="DELETED", **event("a")))
    assert deleted == [("ns", "a", "uid-a")] and forgotten == [("ns", "a")] and reconciled == []
    going = event("b", deletionTimestamp="2026-12-02T00:00:00Z")
    for kind in ("MODIFIED", "MODIFIED", "DELETED"):
        asyncio.run(handlers.on_event(type=kind, **going))
    assert deleted[1:] == [("ns", "b", "uid-b")] and forgotten[1:] == [("ns", "b")] and reconciled == ["b"]
    assert handlers._known == {}


def test_a_failed_end_is_logged_and_holds_nothing(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    def away(*_: object) -> int:
        raise RuntimeError("the API server is away")

    monkeypatch.setattr(handlers, "_known", {})
    monkeypatch.setattr(handlers.k8s, "delete_children", away)
    asyncio.run(handlers.on_event(type="DELETED", **event("a")))
    assert (
        "ns/a deleted: its children are left to the garbage collector: the API server is away" in caplog.text
    )


def test_a_gone_trainings_lock_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-training locks were a defaultdict that kept one lock (and its key) for every training
    the operator ever reconciled, for its whole life: a lock now lives while a reconcile holds or
    waits for it."""
    monkeypatch.setattr(handlers.k8s, "observe", lambda namespace, name, *_, **__: None)
    monkeypatch.setattr(
        handlers, "_known", {("ns", "gone-0"): {"uid-0": handlers.DUE}}
    )  # its DELETED event missed
    for i in range(50):
        handlers.reconcile("ns", f"gone-{i}")
    assert handlers._known == {}  # no longer ticked
    assert not [key for key in list(handlers._locks.keys()) if key[0] == "ns"]


def test_an_old_trainings_end_leaves_the_new_one_of_its_name_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleted and made again under its name: the new one's events are on another of kopf's workers
    (one per uid), so the old one's DELETED may come after them. It deleted the children by the old
    uid (right), but also cancelled the new one's requeue (its deadline), forgot its metrics and took
    it off the tick (the state was by name)."""
    deleted: list[tuple[str, str, str]] = []
    forgotten: list[tuple[str, str]] = []
    monkeypatch.setattr(handlers, "_known", {})
    monkeypatch.setattr(handlers.k8s, "delete_children", lambda *a: deleted.append(a) or 1)
    monkeypatch.setattr(handlers._metrics, "forget", lambda ns, name: forgotten.append((ns, name)))
    old, new = event("a", {"phase": "Training"}), event("a", {"phase": "Training"})
    new["uid"] = new["body"]["metadata"]["uid"] = "uid-a2"
    asyncio.run(handlers.on_event(type="MODIFIED", **old))
    asyncio.run(handlers.on_event(type="ADDED", **new))
    handlers.requeue("ns", "a", 3600)  # the new one's plan: its deadline
    asyncio.run(handlers.on_event(type="DELETED", **old))
    assert deleted == [("ns", "a", "uid-a")]  # the old one's children, by its uid
    assert ("ns", "a") in handlers._timers and not handlers._timers[("ns", "a")].finished.is_set()
    assert forgotten == [] and handlers._known == {("ns", "a"): {"uid-a2": handlers.DUE}}
    asyncio.run(handlers.on_event(type="DELETED", **new))  # and its own end, as before
    assert deleted[1:] == [("ns", "a", "uid-a2")] and forgotten == [("ns", "a")] and handlers._known == {}
    assert ("ns", "a") not in handlers._timers


def test_the_tick_thread_lives_through_a_failure(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    """Anything raised in a period (a discovery answer that is no JSON) ended the thread: no training
    was ticked again, and no CRD deletion seen, for the operator's life."""
    answers = iter([ValueError("Expecting value: line 1 column 1 (char 0)"), None, "gone"])
    reacted: list[str] = []

    def unserved() -> str | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(handlers, "TIMER_SECONDS", 0.0)
    monkeypatch.setattr(handlers.k8s, "crd_unserved", unserved)
    monkeypatch.setattr(handlers.k8s, "crd_object", lambda: {})
    monkeypatch.setattr(handlers, "_on_unserved", reacted.append)
    monkeypatch.setattr(handlers, "tick", lambda queue, sweep=False: 0)
    handlers._ticking(None, threading.Event())  # type: ignore[arg-type]
    assert reacted == ["gone"] and "the periodic tick failed" in caplog.text
