"""The histories' answers kept as bytes (api/sources/answers.py, Cache.history), without a server: an
answer is served only for the version it was built from (a history that changed is read again, never
served from the older answer), an evicted one is read and built again, and the byte bound holds, many
small answers included."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from graphtrain.api import models
from graphtrain.api.sources.answers import ENTRY_BYTES, Answers, cost
from graphtrain.api.sources.cached import HISTORY_BYTES, Cache
from graphtrain.contract import reporting
from tests.api.cluster import report
from tests.api.fake import epochs


def stored(last: int) -> str:
    return reporting.encode_history([report(e) for e in range(1, last + 1)])


class Server:
    """The progress ConfigMaps' histories by key, with their versions; counts the reads (GETs)."""

    def __init__(self) -> None:
        self.maps: dict[tuple[str, str], tuple[str, str | None]] = {}
        self.reads = 0

    def reader(self, key: tuple[str, str]) -> Callable[[], tuple[str, str | None]]:
        def read() -> tuple[str, str | None]:
            self.reads += 1
            return self.maps[key]

        return read


def cache(history_bytes: int = HISTORY_BYTES) -> Cache:
    return Cache({}, bound=10, max_age=1.0, period=1, patience=0.1, history_bytes=history_bytes)


def ask(c: Cache, server: Server, key: tuple[str, str]) -> bytes:
    """As the source asks: at the version its (current) store shows, which the server's is here."""
    return c.history(key, server.maps[key][0], server.reader(key))


def test_an_answer_is_the_routes_model_and_a_missing_history_is_empty() -> None:
    answer = models.history_answer(stored(3))
    assert epochs(answer) == [1, 2, 3]
    routes = models.History(items=[report(e) for e in range(1, 4)], limit=500)  # as the route made it
    assert answer == routes.model_dump_json(by_alias=True).encode()
    assert epochs(models.history_answer(None)) == epochs(models.history_answer("not json")) == []
    bad_entry = '[{"epoch": 1}, {"epoch": -1}, {"epoch": 2}]'  # one that does not parse: skipped
    assert epochs(models.history_answer(bad_entry)) == [1, 2]


def test_a_kept_answer_is_served_for_its_version_only() -> None:
    c, server, key = cache(), Server(), ("ns", "t-progress")
    server.maps[key] = ("10", stored(3))
    assert epochs(ask(c, server, key)) == [1, 2, 3]
    assert ask(c, server, key) is ask(c, server, key)  # kept: no read, no decode, the same bytes
    assert server.reads == 1
    server.maps[key] = ("11", stored(4))  # the watch shows the ConfigMap changed
    assert epochs(ask(c, server, key)) == [1, 2, 3, 4]
    assert server.reads == 2
    server.maps[key] = ("12", stored(2))  # shorter (the oldest dropped, or a new training): the same
    assert epochs(ask(c, server, key)) == [1, 2]
    assert c.histories.get(key, "11") is None  # the older version's answer is gone, not kept beside


def test_a_read_newer_than_the_watch_is_kept_under_the_version_read() -> None:
    """The GET may see a change the watch has not delivered yet: that answer is served, and kept for
    when the watch shows its version, never for the older one."""
    c, server, key = cache(), Server(), ("ns", "t-progress")
    server.maps[key] = ("21", stored(5))
    assert epochs(c.history(key, "20", server.reader(key))) == [1, 2, 3, 4, 5]
    assert c.histories.get(key, "20") is None
    assert epochs(c.history(key, "21", server.reader(key))) == [1, 2, 3, 4, 5]
    assert server.reads == 1


def test_an_evicted_answer_is_read_and_built_again_and_the_byte_bound_holds() -> None:
    one = cost(models.history_answer(stored(50)))
    c, server = cache(history_bytes=2 * one), Server()
    keys = [("ns", f"t-{i}-progress") for i in range(3)]
    for key in keys:
        server.maps[key] = ("1", stored(50))
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
