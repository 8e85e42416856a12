"""The cached mode's store (api/sources/kubernetes.py says when it is used): the five collections,
each kept by list+watch (watched.py) and indexed by the training its objects belong to, the answers
built from them, kept until one of their inputs changes, and the last few histories read.

What is kept of each object: metadata without managedFields; of a pod its status and its containers'
names (rank_pods reads those); of a progress ConfigMap its data without the history (rank 0's last 500
epochs, ~100 KB a training: 30 MB at 300 trainings, and the bulk of every change the watch delivers
again). A history is read on /history with one GET, then kept as its text, until the watch shows its
ConfigMap changed: the most recently asked, up to HISTORY_BYTES in all, and decoded for the last
DECODED asked (decoded, a 500-epoch history is ~700 KB of Python objects, 7 x its text, and takes
10-20 ms: what the old snapshot kept of every training, 210 MB at 300 trainings).

No API call and no `kubernetes` import here: the list and watch calls, and the GET of a history, are
passed in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from graphtrain.api.sources.watched import Collection, Key, Lister, Watcher
from graphtrain.contract import reporting
from graphtrain.contract.children import LABEL_ROLE, LABEL_TRAINING
from graphtrain.contract.spec import KIND, Progress

T = TypeVar("T")
log = logging.getLogger("graphtrain.api")
CLOSE_SECONDS = 3.0  # close(): how long all the collections' threads are waited for, together
Obj = dict[str, Any]
HISTORY_BYTES = 32 << 20  # histories' text kept (~100 KB a training at 500 epochs: ~330 trainings)
DECODED = 16  # histories also kept decoded (~11 MB at 500 epochs)

# the collections and the label selector of each (the events' is the source's: by field where served)
SELECTORS = {
    "trainings": "",
    "progress": f"{LABEL_ROLE}=progress",
    "configs": f"{LABEL_ROLE}=config",
    "pods": f"{LABEL_TRAINING},{LABEL_ROLE}=trainer",
    "events": "",
}


def _meta(obj: Obj) -> Obj:
    return {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}


def _by_name(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _by_label(obj: Obj) -> Key | None:
    meta = obj["metadata"]
    training = (meta.get("labels") or {}).get(LABEL_TRAINING)
    return (meta.get("namespace") or "", training) if training else None


def _by_involved(ev: Obj) -> Key | None:
    inv = ev.get("involvedObject") or {}
    if inv.get("kind") != KIND:
        return None
    return (inv.get("namespace") or ev["metadata"].get("namespace") or "", inv.get("name", ""))


def _lean(obj: Obj) -> Obj:
    return {**obj, "metadata": _meta(obj)}


def _lean_pod(pod: Obj) -> Obj:
    containers = [{"name": c.get("name")} for c in (pod.get("spec") or {}).get("containers") or []]
    return {"metadata": _meta(pod), "spec": {"containers": containers}, "status": pod.get("status") or {}}


def _lean_progress(cm: Obj) -> Obj:
    data = {k: v for k, v in (cm.get("data") or {}).items() if k != reporting.HISTORY_KEY}
    return {"metadata": _meta(cm), "data": data}


INDEX = {
    "trainings": _by_name,
    "progress": _by_label,
    "configs": _by_label,
    "pods": _by_label,
    "events": _by_involved,
}
KEEP = {"trainings": _lean, "progress": _lean_progress, "configs": _lean, "pods": _lean_pod, "events": _lean}


class Cache:
    """The collections, started on first use. `max_age`: how old a collection may be known current
    for a request to be answered from it; `patience`: how long a request waits for one that is not."""

    def __init__(
        self,
        endpoints: Mapping[str, tuple[Lister, Watcher]],
        *,
        bound: int,
        max_age: float,
        period: int,
        patience: float,
    ):
        self.collections = {
            name: Collection(
                name, lister, watcher, index=INDEX[name], keep=KEEP[name], bound=bound, period=period
            )
            for name, (lister, watcher) in endpoints.items()
        }
        self.max_age, self.patience = max_age, patience
        self._lock = threading.Lock()
        self._memo: dict[tuple[str, str, str], tuple[tuple[int, ...], Any]] = {}
        self._histories: OrderedDict[Key, tuple[str, str]] = OrderedDict()  # -> (version, text)
        self._history_bytes = 0
        self._decoded: OrderedDict[Key, tuple[str, list[Progress]]] = OrderedDict()
        self._closed = False

    def start(self) -> None:
        if not self._closed:
            for collection in self.collections.values():
                collection.start()

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Stop every collection: watches are cut at once; a thread inside a LIST (not cut: a hung
        API server holds it for its read timeouts, 20 s with the client's retries) is waited for
        `timeout` s in all, not each, then left: a daemon that ends at its next step."""
        self._closed = True
        for collection in self.collections.values():  # cut every watch first, then join
            collection._stop.set()
        deadline = time.monotonic() + timeout
        for collection in self.collections.values():
            collection.close(max(0.0, deadline - time.monotonic()))
        left = [name for name, c in self.collections.items() if c.alive]
        if left:
            log.warning("closed with the watches of %s still in a call to the API server", ", ".join(left))

    def whole(self, *names: str) -> bool:
        """Whether these collections are kept whole (none over its bound), once each is current.

        Raises:
            SourceUnavailable: one is not current within `patience` s (its watch is down).
        """
        self.start()
        for name in names:
            self.collections[name].current(self.max_age, self.patience)
        return not any(self.collections[name].truncated for name in names)

    def group(self, name: str, key: Key) -> list[Obj]:
        return self.collections[name].group(key)

    def memo(self, kind: str, key: Key, inputs: tuple[str, ...], build: Callable[[], T]) -> T:
        """`build()`, kept until a group of `key` in one of the `inputs` collections changes. The
        versions are read before build() reads the groups: a change between the two is built again
        at the next request, never kept as the older answer."""
        stamp = tuple(self.collections[name].version(key) for name in inputs)
        slot = (kind, *key)
        with self._lock:
            held = self._memo.get(slot)
        if held is not None and held[0] == stamp:
            return held[1]
        answer = build()
        with self._lock:
            if len(self._memo) > 4 * (len(self.collections["trainings"]) + 64):
                self._memo.clear()  # answers of trainings gone since: rare, and rebuilt on demand
            self._memo[slot] = (stamp, answer)
        return answer

    def history(self, key: Key, version: str, read: Callable[[], tuple[str, str | None]]) -> list[Progress]:
        """The history of the progress ConfigMap `key` (namespace, name) at resourceVersion `version`
        (the watch's): the one kept if it is that version, else read() -> (its version, its history)."""
        with self._lock:
            decoded = self._decoded.get(key)
            if decoded is not None and decoded[0] == version:
                self._decoded.move_to_end(key)
                return decoded[1]
            held = self._histories.get(key)
            if held is not None and held[0] == version:
                self._histories.move_to_end(key)
        text: str | None
        if held is not None and held[0] == version:
            got, text = held
        else:
            got, text = read()
            self._keep_text(key, got, text)
        history = reporting.decode_history(text)
        with self._lock:
            self._decoded[key] = (got, history)
            self._decoded.move_to_end(key)
            while len(self._decoded) > DECODED:
                self._decoded.popitem(last=False)
        return history

    def _keep_text(self, key: Key, version: str, text: str | None) -> None:
        with self._lock:
            old = self._histories.pop(key, None)
            self._history_bytes -= len(old[1]) if old else 0
            if text and len(text) <= HISTORY_BYTES:
                self._histories[key] = (version, text)
                self._history_bytes += len(text)
            while self._history_bytes > HISTORY_BYTES:
                _, (_, dropped) = self._histories.popitem(last=False)
                self._history_bytes -= len(dropped)
