"""Answers kept as the bytes a route sends, each with the version of what it was built from (a
history's digest), the least recently used dropped beyond a byte bound.

Why bytes: a 500-epoch history decoded is ~700 KB of Python objects and 3-10 ms to decode; its answer
is ~108 KB and costs nothing to send again. A kept answer is served only for the very version it was
built from (the caller passes the version its store holds now), so it is never staler than that store.

The bound counts each entry as its length (its gzip form's too, when it has one: encoding.GzipAnswer) plus
ENTRY_BYTES (its key, version and the dict's node), so many small answers (empty histories) are bounded
too: at most `limit` / ENTRY_BYTES entries.

Hand-written, not cachetools.LRUCache(getsizeof=...): that keeps a byte bound too, but a put over the
bound raises and leaves the key's older answer (here it goes), it needs the same lock, and the api
extra would install one more package for ~15 lines.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from graphtrain.api.encoding import stored_bytes

B = TypeVar("B", bound=bytes)
ENTRY_BYTES = 256  # what an entry costs beside its answer: key and version strings, tuple, dict node


def cost(answer: bytes) -> int:
    """What one kept answer counts against the bound."""
    return stored_bytes(answer) + ENTRY_BYTES


class Answers(Generic[B]):
    """Thread-safe: the routers run in a thread pool."""

    def __init__(self, limit: int):
        self.limit = limit
        self._items: OrderedDict[Hashable, tuple[str, B]] = OrderedDict()  # key -> (version, answer)
        self._lock = threading.Lock()
        self.nbytes = 0  # sum of cost() of the kept answers: at most `limit`

    def get(self, key: Hashable, version: str) -> B | None:
        """The answer kept for `key` if it was built from `version`, else None."""
        with self._lock:
            held = self._items.get(key)
            if held is None or held[0] != version:
                return None
            self._items.move_to_end(key)
            return held[1]

    def put(self, key: Hashable, version: str, answer: B) -> None:
        """Keep `answer` (built from `version`) in place of what `key` had; one larger than the whole
        bound is not kept. Then drop the least recently used until under the bound."""
        with self._lock:
            old = self._items.pop(key, None)
            self.nbytes -= cost(old[1]) if old else 0
            if cost(answer) <= self.limit:
                self._items[key] = (version, answer)
                self.nbytes += cost(answer)
            while self.nbytes > self.limit:
                _, (_, dropped) = self._items.popitem(last=False)
                self.nbytes -= cost(dropped)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
