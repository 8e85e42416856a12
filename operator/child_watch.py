"""The child watches: for each child kind (k8s.CHILD_KINDS), a thread that lists the labelled objects
and watches from that list, keeping the operator's ChildCache current (cache.py says why) and asking
for the reconcile of the training whose child changed. Apart from k8s.py (the API calls a reconcile
makes), as the watches run for the life of the process on threads of their own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from graphtrain.contract.children import LABEL_TRAINING
from graphtrain.operator import k8s
from graphtrain.operator.cache import ChildCache

log = logging.getLogger("graphtrain.operator")


def watch_children(
    cache: ChildCache,
    on_change: Callable[[str, str], None],
    stop: threading.Event,
    timeout: int = 60,
) -> list[threading.Thread]:
    """Keep `cache` current (cache.py says why): for each child kind, and each of the cache's
    namespaces, a daemon thread lists the labelled objects, then watches from that list's
    resourceVersion (the server ends each watch after `timeout` s; it is resumed where it was),
    relisting after 410 Gone or a failure. Every change calls on_change(namespace, training) once the
    cache holds it (a relist: for each training it touched, but the first list of each, at start,
    when kopf's resume handlers reconcile every training anyway). Ends when `stop` is set (within
    `timeout` s)."""
    threads = []
    for api_version, kind in k8s.CHILD_KINDS:
        for namespace in cache.namespaces:
            thread = threading.Thread(
                target=_watch_kind,
                args=(api_version, kind, namespace, cache, on_change, stop, timeout),
                name=f"watch-{kind}-{namespace or 'all'}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
    return threads


def _watch_kind(
    api_version: str,
    kind: str,
    namespace: str,
    cache: ChildCache,
    on_change: Callable[[str, str], None],
    stop: threading.Event,
    timeout: int,
) -> None:
    first, pause = True, 0.0
    scope = {"namespace": namespace or None, "label_selector": LABEL_TRAINING, "serialize": False}
    while not stop.wait(pause):
        try:
            res = k8s._res(api_version, kind)  # in the loop: a failed discovery is tried again, not the end
            with k8s.calling("list"):
                listed = k8s._raw(
                    res.get(**scope, _request_timeout=(10, 120))
                )  # every child of a kind: large
            touched = cache.replace(kind, listed["items"], namespace)
            for namespace_name in () if first else sorted(touched):
                on_change(*namespace_name)
            first, pause, version = False, 0.0, listed["metadata"]["resourceVersion"]
            while not stop.is_set():  # each pass: one watch, until the server ends it
                watcher = kubernetes.watch.Watch()
                with k8s.calling("watch"):
                    for event in watcher.stream(
                        res.get,
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=timeout,
                        deserialize=False,
                        _request_timeout=(10, timeout + 30),
                        **scope,
                    ):
                        obj = event["object"]
                        version = obj["metadata"].get("resourceVersion") or version
                        where = cache.event(kind, event["type"], obj)
                        if where is not None:
                            on_change(*where)
                        if stop.is_set():
                            watcher.stop()
        except ApiException as exc:  # 410 Gone: the version is too old; relist at once
            pause = 0.0 if exc.status == 410 else 1.0
            if exc.status != 410:
                log.warning("watch of %s failed (%s %s): listing again", kind, exc.status, exc.reason)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            log.warning("watch of %s failed (%s): listing again", kind, exc)
            pause = 1.0
        except Exception:  # anything else: a watch thread that ended would leave its kind's cache stale
            log.exception("watch of %s failed: listing again", kind)
            pause = 1.0
