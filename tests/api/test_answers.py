"""The histories' answers kept as bytes (api/sources/answers.py, Cache.history), without a server: an
answer is served only for the history it was built from (one that changed is read again, never served
from the older answer; a heartbeat, which changes the ConfigMap and not its history, keeps it), an
evicted one is read and built again, and the byte bound holds, many small answers included."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from graphtrain.api import models
from graphtrain.api.encoding import GzipAnswer
from graphtrain.api.sources.answers import ENTRY_BYTES, Answers, cost
from graphtrain.api.sources.cached import HISTORY_BYTES, HISTORY_VERSION, KEEP, Cache, history_version
from graphtrain.contract import reporting
from tests.api.cluster import report
from tests.api.fake import epochs


def stored(last: int) -> str:
    return reporting.encode_history([report(e) for e in range(1, last + 1)])


class Server:
    """The progress ConfigMaps' histories by key; counts the reads (GETs)."""

    def __init__(self) -> None:
        self.maps: dict[tuple[str, str], str | None] = {}
        self.reads = 0

    def reader(self, key: tuple[str, str]) -> Callable[[], str | None]:
        def read() -> str | None:
            self.reads += 1
            return self.maps[key]

        return read


def cache(history_bytes: int = HISTORY_BYTES) -> Cache:
    return Cache({}, bound=10, max_age=1.0, period=1, patience=0.1, history_bytes=history_bytes)


def ask(c: Cache, server: Server, key: tuple[str, str]) -> bytes:
    """As the source asks: with the digest its (current) store shows, which is the server's here."""
    return c.history(key, history_version(server.maps[key]), server.reader(key))


def test_an_answer_is_the_routes_model_and_a_missing_history_is_empty() -> None:
    answer = models.history_answer(stored(3))
    assert epochs(answer) == [1, 2, 3]
    routes = models.History(items=[report(e) for e in range(1, 4)], limit=500)  # as the route made it
    assert answer == routes.model_dump_json(by_alias=True).encode()
    assert epochs(models.history_answer(None)) == epochs(models.history_answer("not json")) == []
    bad_entry = '[{"epoch": 1}, {"epoch": -1}, {"epoch": 2}]'  # one that does not parse: skipped
    assert epochs(models.history_answer(bad_entry)) == [1, 2]


def test_a_kept_answer_is_served_for_its_history_only() -> None:
    c, server, key = cache(), Server(), ("ns", "t-progress")
    server.maps[key] = stored(3)
    assert epochs(ask(c, server, key)) == [1, 2, 3]
    assert ask(c, server, key) is ask(c, server, key)  # kept: no read, no decode, the same bytes
    assert server.reads == 1
    server.maps[key] = stored(4)  # the watch shows the history changed
    assert epochs(ask(c, server, key)) == [1, 2, 3, 4]
    assert server.reads == 2
    server.maps[key] = stored(2)  # shorter (the oldest dropped, or a new training): the same
    assert epochs(ask(c, server, key)) == [1, 2]
    assert c.histories.get(key, history_version(stored(4))) is None  # the older one's answer is gone
    server.maps[key] = None  # no history any more
    assert epochs(ask(c, server, key)) == [] and server.reads == 4


def test_a_heartbeat_keeps_the_answer_and_a_new_epoch_does_not() -> None:
    """What the watch keeps of a progress ConfigMap: its reports, and its history's digest in place of
    the history. A rank's heartbeat (every 5 s) changes the ConfigMap, not the digest."""
    meta = {"name": "t-progress", "namespace": "ns", "resourceVersion": "7", "uid": "u"}
    cm = {"metadata": meta, "data": {"rank-0": "{}", reporting.HISTORY_KEY: stored(3)}}
    heartbeat = {"metadata": {**meta, "resourceVersion": "8"}, "data": {**cm["data"], "rank-0": '{"step":1}'}}
    epoch = {
        "metadata": {**meta, "resourceVersion": "9"},
        "data": {**cm["data"], reporting.HISTORY_KEY: stored(4)},
    }
    kept = [KEEP["progress"](m) for m in (cm, heartbeat, epoch)]
    assert all(reporting.HISTORY_KEY not in k["data"] for k in kept)
    assert kept[0][HISTORY_VERSION] == kept[1][HISTORY_VERSION] == history_version(stored(3)) != ""
    assert kept[2][HISTORY_VERSION] == history_version(stored(4)) != kept[0][HISTORY_VERSION]
    no_history = {"metadata": meta, "data": {"rank-0": "{}"}}
    assert KEEP["progress"](no_history)[HISTORY_VERSION] == history_version(None) == ""


def test_a_read_newer_than_the_watch_is_kept_under_what_was_read() -> None:
    """The GET may see an epoch the watch has not delivered yet: that answer is served, and kept for
    when the watch shows its history, never for the older one."""
    c, server, key = cache(), Server(), ("ns", "t-progress")
    server.maps[key] = stored(5)
    assert epochs(c.history(key, history_version(stored(4)), server.reader(key))) == [1, 2, 3, 4, 5]
    assert c.histories.get(key, history_version(stored(4))) is None
    assert epochs(ask(c, server, key)) == [1, 2, 3, 4, 5]
    assert server.reads == 1


def test_an_evicted_answer_is_read_and_built_again_and_the_byte_bound_holds() -> None:
    one = cost(GzipAnswer(models.history_answer(stored(50))))  # kept with its gzip form
    c, server = cache(history_bytes=2 * one), Server()
    keys = [("ns", f"t-{i}-progress") for i in range(3)]
    for key in keys:
        server.maps[key] = stored(50)
    for key in keys:
        ask(c, server, key)
        assert c.histories.nbytes <= 2 * one
    assert server.reads == 3 and len(c.histories) == 2  # the first was dropped for the third
    assert epochs(ask(c, server, keys[0])) == list(range(1, 51))  # evicted: read and built again
    assert server.reads == 4 and c.histories.nbytes <= 2 * one
    ask(c, server, keys[0])
    assert server.reads == 4


@pytest.mark.parametrize("size", [0, 1, 100, 5000])
def test_the_byte_bound_counts_each_entry_so_small_answers_are_bounded_too(size: int) -> None:
    limit = 64 * 1024
    kept = Answers(limit)
    for i in range(2000):
        kept.put(("ns", str(i)), "1", b"x" * size)
        assert kept.nbytes <= limit
    assert len(kept) == limit // (size + ENTRY_BYTES)
    assert kept.nbytes == len(kept) * (size + ENTRY_BYTES)


def test_the_least_recently_asked_goes_first_and_one_over_the_bound_is_not_kept() -> None:
    kept = Answers(3 * cost(b"abc"))
    for name in "abc":
        kept.put(name, "1", name.encode() * 3)
    assert kept.get("a", "1") == b"aaa"  # asked: now the most recent
    kept.put("d", "1", b"ddd")
    assert kept.get("b", "1") is None and kept.get("a", "1") == b"aaa"
    kept.put("a", "2", b"x" * (3 * cost(b"abc")))  # larger than the bound: not kept, its older gone
    assert kept.get("a", "1") is None and kept.get("a", "2") is None
    assert kept.nbytes == 2 * cost(b"abc")
