"""The child cache (operator/cache.py) with literal objects: what the watches and the operator's own
writes make of it, and what a reconcile reads from it."""

from __future__ import annotations

from graphtrain.operator import child_watch
from graphtrain.operator.cache import ChildCache

KINDS = ["ConfigMap", "Job", "Pod"]


def obj(kind: str, name: str, uid: str, training: str | None = "t", ns: str = "ns", rv: str = "1") -> dict:
    labels = {"graphtrain.io/training": training} if training else {}
    meta = {"name": name, "namespace": ns, "uid": uid, "labels": labels, "resourceVersion": rv}
    return {"kind": kind, "metadata": meta}


def names(cache: ChildCache, ns: str = "ns", training: str = "t") -> dict[str, list[str]]:
    return {k: [o["metadata"]["name"] for o in v] for k, v in cache.children(ns, training).items() if v}


def test_synced_only_once_every_kind_was_listed() -> None:
    cache = ChildCache(KINDS)
    cache.replace("ConfigMap", [])
    cache.replace("Job", [])
    assert not cache.synced(timeout=0)
    cache.replace("Pod", [])
    assert cache.synced(timeout=0)


def test_synced_only_once_every_namespace_was_listed() -> None:
    cache = ChildCache(["Job"], ("a", "b"))
    cache.replace("Job", [], "a")
    assert not cache.synced(timeout=0)
    cache.replace("Job", [], "b")
    assert cache.synced(timeout=0)


def test_children_by_training_sorted_by_name() -> None:
    cache = ChildCache(KINDS)
    cache.replace("ConfigMap", [obj("ConfigMap", "t-progress", "2"), obj("ConfigMap", "t-config", "1")])
    cache.replace("Job", [obj("Job", "u-partition", "3", training="u"), obj("Job", "t-partition", "4")])
    cache.replace("Pod", [obj("Pod", "t-x", "5", ns="other")])
    assert names(cache) == {"ConfigMap": ["t-config", "t-progress"], "Job": ["t-partition"]}
    assert names(cache, training="u") == {"Job": ["u-partition"]}
    assert names(cache, ns="other") == {"Pod": ["t-x"]}


def test_events_update_the_store_and_name_the_training() -> None:
    cache = ChildCache(KINDS)
    assert cache.event("Job", "ADDED", obj("Job", "t-partition", "1")) == ("ns", "t")
    done = obj("Job", "t-partition", "1", rv="2")
    done["status"] = {"succeeded": 1}
    assert cache.event("Job", "MODIFIED", done) == ("ns", "t")
    assert cache.children("ns", "t")["Job"][0]["status"] == {"succeeded": 1}
    assert cache.event("Job", "BOOKMARK", {"metadata": {"resourceVersion": "9"}}) is None
    assert cache.event("Job", "DELETED", done) == ("ns", "t")
    assert names(cache) == {}
    assert len(cache) == 0


def test_a_child_whose_label_is_removed_leaves_its_training() -> None:
    cache = ChildCache(KINDS)
    cache.event("Pod", "ADDED", obj("Pod", "p", "1"))
    assert cache.event("Pod", "MODIFIED", obj("Pod", "p", "1", training=None)) == ("ns", "t")
    assert names(cache) == {}


def test_a_relist_replaces_what_the_kind_held_and_names_every_training_touched() -> None:
    cache = ChildCache(KINDS)
    cache.replace("Job", [obj("Job", "t-partition", "1"), obj("Job", "u-partition", "2", training="u")])
    touched = cache.replace("Job", [obj("Job", "v-partition", "3", training="v")])
    assert touched == {("ns", "t"), ("ns", "u"), ("ns", "v")}
    assert names(cache) == {} and names(cache, training="v") == {"Job": ["v-partition"]}


def test_a_namespaced_relist_keeps_the_other_namespaces() -> None:
    cache = ChildCache(["Job"], ("a", "b"))
    cache.replace("Job", [obj("Job", "t-partition", "1", ns="a")], "a")
    cache.replace("Job", [obj("Job", "t-partition", "2", ns="b")], "b")
    cache.replace("Job", [], "a")
    assert names(cache, ns="a") == {} and names(cache, ns="b") == {"Job": ["t-partition"]}


def test_what_the_operator_created_is_read_at_once_but_never_over_a_newer_watch_event() -> None:
    cache = ChildCache(KINDS)
    cache.replace("Job", [])
    cache.created(obj("Job", "t-partition", "1", rv="5"))
    assert names(cache) == {"Job": ["t-partition"]}
    newer = obj("Job", "u-partition", "2", training="u", rv="7")
    newer["status"] = {"succeeded": 1}
    cache.event("ConfigMap", "ADDED", obj("ConfigMap", "t-config", "3"))
    cache.event("Job", "ADDED", newer)
    cache.created(obj("Job", "u-partition", "2", training="u", rv="6"))  # its create's answer, late
    assert cache.children("ns", "u")["Job"][0]["status"] == {"succeeded": 1}
    cache.created({"kind": "Event", "metadata": {"name": "e", "namespace": "ns", "uid": "9"}})  # not a child
    assert len(cache) == 3


def test_what_the_operator_deleted_is_gone_at_once_and_its_late_events_are_ignored() -> None:
    cache = ChildCache(KINDS)
    pod = obj("Pod", "t-trainer-0", "1")
    cache.replace("Pod", [pod])
    cache.deleted("Pod", "ns", "t-trainer-0")
    assert names(cache) == {}
    assert cache.event("Pod", "MODIFIED", obj("Pod", "t-trainer-0", "1", rv="2")) is None  # before the delete
    assert names(cache) == {}
    cache.created(obj("Pod", "t-trainer-0", "1"))
    assert names(cache) == {}
    assert cache.event("Pod", "DELETED", pod) == ("ns", "t")
    again = obj("Pod", "t-trainer-0", "2")  # a new pod of that name (another uid) is seen
    assert cache.event("Pod", "ADDED", again) == ("ns", "t")
    assert names(cache) == {"Pod": ["t-trainer-0"]}


def test_a_tombstone_goes_with_a_relist_that_no_longer_has_the_object() -> None:
    cache = ChildCache(KINDS)
    cache.replace("Pod", [obj("Pod", "p", "1")])
    cache.deleted("Pod", "ns", "p")
    cache.replace("Pod", [obj("Pod", "p", "1")])  # still there (going): the tombstone stays
    assert names(cache) == {}
    cache.replace("Pod", [])
    cache.replace("Pod", [obj("Pod", "p", "1")])  # back with that uid: seen again
    assert names(cache) == {"Pod": ["p"]}


def test_a_watch_thread_outlives_a_failed_lookup_and_discovery_runs_one_at_a_time(monkeypatch) -> None:
    """The watch threads' first lookups at once broke the dynamic client's discovery cache (KeyError:
    'resources', a CI run of tests/chart/test_rbac.py), and the exception ended the thread: that kind's
    cache went stale for good. Now discovery takes turns, and a watch lists again after any failure."""
    import threading
    import time

    from graphtrain.operator import k8s

    inside, most = [0], [0]

    class Resources:
        def get(self, api_version: str, kind: str) -> object:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.01)
            inside[0] -= 1
            return object()

    class Client:
        resources = Resources()

    monkeypatch.setattr(k8s, "_resources", {})
    monkeypatch.setattr(k8s, "client", lambda: Client())
    threads = [threading.Thread(target=k8s._res, args=("v1", f"Kind{i % 3}")) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert most[0] == 1 and sorted(k for _, k in k8s._resources) == ["Kind0", "Kind1", "Kind2"]

    stop, calls = threading.Event(), []

    def failing(api_version: str, kind: str) -> object:
        calls.append(kind)
        if len(calls) == 2:
            stop.set()
        raise KeyError("resources")

    monkeypatch.setattr(k8s, "_res", failing)
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    kind = child_watch.KindWatch("v1", "Secret", "a", ChildCache(["Secret"]), lambda *_: None, stop, 1)
    watch = threading.Thread(target=kind.run)
    watch.start()
    watch.join(timeout=10)
    assert not watch.is_alive() and calls == ["Secret", "Secret"] and not errors
