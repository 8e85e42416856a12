"""Trainings read from the Kubernetes API (read-only): GraphTrainings, their progress ConfigMaps
(`<name>-progress`: each rank's report and rank 0's history), their trainer pods (labels
graphtrain.io/training, graphtrain.io/role=trainer, graphtrain.io/rank) and the events involving them.
The only API module that imports `kubernetes` (.importlinter); contract/children.py names the objects.

Every call has a timeout; lists page through the API server's `limit`/`continue`. Responses are read as
plain JSON (`_preload_content=False`): the client's model objects cost more than the request.

Two modes:
- direct (cache_ttl=0): each request makes its own calls (a training: GraphTraining, ConfigMap, pods);
  a list is one API-server page: its `continue` token is the server's.
- cached (cache_ttl>0): a snapshot of the four collections, listed whole (bounded by max_objects per
  kind) and refreshed in the background once older than cache_ttl, as an informer's store: requests
  never wait for the API server unless the snapshot is missing or older than 10 x cache_ttl (then they
  wait for one refresh). Lists page over the snapshot with this server's own tokens. A collection cut
  at max_objects holds only some trainings' objects: a request about one training then reads that
  collection's objects of it directly (a training left out is not answered as one with nothing), and
  the list of trainings, cut, is paged over the API server as in direct mode.

Security: the namespace and name of a request are DNS labels (checked by the routes) used as object
names; the pods' label selector is built from the name, never taken from the client.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from graphtrain.api import models
from graphtrain.api.selectors import render
from graphtrain.api.sources.base import InvalidParameter, ListQuery, NotFound, SourceUnavailable, page
from graphtrain.api.sources.objects import (
    involves,
    metadata_of,
    owned_by,
    sorted_events,
    status_of,
    training_of,
)
from graphtrain.contract import reporting
from graphtrain.contract.children import LABEL_ROLE, LABEL_TRAINING, names
from graphtrain.contract.spec import API_VERSION, KIND, PLURAL, Progress

T = TypeVar("T")

log = logging.getLogger("graphtrain.api")
GROUP, VERSION = API_VERSION.split("/")
PAGE = 500  # objects per API-server page when listing whole collections
MAX_OBJECTS = 10_000  # per kind in a snapshot: the list stops there (logged)
POOL = 32  # HTTP connections to the API server (the routers' thread pool is 40)
Obj = dict[str, Any]


def api_client() -> kubernetes.client.ApiClient:
    """A client of its own (the process-wide default configuration untouched) with a connection pool
    as large as the routers' concurrency: the service account's credentials in a pod, else
    $KUBECONFIG or ~/.kube/config.

    Raises:
        SourceUnavailable: no usable credentials (the message says which were tried).
    """
    config = kubernetes.client.Configuration()
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            kubernetes.config.load_incluster_config(client_configuration=config)
        else:
            kubernetes.config.load_kube_config(client_configuration=config)
    except (kubernetes.config.ConfigException, OSError, TypeError, ValueError) as exc:
        tried = "the pod's service account" if in_cluster else "the kubeconfig"
        raise SourceUnavailable(f"no Kubernetes credentials from {tried}: {exc}") from None
    config.connection_pool_maxsize = POOL
    return kubernetes.client.ApiClient(config)


# ----------------------------------------------------------------------------------------- calls


class Refused(SourceUnavailable):
    """The API server answered with an error status (`status`)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Api:
    """The few read calls, each bounded by `timeout` seconds, answering parsed JSON; failures turned
    into the source's errors."""

    def __init__(self, timeout: float, client: kubernetes.client.ApiClient):
        self.timeout = timeout
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            return json.loads(resp.data)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound("not found") from None
            if exc.status in (400, 410) and kwargs.get("_continue"):
                raise InvalidParameter(
                    "continue", "the API server refused it (expired or not its own)"
                ) from None
            raise Refused(exc.status, f"the Kubernetes API answered {exc.status} {exc.reason}") from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise SourceUnavailable(f"the Kubernetes API did not answer: {type(exc).__name__}") from None

    def trainings(self, namespace: str | None, **kw: Any) -> Obj:
        if namespace:
            return self.call(
                self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, **kw
            )
        return self.call(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, **kw)

    def training(self, namespace: str, name: str) -> Obj:
        return self.call(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)

    def config_map(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.call(self.core.read_namespaced_config_map, name, namespace)
        except NotFound:
            return None

    def pods(self, namespace: str | None, selector: str, **kw: Any) -> Obj:
        if namespace:
            return self.call(self.core.list_namespaced_pod, namespace, label_selector=selector, **kw)
        return self.call(self.core.list_pod_for_all_namespaces, label_selector=selector, **kw)

    def config_maps(self, namespace: str | None, selector: str, **kw: Any) -> Obj:
        if namespace:
            return self.call(self.core.list_namespaced_config_map, namespace, label_selector=selector, **kw)
        return self.call(self.core.list_config_map_for_all_namespaces, label_selector=selector, **kw)

    def events(self, namespace: str | None, **kw: Any) -> Obj:
        if namespace:
            return self.call(self.core.list_namespaced_event, namespace, **kw)
        return self.call(self.core.list_event_for_all_namespaces, **kw)

    def every(
        self, lister: Callable[..., Obj], *args: Any, limit: int = MAX_OBJECTS, **kw: Any
    ) -> Iterator[Obj]:
        """Every item of a list, page by page, at most `limit` (the rest is logged, not read)."""
        token, count = None, 0
        while True:
            body = lister(*args, limit=PAGE, **({"_continue": token} if token else {}), **kw)
            for item in body.get("items") or []:
                if count >= limit:
                    log.warning("listed %d objects, the bound: the rest is left out", limit)
                    return
                count += 1
                yield item
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return


# ------------------------------------------------------------------------------------------ source


@dataclass
class Snapshot:
    """The collections at one time, indexed for requests."""

    taken: float
    trainings: dict[tuple[str, str], Obj] = field(default_factory=dict)
    progress: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (ns, map name) -> data
    configs: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # the applied specs' maps
    pods: dict[tuple[str, str], list[Obj]] = field(default_factory=lambda: defaultdict(list))
    events: dict[tuple[str, str], list[Obj]] = field(default_factory=lambda: defaultdict(list))
    summaries: list[models.TrainingSummary] = field(default_factory=list)
    truncated: set[str] = field(default_factory=set)  # collections cut at max_objects
    # answers built from this snapshot, built once: (kind, namespace, name) -> answer (a snapshot
    # changes only by replacement, so they never go stale; they go with it)
    built: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def memo(self, key: tuple[str, str, str], build: Callable[[], T]) -> T:
        """`build()`, once per snapshot (two threads racing both build it: harmless, same answer)."""
        try:
            return self.built[key]
        except KeyError:
            answer = self.built[key] = build()
            return answer


class KubernetesSource:
    """GraphTrainings of one namespace (`namespace`) or of all, read from the API server."""

    def __init__(
        self,
        namespace: str | None = None,
        *,
        timeout: float = 5.0,
        cache_ttl: float = 0.0,
        max_objects: int = MAX_OBJECTS,
        client: kubernetes.client.ApiClient | None = None,
    ):
        self.namespace = namespace
        self.api = Api(timeout, client or api_client())
        self.cache_ttl, self.max_objects = cache_ttl, max_objects
        self._snapshot: Snapshot | None = None
        self._refresh_lock = threading.Lock()
        self._refreshing = False
        self._field_selectors = True  # events by involvedObject (a real server; the test server has not)

    def _scoped(self, namespace: str) -> None:
        if self.namespace is not None and namespace != self.namespace:
            raise NotFound(f"this server serves namespace {self.namespace} only")

    # ----------------------------------------------------------------------------- direct reads

    def list_trainings(self, query: ListQuery) -> models.TrainingList:
        """A page of the snapshot's trainings; of the API server's (its own continue tokens) while the
        snapshot's trainings were cut at max_objects, which answered a partial list as the whole."""
        snap = self._whole("trainings")
        if snap is not None:
            return page(snap.summaries, query)
        namespace = query.namespace or self.namespace
        if query.namespace and self.namespace and query.namespace != self.namespace:
            return models.TrainingList.of([])
        kw: dict[str, Any] = {"limit": query.limit}
        if query.selector:
            kw["label_selector"] = render(query.selector)
        if query.continue_token:
            kw["_continue"] = query.continue_token
        body = self.api.trainings(namespace, **kw)
        items = [models.summary(metadata_of(o), status_of(o)) for o in body.get("items") or []]
        if query.phase is not None:  # a page may hold fewer than limit: phase is no server-side filter
            items = [s for s in items if s.phase == query.phase]
        return models.TrainingList.of(items, (body.get("metadata") or {}).get("continue") or None)

    def _whole(self, *collections: str) -> Snapshot | None:
        """The snapshot, if cached and none of these collections was cut at max_objects; else None:
        read the API server."""
        if self.cache_ttl <= 0:
            return None
        snap = self.snapshot()
        return None if snap.truncated.intersection(collections) else snap

    def _training(self, namespace: str, name: str) -> Obj:
        self._scoped(namespace)
        if self.cache_ttl > 0:
            snap = self.snapshot()
            obj = snap.trainings.get((namespace, name))
            if obj is not None:
                return obj
            if "trainings" not in snap.truncated:
                raise NotFound(f"no training {namespace}/{name}")
        try:
            return self.api.training(namespace, name)
        except NotFound:
            raise NotFound(f"no training {namespace}/{name}") from None

    def get_training(self, namespace: str, name: str) -> models.TrainingResource:
        obj = self._training(namespace, name)
        uid = obj["metadata"].get("uid")
        progress = names(name)["progress"]
        snap = self._whole("progress", "configs", "pods")
        if snap is not None:
            data = snap.progress.get((namespace, progress), {})
            config = snap.configs.get((namespace, names(name)["config"]))
            pods = snap.pods.get((namespace, name), [])
            return snap.memo(
                ("training", namespace, name),
                lambda: training_of(obj, data, [p for p in pods if owned_by(p, uid)], config),
            )
        else:
            data = self._own_map_data(namespace, progress, uid)
            config = self._own_map_data(namespace, names(name)["config"], uid) or None
            selector = f"{LABEL_TRAINING}={name},{LABEL_ROLE}=trainer"
            pods = list(self.api.every(self.api.pods, namespace, selector, limit=self.max_objects))
        return training_of(obj, data, [p for p in pods if owned_by(p, uid)], config)

    def _own_map_data(self, namespace: str, name: str, uid: str | None) -> dict[str, str]:
        """The data of one of the training's own ConfigMaps ({} when it has none of its own yet)."""
        cm = self.api.config_map(namespace, name)
        if cm is None or not owned_by(cm, uid):
            return {}
        return cm.get("data") or {}

    def history(self, namespace: str, name: str) -> list[Progress]:
        obj = self._training(namespace, name)
        progress = names(name)["progress"]
        snap = self._whole("progress")
        if snap is not None:
            data = snap.progress.get((namespace, progress), {})
            return snap.memo(
                ("history", namespace, name),
                lambda: reporting.decode_history(data.get(reporting.HISTORY_KEY)),
            )
        data = self._own_map_data(namespace, progress, obj["metadata"].get("uid"))
        return reporting.decode_history(data.get(reporting.HISTORY_KEY))

    def events(self, namespace: str, name: str) -> list[models.TrainingEvent]:
        obj = self._training(namespace, name)
        uid = obj["metadata"].get("uid")
        snap = self._whole("events")
        if snap is not None:
            return snap.memo(
                ("events", namespace, name),
                lambda: sorted_events(
                    [e for e in snap.events.get((namespace, name), []) if involves(e, namespace, name, uid)]
                ),
            )
        found = [e for e in self._events(namespace, name) if involves(e, namespace, name, uid)]
        return sorted_events(found)

    def _events(self, namespace: str | None, name: str | None) -> Iterator[Obj]:
        """Events involving GraphTrainings (of `name` if given): by field selector where the server
        supports it for events (every real one), else the namespace's events, filtered here."""
        if self._field_selectors:
            selector = f"involvedObject.kind={KIND}" + (f",involvedObject.name={name}" if name else "")
            try:
                yield from self.api.every(
                    self.api.events, namespace, field_selector=selector, limit=self.max_objects
                )
                return
            except Refused as exc:
                if exc.status != 400:
                    raise
                log.info("the API server filters no events by involvedObject: filtering them here")
                self._field_selectors = False
        yield from self.api.every(self.api.events, namespace, limit=self.max_objects)

    def check(self) -> None:
        self.api.trainings(self.namespace, limit=1)

    # ---------------------------------------------------------------------------------- snapshot

    def snapshot(self) -> Snapshot:
        """The current snapshot: refreshed in the background once older than cache_ttl, waited for
        only when there is none or it is older than 10 x cache_ttl."""
        snap = self._snapshot
        age = time.monotonic() - snap.taken if snap else None
        if snap is None or (age is not None and age > 10 * self.cache_ttl):
            with self._refresh_lock:  # one refresh at a time; the waiters then take its snapshot
                snap = self._snapshot
                if snap is None or time.monotonic() - snap.taken > 10 * self.cache_ttl:
                    snap = self._snapshot = self._take()
            return snap
        if age is not None and age > self.cache_ttl and not self._refreshing:
            self._refreshing = True
            threading.Thread(target=self._refresh_in_background, name="api-snapshot", daemon=True).start()
        return snap

    def _refresh_in_background(self) -> None:
        try:
            with self._refresh_lock:
                self._snapshot = self._take()
        except (SourceUnavailable, NotFound, InvalidParameter) as exc:
            log.warning("could not refresh the snapshot (serving the last one): %s", exc)
        finally:
            self._refreshing = False

    def _take(self) -> Snapshot:
        ns, bound, api = self.namespace, self.max_objects, self.api
        snap = Snapshot(taken=time.monotonic())
        whole = self._listed_whole
        for obj in whole(snap, "trainings", api.every(api.trainings, ns, limit=bound)):
            snap.trainings[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        uids = {key: obj["metadata"].get("uid") for key, obj in snap.trainings.items()}
        for cm in whole(
            snap, "progress", api.every(api.config_maps, ns, f"{LABEL_ROLE}=progress", limit=bound)
        ):
            meta = cm["metadata"]
            owner = (meta.get("labels") or {}).get(LABEL_TRAINING, "")
            if owned_by(cm, uids.get((meta["namespace"], owner))):
                snap.progress[(meta["namespace"], meta["name"])] = cm.get("data") or {}
        for cm in whole(snap, "configs", api.every(api.config_maps, ns, f"{LABEL_ROLE}=config", limit=bound)):
            meta = cm["metadata"]
            owner = (meta.get("labels") or {}).get(LABEL_TRAINING, "")
            if owned_by(cm, uids.get((meta["namespace"], owner))):
                snap.configs[(meta["namespace"], meta["name"])] = cm.get("data") or {}
        trainers = f"{LABEL_TRAINING},{LABEL_ROLE}=trainer"
        for pod in whole(snap, "pods", api.every(api.pods, ns, trainers, limit=bound)):
            meta = pod["metadata"]
            snap.pods[(meta["namespace"], meta["labels"][LABEL_TRAINING])].append(pod)
        for ev in whole(snap, "events", self._events(ns, None)):
            inv = ev.get("involvedObject") or {}
            if inv.get("kind") == KIND:
                snap.events[
                    (inv.get("namespace") or ev["metadata"]["namespace"], inv.get("name", ""))
                ].append(ev)
        snap.summaries = [models.summary(metadata_of(o), status_of(o)) for o in snap.trainings.values()]
        snap.taken = time.monotonic()
        return snap

    def _listed_whole(self, snap: Snapshot, collection: str, items: Iterator[Obj]) -> Iterator[Obj]:
        """`items`, noting in the snapshot whether the list reached max_objects (it was cut there, or
        holds exactly that many: either way, not to be trusted as whole)."""
        count = 0
        for count, item in enumerate(items, 1):  # noqa: B007 (count is read after the loop)
            yield item
        if count >= self.max_objects:
            snap.truncated.add(collection)
