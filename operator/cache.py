"""The children of every GraphTraining as the operator's watches last saw them: what a reconcile
observes instead of listing twelve kinds from the API server each time.

Why: a reconcile used to read its training and then LIST each of the twelve child kinds by label (13
round trips, each filtering every object of its kind in the namespace on the server): with 1,000
trainings and their child events that was most of the API server's work and most of the operator's
time. As controller-runtime's informers do, one watch per kind (child_watch.watch_children) keeps this
store current, and each change wakes the reconcile of the training it is labelled with, after the store has
it: a reconcile reads the store and so never acts on an older view than the event that woke it.

The store is also read-your-writes for the operator's own writes: an object it created is stored at
once (unless the watch has it already, maybe newer), and one it deleted is forgotten at once and its
late events ignored (a tombstone by uid, until the watch says DELETED or a relist no longer has it).
So the next reconcile never creates again what it just created, nor deletes again what it deleted,
whatever the watch's lag; a create that raced one anyway gets 409, which apply() ignores.

Pure: no API call here; objects are plain dicts, stored as given and never changed (readers must not
change them either: they are shared, not copied).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from graphtrain.contract.children import LABEL_TRAINING

Obj = dict[str, Any]
Where = tuple[str, str]  # (namespace, training name)


def _training(obj: Obj) -> Where | None:
    meta = obj.get("metadata") or {}
    training = (meta.get("labels") or {}).get(LABEL_TRAINING)
    return (meta.get("namespace") or "", training) if training else None


class ChildCache:
    """The labelled objects of each watched kind, indexed by the training their label names. Kinds are
    told apart by their `kind` name (the kinds the operator makes have distinct names). `namespaces`:
    those watched, each listed on its own ("" for all, one list per kind)."""

    def __init__(self, kinds: list[str], namespaces: tuple[str, ...] = ("",)):
        self.kinds, self.namespaces = list(kinds), tuple(namespaces) or ("",)
        self._lock = threading.Lock()
        self._objs: dict[str, dict[str, Obj]] = {k: {} for k in kinds}  # kind -> uid -> object
        self._index: defaultdict[Where, set[tuple[str, str]]] = defaultdict(set)  # -> {(kind, uid)}
        self._gone: dict[str, dict[str, str]] = {k: {} for k in kinds}  # kind -> uid deleted -> its namespace
        self._listed: set[tuple[str, str]] = set()
        self._synced = threading.Event()

    # -------------------------------------------------------------------------------- the watches

    def replace(self, kind: str, objs: list[Obj], namespace: str = "") -> set[Where]:
        """A (re)list of `kind` in `namespace` ("": all): it now holds exactly `objs` there. The
        trainings whose children may have changed."""
        with self._lock:
            old = [
                (uid, o)
                for uid, o in self._objs[kind].items()
                if not namespace or o["metadata"].get("namespace") == namespace
            ]
            for uid, _ in old:
                self._drop(kind, uid)
            touched = {w for _, o in old if (w := _training(o)) is not None}
            listed = {str(o["metadata"]["uid"]) for o in objs}
            gone = self._gone[kind]  # a tombstone outlives only what is still there
            for uid, where in list(gone.items()):
                if (not namespace or where == namespace) and uid not in listed:
                    del gone[uid]
            for obj in objs:
                if str(obj["metadata"]["uid"]) not in self._gone[kind]:
                    self._put(kind, obj)
            touched |= {w for o in objs if (w := _training(o)) is not None}
            self._listed.add((kind, namespace))
            if self._listed >= {(k, n) for k in self.kinds for n in self.namespaces}:
                self._synced.set()
        return touched

    def event(self, kind: str, kind_of_event: str, obj: Obj) -> Where | None:
        """A watch event (ADDED, MODIFIED, DELETED); the training it concerns (None: nothing changed
        here, a bookmark or the late event of an object the operator deleted)."""
        uid = str(obj["metadata"].get("uid"))
        with self._lock:
            if kind_of_event == "DELETED":
                self._gone[kind].pop(uid, None)
                before = self._objs[kind].get(uid)
                self._drop(kind, uid)
                return _training(before or obj)
            if kind_of_event not in ("ADDED", "MODIFIED") or uid in self._gone[kind]:
                return None
            before = self._objs[kind].get(uid)
            self._put(kind, obj)
        moved = _training(before) if before is not None else None
        return _training(obj) or moved

    # ------------------------------------------------------------------------- the operator's writes

    def created(self, obj: Obj) -> None:
        """An object the operator created (the API's answer): stored unless the watch has it already."""
        kind, uid = obj.get("kind", ""), str(obj["metadata"].get("uid"))
        with self._lock:
            if kind in self._objs and uid not in self._objs[kind] and uid not in self._gone[kind]:
                self._put(kind, obj)

    def deleted(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """An object the operator deleted (`uid`: that one only, or found gone by a delete of it): forgotten
        now, its late events ignored. Not one made again under its name that the watch showed already."""
        with self._lock:
            for held, obj in list(self._objs.get(kind, {}).items()):
                meta = obj["metadata"]
                if (meta.get("namespace"), meta.get("name")) == (namespace, name) and uid in (None, held):
                    self._drop(kind, held)
                    self._gone[kind][held] = namespace

    # ------------------------------------------------------------------------------------ reading

    def synced(self, timeout: float | None = None) -> bool:
        """Every kind listed once (wait up to `timeout` seconds)."""
        return self._synced.wait(timeout)

    def children(self, namespace: str, training: str) -> dict[str, list[Obj]]:
        """The objects labelled with this training, by kind (each kind's list sorted by name)."""
        out: dict[str, list[Obj]] = {k: [] for k in self.kinds}
        with self._lock:
            for kind, uid in self._index.get((namespace, training), ()):
                out[kind].append(self._objs[kind][uid])
        for objs in out.values():
            objs.sort(key=lambda o: o["metadata"]["name"])
        return out

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._objs.values())

    # ---------------------------------------------------------------------------------- internals

    def _put(self, kind: str, obj: Obj) -> None:
        uid = str(obj["metadata"]["uid"])
        self._drop(kind, uid)
        where = _training(obj)
        if where is None:  # its label was removed: no longer a child of anything
            return
        self._objs[kind][uid] = obj
        self._index[where].add((kind, uid))

    def _drop(self, kind: str, uid: str) -> None:
        obj = self._objs[kind].pop(uid, None)
        where = _training(obj) if obj is not None else None
        if where is not None:
            self._index[where].discard((kind, uid))
            if not self._index[where]:
                del self._index[where]
