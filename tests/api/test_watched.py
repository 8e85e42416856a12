"""A collection's watch loop (api/sources/watched.py) without a server: the list and watch calls are
fakes. A server that lists but refuses every watch (403: a Role without the watch verb) is listed
again after growing pauses, not every 0.5 s, and the refusal names the verb; close() with every LIST
hung returns within seconds, and refuses the requests waiting; the api extra asks for a urllib3 whose
responses can be cut."""

from __future__ import annotations

import json
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import urllib3
from kubernetes.client.rest import ApiException
from packaging.requirements import Requirement

from graphtrain.api.sources import cached, watched
from graphtrain.api.sources.base import SourceUnavailable
from graphtrain.api.sources.cached import SELECTORS, Cache
from graphtrain.api.sources.kubernetes import Api, Refused
from graphtrain.api.sources.watched import Collection, next_pause

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("pause", "watched_since", "expected"),
    [
        (0.0, False, watched.PAUSE),
        (0.5, False, 1.0),
        (16.0, False, watched.LONGEST_PAUSE),
        (watched.LONGEST_PAUSE, False, watched.LONGEST_PAUSE),
        (16.0, True, watched.PAUSE),  # a watch worked since the last list: the link was up
    ],
)
def test_next_pause(pause: float, watched_since: bool, expected: float) -> None:
    assert next_pause(pause, watched_since) == expected


@pytest.mark.timeout(30)
def test_a_refused_watch_backs_off_though_the_list_works() -> None:
    lists: list[float] = []
    lock = threading.Lock()

    def lister(token: str | None) -> dict[str, Any]:
        with lock:
            lists.append(time.monotonic())
        return {"items": [], "metadata": {"resourceVersion": "5"}}

    def watcher(version: str, seconds: int, hold: Any) -> Iterator[dict[str, Any]]:
        raise Refused(403, "the Kubernetes API answered 403 Forbidden to a watch")

    collection = Collection("trainings", lister, watcher, index=lambda obj: None, bound=10, period=10)
    collection.start()
    try:
        time.sleep(3.2)  # lists at 0, 0.5, 1.5 (then 3.5): the pause doubles; it was 0.5 s each time
    finally:
        collection.close()
    with lock:
        assert 2 <= len(lists) <= 4, [round(t - lists[0], 1) for t in lists]


def test_a_403_to_a_watch_names_the_missing_verb() -> None:
    api = Api(1.0, kubernetes.client.ApiClient(kubernetes.client.Configuration()))

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(Refused) as refused:
        list(api.stream(forbidden, version="1", seconds=1, hold=lambda cut: None))
    assert refused.value.status == 403
    assert "403 Forbidden to a watch" in str(refused.value) and "the watch verb" in str(refused.value)


@pytest.mark.timeout(60)
def test_close_waits_for_lists_in_flight_a_few_seconds_in_all() -> None:
    """Every LIST hangs (an API server that accepts and never answers): close() waits CLOSE_SECONDS in
    all (it waited 10 s for each collection in turn), and a request waiting for a current store is
    refused at once (it waited out its patience)."""
    release = threading.Event()

    def hung(token: str | None) -> dict[str, Any]:
        release.wait(20)
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def idle(version: str, seconds: int, hold: Any) -> Iterator[dict[str, Any]]:
        return iter(())

    cache = Cache({name: (hung, idle) for name in SELECTORS}, bound=10, max_age=1, period=1, patience=30)
    refused: list[float] = []

    def ask() -> None:
        try:
            cache.whole("trainings")
        except SourceUnavailable:
            refused.append(time.monotonic())

    reader = threading.Thread(target=ask)
    reader.start()
    try:
        time.sleep(0.3)
        started = time.monotonic()
        cache.close()
        took = time.monotonic() - started
        reader.join(5)
    finally:
        release.set()
    assert took < cached.CLOSE_SECONDS + 1
    assert refused and refused[0] - started < 1


def test_the_api_extra_asks_for_a_urllib3_that_can_cut_a_watch() -> None:
    """Api.stream hands hold() the response's shutdown(), urllib3 2.3's: with an older one (kubernetes
    allows 1.24 on) every watch failed at once, and the cache relisted instead of watching."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    urllib3 = [r for r in map(Requirement, extras["api"]) if r.name == "urllib3"]
    assert urllib3 and not urllib3[0].specifier.contains("2.2.3") and urllib3[0].specifier.contains("2.3.0")


def obj(uid: str, version: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": version}}


@pytest.mark.timeout(30)
def test_a_stream_that_breaks_is_watched_again_from_its_last_event_not_listed() -> None:
    """A LIST of a large collection is what a loaded API server can least afford; a stream cut or reset
    once begun resumes where it broke, with the store kept (client-go's reflector does the same)."""
    lists: list[str | None] = []
    watches: list[str] = []
    done = threading.Event()

    def lister(token: str | None) -> dict[str, Any]:
        lists.append(token)
        return {"items": [obj("a", "5")], "metadata": {"resourceVersion": "5"}}

    def watcher(version: str, seconds: int, hold: Any) -> Iterator[dict[str, Any]]:
        watches.append(version)
        if len(watches) == 1:
            yield {"type": "ADDED", "object": obj("b", "6")}
            raise watched.Broken("ProtocolError")
        if len(watches) == 2:
            yield {"type": "MODIFIED", "object": obj("b", "7")}
            return
        done.set()
        time.sleep(0.05)

    collection = Collection(
        "configmaps", lister, watcher, index=lambda o: ("ns", o["metadata"]["name"]), bound=10, period=10
    )
    collection.start()
    try:
        assert done.wait(10)
    finally:
        collection.close()
    assert lists == [None] and collection.lists == 1
    assert watches[:3] == ["5", "6", "7"]
    assert [o["metadata"]["resourceVersion"] for o in collection.group(("ns", "b"))] == ["7"]
    assert collection.group(("ns", "a"))  # the listed object kept: nothing was listed again
    assert collection.failed is not None and collection.failed[1] == "Broken: ProtocolError"


def test_a_stream_cut_once_begun_is_broken_not_a_failure_to_list_after() -> None:
    api = Api(1.0, kubernetes.client.ApiClient(kubernetes.client.Configuration()))

    class Cut:
        def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
            yield json.dumps({"type": "ADDED", "object": obj("a", "6")}).encode() + b"\n"
            raise urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")

        def shutdown(self) -> None:
            pass

        def close(self) -> None:
            done.append("close")

        def release_conn(self) -> None:
            done.append("release_conn")

    done: list[str] = []
    events = api.stream(lambda *a, **k: Cut(), version="5", seconds=1, hold=lambda cut: None)
    assert next(events)["object"]["metadata"]["resourceVersion"] == "6"
    with pytest.raises(watched.Broken, match="ProtocolError"):
        next(events)
    assert done == ["close", "release_conn"]  # the connection still carrying the watch: closed, then pooled


@pytest.mark.timeout(30)
def test_a_closed_collection_states_no_reason_to_list_again() -> None:
    watching = threading.Event()

    def lister(token: str | None) -> dict[str, Any]:
        return {"items": [], "metadata": {"resourceVersion": "5"}}

    def watcher(version: str, seconds: int, hold: Any) -> Iterator[dict[str, Any]]:
        watching.set()
        time.sleep(0.05)
        yield from ()

    collection = Collection("pods", lister, watcher, index=lambda o: None, bound=10, period=10)
    collection.start()
    assert watching.wait(10)
    collection.close()
    assert collection.lists == 1 and collection.relisted == []
