"""A gang undone midway (k8s._undo: a create refused after the dry runs said yes) waits before its
creates are tried again: 5 s, doubling at each undo up to 1 min; meanwhile each reconcile says the
undo's refusal again and makes, deletes and dry-runs nothing.

Why: the pods an undo makes and deletes are child events, and each asks the work queue for a
reconcile of their training at once. The dry runs said yes again (they could not see the refusal: a
LimitRange hiding a full quota, a quota's `pods` count, a webhook that answers no dry run), the first
pods were made, refused, deleted, and so on: on the test API server 514 pod creates (and as many
deletes and twice as many dry runs) in 5 s, for one training, until the quota had room.

Held by the training's uid and the gang it tried (fingerprint(): the pods' names and what each asks):
a spec edit that changes the gang is tried at once. In memory only: a new leader tries once, then
holds. Thread-safe (the work queue's threads)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphtrain.operator import pod_resources

FIRST, MOST = 5.0, 60.0  # seconds: the first hold, and the longest (doubling between)
_KEPT = 10_000  # holds remembered at most (a training deleted while held is forgotten by age)


def fingerprint(pods: list[dict[str, Any]]) -> str:
    """The gang's pods as the quota sees them: their names and effective requests and limits."""
    said = [
        [
            p["metadata"]["name"],
            {k: str(v) for k, v in sorted(pod_resources.effective(p["spec"], "requests").items())},
            {k: str(v) for k, v in sorted(pod_resources.effective(p["spec"], "limits").items())},
        ]
        for p in pods
    ]
    return json.dumps(said)


@dataclass
class _Hold:
    gang: str
    key: str
    message: str
    until: float
    undos: int


class GangHolds:
    def __init__(self, first: float = FIRST, most: float = MOST, clock: Callable[[], float] = time.monotonic):
        self.first, self.most, self.clock = first, most, clock
        self._holds: dict[str, _Hold] = {}
        self._lock = threading.Lock()

    def held(self, uid: str, gang: str) -> tuple[str, str] | None:
        """(the refused pod's key, the undo's message) while this gang of training `uid` waits."""
        with self._lock:
            hold = self._holds.get(uid)
            if hold is None or hold.gang != gang or self.clock() >= hold.until:
                return None
            return hold.key, hold.message

    def undone(self, uid: str, gang: str, key: str, message: str) -> float:
        """The gang was undone: held FIRST s, doubled at each undo in a row (up to MOST); how long."""
        with self._lock:
            last = self._holds.get(uid)
            undos = last.undos + 1 if last is not None and last.gang == gang else 1
            wait = min(self.most, self.first * 2 ** (undos - 1))
            if len(self._holds) >= _KEPT:
                now = self.clock()
                self._holds = {u: h for u, h in self._holds.items() if h.until + self.most > now}
            self._holds[uid] = _Hold(gang, key, message, self.clock() + wait, undos)
            return wait

    def made(self, uid: str) -> None:
        """The gang was made whole: its next undo (if any) waits FIRST s again."""
        with self._lock:
            self._holds.pop(uid, None)
