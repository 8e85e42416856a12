"""Each GraphTraining as its watch last showed it, for the periodic tick's reconciles: no GET each.

Why: every reconcile read its training with a GET, so that its status never goes back (a plan on the
status before its own last write would take a transition again: a restart counted twice, an event posted
twice). At 300 trainings the tick was 300 GETs every period, 1.4 s of wall time on the bench
(bench/RESULTS.md). The watch (kopf's, on_event) already brings every change; the body it showed is used
only when it is known to hold the operator's own last status write: after a write its resourceVersion is
pending until the watch shows that version (resourceVersions are compared only for equality, as the API
asks); after a GET, its version likewise. A reconcile that failed (its write made or not) distrusts the
copy until a GET and the watch agree. Otherwise the reconcile GETs as before. Changes (a spec edit, a
child) are reconciled as before, each with its GET. The sweep (every 20th tick: a training deleted in
a watch gap must be found gone) reads every training with one LIST (swept()): a training it shows at
the copy's version reconciles on the copy, one it shows at another or not at all is read with a GET
(at 300 trainings the sweep was 300 GETs, 1.8 s).

A copy older than the training all the same (an event older than the operator's write, delivered after a
failed reconcile forgot the copy; a training deleted and made again under its name in a gap of the
watch; a write of the last leader that landed after this one listed) wrote its plan's status onto the
training: every transition since taken again, its events posted twice (tests/operator/
test_watched_apiserver.py). So a reconcile on the copy writes the status with the copy's resourceVersion
as a precondition: a 409 (k8s.Stale) makes it read the training and plan again. That write comes
after the plan's creates and deletes, so a plan on the copy that creates or deletes anything is made
again on a GET first (handlers._locked): a copy from before a restart deleted the new attempt's
trainers (its pods were not of the copy's attempt), the copy of a training deleted and made again
made a StatefulSet owned by the deleted one (tests/operator/test_watched_apiserver.py). The steady
tick acts on nothing (its plans only confirm the status), so it still GETs nothing.

Thread-safe: on_event writes from kopf's loop, the work queue's threads read and write."""

from __future__ import annotations

import copy
import threading
from typing import Any

Key = tuple[str, str]  # (namespace, name)
_UNKNOWN = ""  # pending on no version the watch shows: until a GET of ours reads one (Watched.read)


class Watched:
    def __init__(self) -> None:
        self._bodies: dict[Key, dict[str, Any]] = {}
        self._pending: dict[Key, str] = {}  # the resourceVersion of our last write, not yet watched
        self._verify: set[Key] = set()  # the next reconcile GETs (the sweep's)
        self._lock = threading.Lock()

    def seen(self, key: Key, body: dict[str, Any]) -> None:
        """A watch event's object (not DELETED): kept as it is (not changed after; copied when used)."""
        rv = _version(body)
        with self._lock:
            self._bodies[key] = body
            if self._pending.get(key) == rv:
                del self._pending[key]

    def wrote(self, key: Key, rv: str | None) -> None:
        """The operator wrote the training (its status), answered with this resourceVersion: the body
        kept is current again once the watch shows it (or already, if it did before the answer came);
        None (the version not known): not until a GET of ours reads one (read())."""
        with self._lock:
            held = self._bodies.get(key)
            if rv is None:
                self._pending[key] = _UNKNOWN
            elif held is None or _version(held) != rv:
                self._pending[key] = rv
            else:
                self._pending.pop(key, None)

    def read(self, key: Key, rv: str | None) -> None:
        """A GET of ours read this version, which holds every write of ours: as wrote(). A copy left
        pending by a version the watch never showed (kopf batches the events of a burst, and shows
        the last one) is current again once the watch shows this one, not at the next write only."""
        self.wrote(key, rv)

    def distrust(self, key: Key) -> None:
        """A reconcile failed (its status write made or not) or found the copy behind the training:
        the copy is not used until a GET of ours (read()) and the watch agree on a version. Not
        merely forgotten: the next watch event may be one older than that write, delivered late."""
        with self._lock:
            self._pending[key] = _UNKNOWN

    def forget(self, key: Key) -> None:
        """Gone (DELETED), or being deleted: reconciles GET it."""
        with self._lock:
            self._bodies.pop(key, None)
            self._pending.pop(key, None)
            self._verify.discard(key)

    def verify_all(self) -> None:
        """The next reconcile of each training GETs it (the sweep: one deleted in a watch gap is kept
        here, as kopf makes up no DELETED for it)."""
        with self._lock:
            self._verify = set(self._bodies)

    def swept(self, listed: dict[Key, str] | None) -> None:
        """The sweep, from one LIST of every training (k8s.training_versions): the next reconcile GETs
        each training the list shows at another version than the copy, or not at all (deleted in a gap
        of the watch, or made after the list was read: the GET says which); the others reconcile on
        their copy as any tick does. None (the list failed): verify_all()."""
        with self._lock:
            if listed is None:
                self._verify = set(self._bodies)
            else:
                self._verify = {k for k, body in self._bodies.items() if listed.get(k) != _version(body)}

    def current(self, key: Key) -> dict[str, Any] | None:
        """A copy of the body the watch last showed, if it holds the operator's last write; else None
        (GET it)."""
        with self._lock:
            if key in self._verify:
                self._verify.discard(key)
                return None
            body = self._bodies.get(key)
            if body is None or key in self._pending:
                return None
        return copy.deepcopy(body)


def _version(body: dict[str, Any]) -> str | None:
    return (body.get("metadata") or {}).get("resourceVersion")
