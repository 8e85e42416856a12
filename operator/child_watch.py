"""The child watches: for each child kind (k8s.CHILD_KINDS), a thread that lists the labelled objects
and watches from that list, keeping the operator's ChildCache current (cache.py says why) and asking
for the reconcile of the training whose child changed. Apart from k8s.py (the API calls a reconcile
makes), as the watches run for the life of the process on threads of their own.

As client-go's reflector does (and the API's collections, api/sources/watched.py: what a watch is, ends
with and pauses after is contract/watch.py's, shared by both): the server ends each watch after
`timeout` s and the next resumes where it ended; a stream that breaks once begun (a connection cut or
reset, a read timed out) is watched again from its last event's resourceVersion, the cache kept. It
used to list the kind again: every object of a kind (every pod of the cluster in an all-namespaces
operator) read again for a cut connection, what a loaded API server can least afford when load is what
cuts them. A kind is listed again only after 410 Gone (at once) or another failure (a watch refused,
an unreachable server, an ERROR event: after a pause of 0.5 s doubling to 30 s, back to 0.5 s once a
watch has worked), and why is kept (KindWatch.relisted)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from graphtrain.contract.children import LABEL_TRAINING
from graphtrain.contract.watch import GONE, Broken, Gone, events, next_pause
from graphtrain.operator import k8s
from graphtrain.operator.cache import ChildCache

log = logging.getLogger("graphtrain.operator")
CONNECT = 10  # seconds to connect, for a list or a watch
LIST_READ = 120  # seconds for a list's answer to arrive (every child of a kind: large)
WATCH_SLACK = 30  # seconds a watch may run past the end asked of the server before it is cut
KEPT_REASONS = 100  # the relists whose reason is kept (the last ones)


class KindWatch:
    """One child kind in one namespace ("": all) kept in `cache` by list+watch; run() is the thread's
    loop. `lists` counts the LISTs begun and `relisted` says why each after the first was made (the last
    KEPT_REASONS): "410 Gone", or "failed: " and what failed."""

    def __init__(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        cache: ChildCache,
        on_change: Callable[[str, str], None],
        stop: threading.Event,
        timeout: int = 60,
    ):
        self.api_version, self.kind, self.namespace, self.timeout = api_version, kind, namespace, timeout
        self.cache, self.on_change, self.stop = cache, on_change, stop
        self.scope = {"namespace": namespace or None, "label_selector": LABEL_TRAINING, "serialize": False}
        self.lists = 0
        self.relisted: list[str] = []
        self.watches = 0  # watches begun: the first, one a timeout, one a break
        self.failed: str | None = None  # the last failure or break
        self._version: str | None = None  # where the next watch starts (None: list first)
        self._why = ""  # why the next list is made
        self._watched = False  # a watch worked (an event, or its normal end) since the last failure

    def run(self) -> None:
        """List, then watch, until `stop` is set (within `timeout` s): never ends on a failure, as a watch
        thread that ended would leave its kind's cache stale for good."""
        pause = 0.0
        while not self.stop.wait(pause):
            try:
                res = k8s._res(self.api_version, self.kind)  # in the loop: a failed discovery is tried again
                if self._version is None:
                    self._list(res)
                while not self.stop.is_set():  # each pass: one watch, until the server ends it
                    self._follow(res)
                    pause = 0.0
            except Gone:
                log.info("the watch of %s expired (410 Gone): listing again", self.kind)
                self._relist("410 Gone")
                pause = 0.0
            except Broken as exc:
                pause = self._failed(pause, f"Broken: {exc}")
                log.warning(
                    "the watch of %s broke (%s): watching again from its last event in %.1f s",
                    self.kind,
                    exc,
                    pause,
                )
            except ApiException as exc:
                self._relist(f"failed: {exc.status} {exc.reason}")
                pause = self._failed(pause, f"{exc.status} {exc.reason}")
                log.warning("watch of %s failed (%s %s): listing again", self.kind, exc.status, exc.reason)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                self._relist(f"failed: {type(exc).__name__}")
                pause = self._failed(pause, f"{type(exc).__name__}: {exc}")
                log.warning("watch of %s failed (%s): listing again", self.kind, exc)
            except Exception as exc:  # anything else (a failed discovery, an ERROR event): list again
                self._relist(f"failed: {type(exc).__name__}")
                pause = self._failed(pause, f"{type(exc).__name__}: {exc}")
                log.exception("watch of %s failed: listing again", self.kind)

    def _relist(self, why: str) -> None:
        self._version, self._why = None, why

    def _failed(self, pause: float, what: str) -> float:
        self.failed = what
        pause = next_pause(pause, self._watched)
        self._watched = False  # a watch that fails again before an event backs off further
        return pause

    def _list(self, res: Any) -> None:
        if self.lists:
            self.relisted = [*self.relisted[-(KEPT_REASONS - 1) :], self._why]
        self.lists += 1
        with k8s.calling("list"):
            listed = k8s._raw(res.get(**self.scope, _request_timeout=(CONNECT, LIST_READ)))
        touched = self.cache.replace(self.kind, listed["items"], self.namespace)
        # a relist: each training it touched; not the first list, at start, when kopf's resume handlers
        # reconcile every training anyway
        for namespace_name in sorted(touched) if self.lists > 1 else ():
            self.on_change(*namespace_name)
        self._version = listed["metadata"]["resourceVersion"]

    def _follow(self, res: Any) -> None:
        """One watch from the last version, until the server ends it (or `stop`); each event applied,
        then its version kept: a break after it resumes there."""
        with k8s.calling("watch"):
            try:
                resp = res.get(
                    watch=True,
                    resource_version=self._version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=self.timeout,
                    _request_timeout=(CONNECT, self.timeout + WATCH_SLACK),
                    **self.scope,
                )
            except ApiException as exc:
                if exc.status == GONE:
                    raise Gone() from None
                raise
        self.watches += 1
        stream = events(resp, iter_resp_lines(resp), time.monotonic() + self.timeout + WATCH_SLACK)
        with k8s.calling("watch"), contextlib.closing(stream):  # a break is counted as a failed watch
            for event in stream:
                obj = event["object"]
                where = self.cache.event(self.kind, event["type"], obj)
                self._version = obj["metadata"].get("resourceVersion") or self._version
                self._watched = True
                if where is not None:
                    self.on_change(*where)
                if self.stop.is_set():
                    return  # the stream closed, its connection too, before it goes back to the pool
        self._watched = True


def watch_children(
    cache: ChildCache,
    on_change: Callable[[str, str], None],
    stop: threading.Event,
    timeout: int = 60,
) -> list[KindWatch]:
    """Keep `cache` current (cache.py says why): for each child kind, and each of the cache's
    namespaces, a daemon thread runs a KindWatch. Every change calls on_change(namespace, training) once
    the cache holds it (a relist: for each training it touched, but the first list of each, at start,
    when kopf's resume handlers reconcile every training anyway). Ends when `stop` is set (within
    `timeout` s)."""
    watches = []
    for api_version, kind in k8s.CHILD_KINDS:
        for namespace in cache.namespaces:
            watch = KindWatch(api_version, kind, namespace, cache, on_change, stop, timeout)
            threading.Thread(target=watch.run, name=f"watch-{kind}-{namespace or 'all'}", daemon=True).start()
            watches.append(watch)
    return watches
