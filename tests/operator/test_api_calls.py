"""How many API calls a reconcile makes, against the real API server with the session's operator
running (its child watches feed the cache): a reconcile reads its training once and lists nothing; a
reconcile with nothing to change writes nothing (no status patch that would change nothing)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest
from kubernetes.client import rest

from graphtrain.operator import handlers, k8s
from tests.operator.conftest import wait_for
from tests.operator.test_operator_apiserver import SPEC, names_of, phase

pytestmark = pytest.mark.timeout(120)


def training_path(ns: str, name: str) -> str:
    return f"/apis/graphtrain.io/v1alpha1/namespaces/{ns}/graphtrainings/{name}"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """(method, path) of every request the kubernetes client makes on this test's own thread (the
    operator's watches and kopf, on theirs, are not counted)."""
    made: list[tuple[str, str]] = []
    me, real = threading.get_ident(), rest.RESTClientObject.request

    def request(self, method: str, url: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if threading.get_ident() == me:
            made.append((method, re.sub(r"^https?://[^/]+", "", url).split("?")[0]))
        return real(self, method, url, *args, **kwargs)

    monkeypatch.setattr(rest.RESTClientObject, "request", request)
    yield made


def synced() -> None:
    assert k8s._cache is not None and k8s._cache.synced(timeout=30), "the child watches never listed"


def test_the_first_reconcile_creates_every_child_and_lists_nothing(
    kube, operator, ns, calls, monkeypatch
) -> None:
    """Every trigger of the operator is held back for this training; the test runs its first
    reconcile itself: one read of the training, the eight creates, one status write, its events."""
    real = handlers.reconcile
    monkeypatch.setattr(handlers, "reconcile", lambda n, name: None if name == "direct" else real(n, name))
    synced()
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="direct", extra_model=""))
    calls.clear()
    real(ns, "direct")
    verbs = [m for m, _ in calls]
    assert [p for m, p in calls if m == "GET"] == [
        f"/apis/graphtrain.io/v1alpha1/namespaces/{ns}/graphtrainings/direct"
    ]
    creates = [p for m, p in calls if m == "POST" and not p.endswith("/events")]
    assert len(creates) == 8, calls
    assert verbs.count("PATCH") == 1 and verbs.count("DELETE") == 0
    assert len(calls) <= 1 + 8 + 1 + 3, calls  # was 1 + 12 lists + 8 + 1 + 3 before the cache
    assert phase(kube, "direct", ns) == "Partitioning"
    calls.clear()
    real(ns, "direct")  # the cache has what this reconcile made: nothing is made again
    assert calls == [("GET", training_path(ns, "direct"))]


def test_a_reconcile_with_nothing_to_change_reads_once_and_writes_nothing(kube, operator, ns, calls) -> None:
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="idle", extra_model=""))
    assert wait_for(lambda: phase(kube, "idle", ns) == "Partitioning", what="Partitioning")
    assert wait_for(lambda: len(names_of(kube, "configmap", ns, "idle")) == 2, what="its config maps")
    synced()
    assert handlers._queue is not None and handlers._queue.idle(timeout=30)
    handlers.reconcile(ns, "idle")  # settles whatever the last trigger left
    calls.clear()
    for _ in range(3):
        handlers.reconcile(ns, "idle")
    assert calls == [("GET", training_path(ns, "idle"))] * 3


def test_a_child_deleted_behind_the_operator_wakes_its_training_through_the_watch(
    kube, operator, ns, monkeypatch
) -> None:
    """No kopf handler watches children any more: the cache's watch asks the queue for the training,
    which makes the child again."""
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="again", extra_model=""))
    assert wait_for(lambda: "again-progress" in names_of(kube, "configmap", ns, "again"), what="its map")
    queue = handlers._queue
    assert queue is not None
    asked: list[tuple[str, str]] = []
    real = queue.add
    monkeypatch.setattr(queue, "add", lambda key, after=0.0: (asked.append(key), real(key, after)))
    kube("delete", "configmap", "again-progress", "-n", ns)
    assert wait_for(lambda: (ns, "again") in asked, what="the watch to ask for the training")
    made = lambda: "again-progress" in names_of(kube, "configmap", ns, "again")  # noqa: E731
    assert wait_for(made, timeout=30, what="the map made again")


def copied(kube, ns: str, name: str) -> None:
    """A training Partitioning, settled, whose watch's copy holds the operator's last write."""
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    assert wait_for(lambda: phase(kube, name, ns) == "Partitioning", what="Partitioning")
    synced()
    assert handlers._queue is not None and handlers._queue.idle(timeout=30)
    handlers.reconcile(ns, name)  # settles whatever the last trigger left
    assert wait_for(lambda: handlers._watched.current((ns, name)) is not None, what="the watch's copy")


def test_the_ticks_reconcile_reads_the_training_as_its_watch_showed_it(kube, operator, ns, calls) -> None:
    """The periodic tick's reconciles each read their training with a GET: 300 a period at 300
    trainings (bench/RESULTS.md). Now none, once the watch showed the operator's own last write; the
    sweep's reconcile (every SWEEP_PERIODS-th tick: one deleted in a watch gap is found gone) GETs."""
    copied(kube, ns, "tick")
    calls.clear()
    for _ in range(3):
        handlers.reconcile(ns, "tick", watched=True)
    assert calls == []
    handlers._watched.verify_all()
    handlers.reconcile(ns, "tick", watched=True)
    handlers.reconcile(ns, "tick", watched=True)
    assert calls == [("GET", training_path(ns, "tick"))]


def test_the_sweep_lists_every_training_once_and_gets_only_one_the_list_lacks(
    kube, operator, ns, calls
) -> None:
    """The sweep (every SWEEP_PERIODS-th tick: a training deleted in a gap of the watch is found gone)
    read every training known with a GET: 300 at 300 trainings, 1.8 s of the tick (bench/operator_scale.py
    --tick 300). Now one LIST of them all; a GET only for one it does not show at the copy's version."""
    copied(kube, ns, "swept")
    handlers._known[(ns, "gone")] = {"0": handlers.IDLE}  # deleted in a gap of the watch: no DELETED came

    class Here:  # the sweep's reconciles of this namespace's trainings, on this thread
        def add(self, key: tuple[str, str], periodic: bool = False) -> None:
            if key[0] == ns:
                handlers.reconcile(*key, watched=periodic)

    calls.clear()
    handlers.tick(Here(), sweep=True)  # type: ignore[arg-type]
    assert calls == [
        ("GET", "/apis/graphtrain.io/v1alpha1/graphtrainings"),  # the LIST, every namespace
        ("GET", training_path(ns, "gone")),  # 404: forgotten
    ], calls
    assert (ns, "gone") not in handlers._known and (ns, "swept") in handlers._known
