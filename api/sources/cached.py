"""The cached mode's store (api/sources/kubernetes.py says when it is used): the five collections,
each kept by list+watch (watched.py) and indexed by the training its objects belong to, the answers
built from them, kept until one of their inputs changes, and the last few histories read.

What is kept of each object: metadata without managedFields; of a pod its status and its containers'
names (rank_pods reads those); of a progress ConfigMap its data without the history (rank 0's last 500
epochs, ~100 KB a training: 30 MB at 300 trainings, and the bulk of every change the watch delivers
again), and in its place the history's digest (history_version). A history is read on /history with
one GET and kept as its answer's bytes (answers.py, models.history_answer: ~108 KB at 500 epochs, built
once), served while the watch shows its ConfigMap with the same history: the most recently asked, up to
HISTORY_BYTES in all (~350 trainings at 500 epochs); concurrent misses of one history share one GET
and build (flights.py: 32 clients walking 300 cold histories made 7,514-8,309 GETs, now 300). By
digest, not by the ConfigMap's resourceVersion: every rank's heartbeat changes that (each 5 s), its
history changes once an epoch. Not decoded objects: a 500-epoch history is ~700 KB of them and 3-10 ms
to decode again, what the old snapshot kept of every training (210 MB at 300 trainings).

No API call and no `kubernetes` import here: the list and watch calls, and the GET of a history, are
passed in.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from graphtrain.api import models
from graphtrain.api.encoding import GzipAnswer
from graphtrain.api.sources.answers import Answers
from graphtrain.api.sources.flights import Flights
from graphtrain.api.sources.watched import Collection, Key, Lister, Watcher
from graphtrain.contract import reporting
from graphtrain.contract.children import LABEL_ROLE, LABEL_TRAINING
from graphtrain.contract.spec import KIND

T = TypeVar("T")
log = logging.getLogger("graphtrain.api")
CLOSE_SECONDS = 3.0  # close(): how long all the collections' threads are waited for, together
Obj = dict[str, Any]
# histories' answers kept, bytes (~118 KB a training at 500 epochs, its 10.6 KB gzip form included:
# ~350 trainings); it was 32 MB of their text and 16 decoded (~11 MB)
HISTORY_BYTES = 40 << 20
HISTORY_VERSION = "historyVersion"  # a kept progress ConfigMap's field: its history's history_version

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


def history_version(text: str | None) -> str:
    """What a history's answer is kept under: the sha256 of its text ('' for none; 0.1 ms at 500
    epochs). An answer depends on the text only, so one kept under a digest is right wherever the store
    shows that digest."""
    return hashlib.sha256(text.encode()).hexdigest() if text else ""


def _lean_progress(cm: Obj) -> Obj:
    raw = cm.get("data") or {}
    data = {k: v for k, v in raw.items() if k != reporting.HISTORY_KEY}
    return {
        "metadata": _meta(cm),
        "data": data,
        HISTORY_VERSION: history_version(raw.get(reporting.HISTORY_KEY)),
    }


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
        history_bytes: int = HISTORY_BYTES,
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
        self.histories: Answers[GzipAnswer] = Answers(
            history_bytes
        )  # progress ConfigMap -> its /history answer
        self.reads: Flights[GzipAnswer] = Flights(wait=patience)  # one GET for concurrent misses of one
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

    def history(self, key: Key, version: str, read: Callable[[], str | None]) -> GzipAnswer:
        """The /history answer of the progress ConfigMap `key` (namespace, name) whose history's digest
        is `version` (the watch's, in a store current within the staleness bound): the one kept under
        that digest, else read() -> its history now (one GET), built and kept under the digest of what
        was read (one newer than the watch's is served again once the watch shows it). Concurrent misses
        of one (key, version) share one read and build (flights.py); a failed read is not kept."""
        held = self.histories.get(key, version)
        if held is not None:
            return held
        return self.reads.run((key, version), lambda: self._build(key, version, read))

    def _build(self, key: Key, version: str, read: Callable[[], str | None]) -> GzipAnswer:
        held = self.histories.get(key, version)  # kept by a flight that ended since this one's miss
        if held is not None:
            return held
        text = read()
        answer = GzipAnswer(models.history_answer(text))
        self.histories.put(key, history_version(text), answer)
        return answer
