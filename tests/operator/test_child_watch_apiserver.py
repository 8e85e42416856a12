"""The operator's child watches (operator/child_watch.py) on the test API server, each request counted
by a resource that wraps the dynamic client's: a stream cut once begun is watched again from its last
event, no LIST made (it used to list the kind again: every pod of the cluster, for a cut connection);
410 Gone lists again at once and says so; a watch left before its end hands back to the pool no
connection still carrying it (the next LIST would wait out its read timeout behind it)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from graphtrain.operator import child_watch, k8s
from graphtrain.operator.cache import ChildCache

pytestmark = pytest.mark.timeout(90)
SECONDS = 20  # each watch, as the server is asked to end it: longer than every wait here


class Counted:
    """The dynamic client's resource, its calls recorded: ("LIST" | "WATCH", resourceVersion); every
    watch's response kept (to cut it), the first watch's version replaced by `first_version`."""

    def __init__(self, real: Any, first_version: str | None = None):
        self.real, self.first_version = real, first_version
        self.calls: list[tuple[str, str | None]] = []
        self.responses: list[Any] = []
        self._lock = threading.Lock()

    def get(self, **kwargs: Any) -> Any:
        with self._lock:
            watch = bool(kwargs.get("watch"))
            if watch and self.first_version and not any(v == "WATCH" for v, _ in self.calls):
                kwargs["resource_version"] = self.first_version
            self.calls.append(("WATCH" if watch else "LIST", kwargs.get("resource_version")))
        answer = self.real.get(**kwargs)
        if watch:
            with self._lock:
                self.responses.append(answer)
        return answer

    def verbs(self, verb: str) -> list[str | None]:
        with self._lock:
            return [version for v, version in self.calls if v == verb]


def until(check: Callable[[], Any], what: str, seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def client(kube) -> Any:  # kube: $KUBECONFIG names the test server
    k8s.load_config()
    return k8s.client()


@pytest.fixture
def watching(
    client: Any, ns: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[child_watch.KindWatch, Counted, ChildCache]]]:
    """Start a ConfigMap watch of `ns` (its resource counted); stopped and joined after the test."""
    stop, threads, resources = threading.Event(), [], []

    def start(first_version: str | None = None) -> tuple[child_watch.KindWatch, Counted, ChildCache]:
        real = k8s._res
        counted = Counted(real("v1", "ConfigMap"), first_version)
        resources.append(counted)
        cache = ChildCache(["ConfigMap"], (ns,))
        watch = child_watch.KindWatch("v1", "ConfigMap", ns, cache, lambda *_: None, stop, SECONDS)
        thread = threading.Thread(target=watch.run, daemon=True)
        # this watch's thread only: the session operator's watches, in this process too, use k8s._res
        monkeypatch.setattr(
            k8s, "_res", lambda v, kind: counted if threading.current_thread() is thread else real(v, kind)
        )
        thread.start()
        threads.append(thread)
        assert cache.synced(timeout=20), "never listed"
        return watch, counted, cache

    yield start
    stop.set()
    for counted in resources:  # the watch in progress cut: the thread sees `stop` now, not in SECONDS
        with contextlib.suppress(Exception):
            counted.responses[-1].shutdown()
    for thread in threads:
        thread.join(SECONDS + 10)
        assert not thread.is_alive()


def config_map(kube, ns: str, name: str) -> str:
    """Create a labelled ConfigMap; its resourceVersion."""
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"graphtrain.io/training": "t"}},
    }
    return str(
        json.loads(kube("create", "-n", ns, "-o", "json", "-f", "-", input=json.dumps(doc)))["metadata"][
            "resourceVersion"
        ]
    )


def held(cache: ChildCache, ns: str) -> list[str]:
    return [o["metadata"]["name"] for o in cache.children(ns, "t").get("ConfigMap", [])]


def test_a_stream_cut_once_begun_is_watched_again_from_its_last_event_with_no_list(
    kube, ns: str, watching: Any
) -> None:
    watch, counted, cache = watching()
    listed_at = counted.verbs("LIST")
    version = config_map(kube, ns, "a")
    until(lambda: held(cache, ns) == ["a"], "the first ConfigMap by watch")
    counted.responses[0].shutdown()  # the connection cut under the stream, as a network does
    until(lambda: len(counted.verbs("WATCH")) == 2, "a second watch after the cut")
    config_map(kube, ns, "b")
    until(lambda: held(cache, ns) == ["a", "b"], "the second ConfigMap by watch, after the cut")
    assert counted.verbs("LIST") == listed_at and len(listed_at) == 1, counted.calls
    assert counted.verbs("WATCH")[1] == version  # from the last event, not the list
    assert watch.lists == 1 and watch.relisted == []
    assert watch.failed is not None and watch.failed.startswith("Broken:")


def test_a_410_gone_lists_again_at_once_and_says_why(kube, ns: str, watching: Any) -> None:
    """The first watch starts from resourceVersion 1, long out of the server's watch window: it answers
    410 (an ERROR event), and the kind is listed again, once, with no pause, its reason kept."""
    started = time.monotonic()
    watch, counted, cache = watching(first_version="1")
    until(lambda: len(counted.verbs("LIST")) == 2, "a relist after 410")
    assert time.monotonic() - started < 5  # listed again at once, not after a failure's pause
    config_map(kube, ns, "c")
    until(lambda: held(cache, ns) == ["c"], "a ConfigMap by watch, after the relist")
    assert watch.relisted == ["410 Gone"] and watch.lists == 2, counted.calls
    assert len(counted.verbs("LIST")) == 2


def test_a_watch_left_before_its_end_is_closed_before_its_connection_is_pooled(
    kube, ns: str, client: Any
) -> None:
    """A stopped watch leaves its stream mid-way. Handed back to urllib3's pool open, its connection
    still carried the watch: the next call on it waited out its read timeout (the API's bug: 5 s)."""
    stop = threading.Event()
    cache = ChildCache(["ConfigMap"], (ns,))
    watch = child_watch.KindWatch("v1", "ConfigMap", ns, cache, lambda *_: stop.set(), stop, SECONDS)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    assert cache.synced(timeout=20)
    until(lambda: watch.watches == 1, "the watch")
    config_map(kube, ns, "d")  # its event sets stop: the watch is left mid-way
    thread.join(10)
    assert not thread.is_alive() and watch.lists == 1
    res = k8s._res("v1", "ConfigMap")
    for _ in range(3):  # the pool hands back the connection released last first
        began = time.monotonic()
        k8s._raw(res.get(namespace=ns, serialize=False, _request_timeout=(5, 3)))
        assert time.monotonic() - began < 2
