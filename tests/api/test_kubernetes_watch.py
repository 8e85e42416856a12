"""The cached Kubernetes source keeps its collections by list+watch (api/sources/watched.py), on the test
API server: a change shows in the answers through the watch, with no LIST after the first of each
collection (counted by a client that counts its own requests); a 410 Gone makes that collection list
again and stay correct; a deleted object disappears; a history is read on /history only, once per
change; a collection whose watch is down longer than the staleness bound is refused (503), not served
stale; close() ends every watch thread at once."""

from __future__ import annotations

import collections
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
from fastapi.testclient import TestClient

from graphtrain.api.app import create_app
from graphtrain.api.settings import Settings
from graphtrain.api.sources.base import ListQuery, NotFound, SourceUnavailable
from graphtrain.api.sources.kubernetes import KubernetesSource
from graphtrain.contract import reporting
from graphtrain.contract.children import names, trainer_name
from graphtrain.contract.conditions import Severity
from graphtrain.contract.spec import Phase
from tests.api import cluster
from tests.api.cluster import GROUP, PLURAL, VERSION
from tests.api.fake import epochs

NS = "api-watch"
COLLECTIONS = {"graphtrainings", "configmaps", "pods", "events"}


class Counting(kubernetes.client.ApiClient):
    """The API client, counting its requests by (verb, resource): LIST, WATCH, or GET of one object."""

    def __init__(self, kubeconfig: str):
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=config)
        super().__init__(config)
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        where = urllib.parse.urlsplit(url)
        parts = where.path.rstrip("/").split("/")
        listed = parts[-1] in COLLECTIONS
        verb = "WATCH" if "watch=true" in where.query.lower() else "LIST" if listed else method
        with self._lock:
            self.counts[(verb, parts[-1] if listed else parts[-2])] += 1
        return super().call_api(method, url, *args, **kwargs)

    def verbs(self, verb: str) -> int:
        with self._lock:
            return sum(n for (v, _), n in self.counts.items() if v == verb)


@pytest.fixture
def api(kube, kubeconfig: str) -> Iterator[kubernetes.client.ApiClient]:  # kube: the CRD installed
    client = cluster.client(kubeconfig)
    cluster.ensure_namespace(client, NS)
    yield client
    client.close()


@pytest.fixture
def counting(kubeconfig: str) -> Iterator[Counting]:
    client = Counting(kubeconfig)
    yield client
    client.close()


def until(check: Callable[[], bool], what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def listed(source: KubernetesSource) -> list[str]:
    return [s.metadata.name for s in source.list_trainings(ListQuery(namespace=NS)).items]


def missing(call: Callable[[], Any]) -> bool:
    try:
        call()
    except NotFound:
        return True
    return False


@pytest.mark.timeout(120)
def test_changes_arrive_by_watch_with_no_relist(api: kubernetes.client.ApiClient, counting: Counting) -> None:
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    gt = cluster.create_training(api, NS, "w-0", Phase.training, epochs_done=2)
    source = KubernetesSource(NS, cache_ttl=30.0, timeout=5.0, client=counting)
    try:
        assert "w-0" in listed(source)
        assert [r.state for r in source.get_training(NS, "w-0").trainers] == ["Running", "Running"]
        # every collection started at the first request, but a request waits only for those it reads:
        # under load one still listing was counted after the baseline (a CI run saw 6 LISTs against 5)
        collections = source.cache.collections.values()  # type: ignore[union-attr]
        until(lambda: all(c.current_at is not None for c in collections), "a collection never listed")
        lists = counting.verbs(
            "LIST"
        )  # one per collection (the events' two where the server filters none by field)

        cluster.create_training(api, NS, "w-1", Phase.pending, pods=False)
        until(lambda: "w-1" in listed(source), "a new training never showed")
        patch = {"status": {"phase": "Succeeded"}}
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "w-0", patch)
        until(
            lambda: source.get_training(NS, "w-0").status.phase == "Succeeded", "a status change never showed"
        )
        cluster.post_event(gt, Severity.warning, "Slow", "a late event")
        until(lambda: "Slow" in [e.reason for e in source.events(NS, "w-0")], "a new event never showed")
        report = reporting.configmap_data(cluster.report(7, 1), 1)
        core.patch_namespaced_config_map(names("w-0")["progress"], NS, {"data": report})
        until(
            lambda: source.get_training(NS, "w-0").trainers[1].progress.epoch == 7,  # type: ignore[union-attr]
            "a rank's report never showed",
        )
        core.delete_namespaced_pod(trainer_name("w-0", 1), NS, _preload_content=False)
        until(lambda: source.get_training(NS, "w-0").trainers[1].pod is None, "a deleted pod stayed")
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "w-1")
        until(lambda: "w-1" not in listed(source), "a deleted training stayed listed")
        assert missing(lambda: source.get_training(NS, "w-1"))

        # every change came by watch, none by a periodic list: a collection lists again only for a
        # reason it states (a loaded API server may answer a watch 410 Gone, or not in time: CI saw one
        # extra LIST of configmaps once, at load 6, before reasons were recorded)
        why = {c.name: c.relisted for c in collections if c.relisted}
        assert {c.lists - len(c.relisted) for c in collections} == {1}, (counting.counts, why)
        assert counting.verbs("LIST") == lists or why, counting.counts
        assert counting.verbs("WATCH") >= 5
    finally:
        source.close()
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "w-0")


@pytest.mark.timeout(120)
def test_a_410_gone_relists_that_collection_and_stays_correct(
    api: kubernetes.client.ApiClient, counting: Counting
) -> None:
    """The trainings' first watch starts from resourceVersion 1, long compacted out of the server's
    watch window: the server answers 410 Expired, and that collection lists again, once."""
    custom = kubernetes.client.CustomObjectsApi(api)
    source = KubernetesSource(NS, cache_ttl=30.0, timeout=5.0, client=counting)
    trainings = source.cache.collections["trainings"]  # type: ignore[union-attr]
    watch, first = trainings._watch, [True]

    def too_old(version: str, seconds: int, hold: Any) -> Iterator[dict[str, Any]]:
        if first[0]:
            first[0] = False
            version = "1"
        return watch(version, seconds, hold)

    trainings._watch = too_old  # type: ignore[method-assign]
    try:
        listed(source)  # starts the watches
        cluster.create_training(api, NS, "g-0", Phase.training, pods=False)
        until(lambda: trainings.lists == 2, "the 410 made no relist")
        assert "g-0" in listed(source)
        cluster.create_training(api, NS, "g-1", Phase.training, pods=False)
        until(lambda: "g-1" in listed(source), "after the relist, a new training never showed")
        assert trainings.lists == 2 and counting.counts[("LIST", "graphtrainings")] == 2
        assert {c.lists for n, c in source.cache.collections.items() if n != "trainings"} == {1}  # type: ignore[union-attr]
    finally:
        source.close()
        for name in ("g-0", "g-1"):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)


@pytest.mark.timeout(120)
def test_a_history_is_read_on_request_once_per_change(
    api: kubernetes.client.ApiClient, counting: Counting
) -> None:
    """The cache keeps no history (~100 KB a training); /history reads it with one GET and keeps its
    answer until the watch shows its history changed (from then on, never the older answer), through
    heartbeats, which change its ConfigMap and not its history."""
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    cluster.create_training(api, NS, "h-0", Phase.training, epochs_done=3, pods=False)
    source = KubernetesSource(NS, cache_ttl=30.0, timeout=5.0, client=counting)
    progress = names("h-0")["progress"]
    try:
        assert epochs(source.history(NS, "h-0")) == [1, 2, 3]
        kept = source.cache.group("progress", (NS, "h-0"))  # type: ignore[union-attr]
        assert kept and reporting.HISTORY_KEY not in kept[0]["data"] and "rank-0" in str(kept[0]["data"])
        assert epochs(source.history(NS, "h-0")) == [1, 2, 3]
        assert counting.counts[("GET", "configmaps")] == 1  # the second answer was kept
        history = reporting.encode_history([cluster.report(e) for e in range(1, 6)])

        def patch(data: dict[str, str]) -> None:
            """Patch the ConfigMap, then wait until the watch shows that very version."""
            version = core.patch_namespaced_config_map(progress, NS, {"data": data}).metadata.resource_version

            def shown() -> bool:
                kept = source.cache.group("progress", (NS, "h-0"))  # type: ignore[union-attr]
                return bool(kept) and kept[0]["metadata"]["resourceVersion"] == version

            until(shown, "the watch never showed the change")

        patch({reporting.HISTORY_KEY: history})
        assert epochs(source.history(NS, "h-0")) == [1, 2, 3, 4, 5]  # the next answer, not eventually
        assert epochs(source.history(NS, "h-0")) == [1, 2, 3, 4, 5]
        assert counting.counts[("GET", "configmaps")] == 2  # one GET per change of the history
        patch({reporting.heartbeat_key(0): reporting.encode(cluster.report(6))})  # a heartbeat, every 5 s
        assert epochs(source.history(NS, "h-0")) == [1, 2, 3, 4, 5]
        assert counting.counts[("GET", "configmaps")] == 2  # the history did not change: kept
        assert {c.lists for c in source.cache.collections.values()} == {1}  # type: ignore[union-attr]
    finally:
        source.close()
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "h-0")


@pytest.mark.timeout(120)
def test_a_watch_down_past_the_bound_is_refused_then_recovers(api: kubernetes.client.ApiClient) -> None:
    """cache_ttl 0.2 s: answers no older than 2 s. The watches break (every call fails, as with an
    API server gone): within the bound, answers come from the cache; past it, SourceUnavailable (503, a
    history's kept answer too),
    as a snapshot past 10 x cache_ttl was; back, the collections list again and answer."""
    cluster.create_training(api, NS, "d-0", Phase.training, pods=False)
    source = KubernetesSource(NS, cache_ttl=0.2, timeout=2.0, client=api)
    cache = source.cache
    assert cache is not None
    down = threading.Event()
    for collection in cache.collections.values():
        real_list, real_watch = collection._list, collection._watch

        def broken_list(token: str | None, real: Any = real_list) -> Any:
            if down.is_set():
                raise ConnectionRefusedError("the API server is gone")
            return real(token)

        def broken_watch(version: str, seconds: int, hold: Any, real: Any = real_watch) -> Any:
            if down.is_set():
                raise ConnectionRefusedError("the API server is gone")
            return real(version, seconds, hold)

        collection._list, collection._watch = broken_list, broken_watch  # type: ignore[method-assign]
    try:
        assert source.get_training(NS, "d-0").status.phase == "Training"
        assert epochs(source.history(NS, "d-0")) == [1, 2, 3]  # its answer kept
        down.set()
        for collection in cache.collections.values():  # end the watches in progress, as a broken link
            if collection._cut is not None:
                collection._cut()
        with pytest.raises(SourceUnavailable):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                source.get_training(NS, "d-0")
                time.sleep(0.1)
        with pytest.raises(SourceUnavailable):  # nor the history kept: its version is not known current
            source.history(NS, "d-0")
        down.clear()
        until(lambda: source.get_training(NS, "d-0").status.phase == "Training", "never recovered", 60)
    finally:
        source.close()
        kubernetes.client.CustomObjectsApi(api).delete_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "d-0"
        )


@pytest.mark.timeout(60)
def test_close_ends_every_watch_at_once(api: kubernetes.client.ApiClient) -> None:
    source = KubernetesSource(NS, cache_ttl=30.0, timeout=5.0, client=api)  # watches of 60 s
    source.list_trainings(ListQuery())
    cache = source.cache
    assert cache is not None and all(c.alive for c in cache.collections.values())
    until(lambda: all(c._cut is not None for c in cache.collections.values()), "no watch started")
    started = time.monotonic()
    source.close()
    assert time.monotonic() - started < 5
    assert not any(c.alive for c in cache.collections.values())


@pytest.mark.timeout(60)
def test_the_apps_shutdown_closes_the_source(api: kubernetes.client.ApiClient) -> None:
    source = KubernetesSource(NS, cache_ttl=30.0, timeout=5.0, client=api)
    cache = source.cache
    assert cache is not None
    with TestClient(create_app(source, Settings())) as client:
        assert client.get("/api/v1/trainings").status_code == 200
        assert all(c.alive for c in cache.collections.values())
    assert not any(c.alive for c in cache.collections.values()) and source.cache is None


@pytest.mark.timeout(120)
def test_a_collection_over_its_bound_by_watch_is_read_directly_then_listed_again(
    api: kubernetes.client.ApiClient,
) -> None:
    """max_objects 4 in a namespace of its own: the watch counts trainings made past the bound, keeps
    none of them, and the answers come from the API server (still right); back under 90 % of the
    bound, the collection is listed again and kept."""
    ns = "api-watch-bound"
    cluster.ensure_namespace(api, ns)
    custom = kubernetes.client.CustomObjectsApi(api)
    made = []
    for i in range(3):
        cluster.create_training(api, ns, f"b-{i}", Phase.training, pods=False)
        made.append(f"b-{i}")
    source = KubernetesSource(ns, cache_ttl=30.0, max_objects=4, timeout=5.0, client=api)
    trainings = source.cache.collections["trainings"]  # type: ignore[union-attr]
    try:
        assert source.truncated() == set() and len(trainings) == 3
        for i in range(3, 5):
            cluster.create_training(api, ns, f"b-{i}", Phase.training, pods=False)
            made.append(f"b-{i}")
        until(lambda: trainings.truncated, "5 trainings never put the collection over its bound of 4")
        assert len(trainings) == 0 and trainings.lists == 1
        assert [s.metadata.name for s in source.list_trainings(ListQuery(namespace=ns)).items] == made
        assert source.get_training(ns, "b-4").status.phase == "Training"
        for name in ("b-3", "b-4"):
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            made.remove(name)
        until(lambda: not trainings.truncated and trainings.lists == 2, "never listed again under the bound")
        assert len(trainings) == 3 and listed_in(source, ns) == made
        assert missing(lambda: source.get_training(ns, "b-4"))
    finally:
        source.close()
        for name in made:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def listed_in(source: KubernetesSource, namespace: str) -> list[str]:
    return [s.metadata.name for s in source.list_trainings(ListQuery(namespace=namespace)).items]
