"""Trainings read from the Kubernetes API (read-only): GraphTrainings, their progress ConfigMaps
(`<name>-progress`: each rank's report and rank 0's history), their trainer pods (labels
graphtrain.io/training, graphtrain.io/role=trainer, graphtrain.io/rank) and the events involving them.
The only API module that imports `kubernetes` (.importlinter); contract/children.py names the objects.

Every call has a timeout; lists page through the API server's `limit`/`continue`. Responses are read as
plain JSON (`_preload_content=False`): the client's model objects cost more than the request.

Two modes:
- direct (cache_ttl=0): each request makes its own calls (a training: GraphTraining, ConfigMap, pods);
  a list is one API-server page: its `continue` token is the server's. For a token limited to several
  namespaces (access.py), each of them is listed whole (max_objects in all) and paged here, with this
  server's tokens: the API server's, over every namespace, would name trainings the token may not see.
- cached (cache_ttl>0): five collections (GraphTrainings, progress and config ConfigMaps, trainer pods,
  GraphTraining events) kept as an informer's stores (cached.py, watched.py): each listed once, when the
  first request comes, then watched from that list's resourceVersion, so that in steady state the API
  server sends only changes, within moments of each; a stream that breaks is watched again from its last
  event. A collection is listed again only after 410 Gone, a failed watch (after a pause of 0.5 s doubling
  to 30 s) or, over max_objects, once back under it. Staleness: a request is answered from a collection
  known to hold every change up to 10 x cache_ttl ago (a healthy watch, silent or not, confirms it every 5
  x cache_ttl, between 1 and 60 s); one whose watch has been down longer waits for it (up to 6 x the call
  timeout) and is refused with SourceUnavailable (503) if it does not come back, as a snapshot older than
  10 x cache_ttl was. Lists page over the cached trainings with this server's own tokens. A collection
  over max_objects keeps nothing: a request about one training then reads that collection's objects of it
  directly (a training left out is not answered as one with nothing), and the list of trainings, over it,
  is paged over the API server as in direct mode. Histories (~100 KB a training) are not kept with the
  progress maps: a history is read on /history and its answer's bytes kept, gzip form included, until its
  history changes (40 MB at most, ~350 trainings at 500 epochs; not until its ConfigMap changes: every
  heartbeat changes that).
  close() ends the watches (the app's shutdown calls it).

Security: the namespace and name of a request are DNS labels (checked by the routes) used as object
names; the pods' label selector is built from the name, never taken from the client.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from graphtrain.api import models
from graphtrain.api.selectors import render
from graphtrain.api.sources.base import InvalidParameter, ListQuery, NotFound, SourceUnavailable, page
from graphtrain.api.sources.cached import HISTORY_VERSION, SELECTORS, Cache
from graphtrain.api.sources.objects import (
    involves,
    metadata_of,
    owned_by,
    sorted_events,
    status_of,
    training_of,
)
from graphtrain.api.sources.watched import Lister, Watcher
from graphtrain.contract import reporting
from graphtrain.contract.children import LABEL_ROLE, LABEL_TRAINING, names
from graphtrain.contract.spec import API_VERSION, KIND, PLURAL
from graphtrain.contract.watch import Gone, events

log = logging.getLogger("graphtrain.api")
GROUP, VERSION = API_VERSION.split("/")
PAGE = 500  # objects per API-server page when listing whole collections
MAX_OBJECTS = 10_000  # per kind in a snapshot: the list stops there (logged)
POOL = 32  # HTTP connections to the API server (the routers' thread pool is 40)
PATIENCE = 6  # x the call timeout: how long a request waits for a cached collection that is not current
Obj = dict[str, Any]
Caller = Callable[..., Any]  # Api.call, or Api.stream for a watch


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


def watch_refused(status: int, reason: str | None) -> str:
    """What a refused watch says: on 403, the verb its role lacks (a Role older than the watches
    grants get and list only: the lists work, every watch is refused)."""
    said = f"the Kubernetes API answered {status} {reason} to a watch"
    if status == 403:
        return f"{said}: the API's role must grant the watch verb (helm upgrade the chart)"
    return said


def body_by(resp: Any, deadline: float, timeout: float) -> bytes:
    """The body of `resp` (a urllib3 response) as it arrives, until `deadline` (time.monotonic): urllib3's
    timeout bounds each socket read, not the whole answer, so a server sending a little at a time held a
    call as long as it kept sending (timeout 0.5 s: 6 s), and a /history read its flight's waiters too.

    Raises:
        SourceUnavailable: past the deadline (the connection is closed, not reused).
    """
    chunks = []
    while chunk := resp.read1(1 << 16):
        chunks.append(chunk)
        if time.monotonic() > deadline:
            resp.close()
            resp.release_conn()
            raise SourceUnavailable(f"the Kubernetes API did not answer within {timeout:g} s")
    return b"".join(chunks)


class Api:
    """The few read calls, each bounded by `timeout` seconds, answering parsed JSON; failures turned
    into the source's errors."""

    def __init__(self, timeout: float, client: kubernetes.client.ApiClient):
        self.timeout = timeout
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        deadline = time.monotonic() + self.timeout
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            return json.loads(body_by(resp, deadline, self.timeout))
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

    def stream(
        self,
        fn: Callable[..., Any],
        *args: Any,
        version: str,
        seconds: int,
        hold: Callable[[Callable[[], None]], None],
        **kwargs: Any,
    ) -> Iterator[Obj]:
        """A watch of `fn`'s list from resourceVersion `version`, which the server ends after `seconds`:
        its events, parsed. hold() is given what cuts it short (the source's close()).

        Raises:
            Gone: 410, the version is too old.
            Refused: another error status.
            Broken: the stream broke once it had begun (cut, reset, a read timed out, a torn line).
            Gone, Failed: an ERROR event (contract/watch.py reads the stream).
        """
        try:
            resp = fn(
                *args,
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _preload_content=False,
                _request_timeout=(self.timeout, seconds + self.timeout),
                **kwargs,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone() from None
            raise Refused(exc.status, watch_refused(exc.status, exc.reason)) from None
        hold(resp.shutdown)
        return events(resp, iter_resp_lines(resp), time.monotonic() + seconds + self.timeout)

    def trainings(self, namespace: str | None, caller: Caller | None = None, **kw: Any) -> Any:
        """A list's 404 is the kind unserved, never an absent object (a namespace that does not exist
        lists empty): the CRD is not installed, or was deleted. Raised as NotFound, /readyz and every
        list answered 404 "not found", as if the route did not exist; now 503, saying why. (A watch's
        404 comes as its stream is read: Refused, which its collection reports.)"""
        call = caller or self.call
        try:
            if namespace:
                return call(
                    self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, **kw
                )
            return call(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, **kw)
        except NotFound:
            raise SourceUnavailable(
                f"the Kubernetes API serves no {PLURAL}.{GROUP}/{VERSION}: the GraphTraining CRD is not "
                "installed (kubectl apply -f charts/graphtrain/crds/)"
            ) from None

    def training(self, namespace: str, name: str) -> Obj:
        return self.call(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)

    def config_map(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.call(self.core.read_namespaced_config_map, name, namespace)
        except NotFound:
            return None

    def pods(self, namespace: str | None, selector: str, caller: Caller | None = None, **kw: Any) -> Any:
        call = caller or self.call
        if namespace:
            return call(self.core.list_namespaced_pod, namespace, label_selector=selector, **kw)
        return call(self.core.list_pod_for_all_namespaces, label_selector=selector, **kw)

    def config_maps(
        self, namespace: str | None, selector: str, caller: Caller | None = None, **kw: Any
    ) -> Any:
        call = caller or self.call
        if namespace:
            return call(self.core.list_namespaced_config_map, namespace, label_selector=selector, **kw)
        return call(self.core.list_config_map_for_all_namespaces, label_selector=selector, **kw)

    def events(self, namespace: str | None, caller: Caller | None = None, **kw: Any) -> Any:
        call = caller or self.call
        if namespace:
            return call(self.core.list_namespaced_event, namespace, **kw)
        return call(self.core.list_event_for_all_namespaces, **kw)

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


def summary_of(obj: Obj) -> models.TrainingSummary:
    return models.summary(metadata_of(obj), status_of(obj))


def watch_period(cache_ttl: float) -> int:
    """Seconds each watch lasts before the server ends it and it is resumed: half the staleness
    bound (10 x cache_ttl), so that a healthy, silent watch confirms its store well within it; at
    least 1 s (the server counts whole seconds), at most 60 s."""
    return max(1, min(60, int(5 * cache_ttl)))


def listed_namespaces(
    asked: str | None, served: str | None, allowed: frozenset[str] | None
) -> list[str | None]:
    """The namespaces a list asks the API server for (None: every namespace): what the request asked
    (?namespace, or every one), within what this server serves and the request's token may see. []:
    nothing to list; several: a token's namespaces, listed one by one (the server's continue tokens of
    every namespace would name the trainings of namespaces the token may not see)."""
    wanted = asked or served
    if wanted is not None:
        if (served is not None and wanted != served) or (allowed is not None and wanted not in allowed):
            return []
        return [wanted]
    return [None] if allowed is None else list(sorted(allowed))


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
        self._field_selectors = True  # events by involvedObject (a real server; the test server has not)
        self.cache: Cache | None = None
        self._summary_list: tuple[int, Cache, list[models.TrainingSummary]] | None = None
        if cache_ttl > 0:
            self.cache = Cache(
                self._endpoints(),
                bound=max_objects,
                max_age=10 * cache_ttl,
                period=watch_period(cache_ttl),
                patience=PATIENCE * timeout,
            )

    def close(self) -> None:
        """Stop the cache's watches (their threads joined); the source reads directly afterwards."""
        if self.cache is not None:
            self.cache.close()
            self.cache = None

    def _scoped(self, namespace: str) -> None:
        if self.namespace is not None and namespace != self.namespace:
            raise NotFound(f"this server serves namespace {self.namespace} only")

    def _whole(self, *collections: str) -> Cache | None:
        """The cache, if cached and none of these collections is over max_objects (each current
        within the staleness bound, waited for if not); else None: read the API server."""
        cache = self.cache
        return cache if cache is not None and cache.whole(*collections) else None

    def truncated(self) -> set[str]:
        """The cache's collections over max_objects (read directly), once every one is current."""
        cache = self.cache
        if cache is None:
            return set()
        cache.whole(*cache.collections)
        return {name for name, c in cache.collections.items() if c.truncated}

    # ------------------------------------------------------------------------------------- lists

    def list_trainings(self, query: ListQuery) -> models.TrainingList:
        """A page of the cached trainings; of the API server's (its own continue tokens) while the
        trainings are over max_objects, or not cached."""
        cache = self._whole("trainings")
        if cache is not None:
            return page(self._summaries(cache), query)
        targets = listed_namespaces(query.namespace, self.namespace, query.namespaces)
        if not targets:
            return models.TrainingList.of([])
        kw: dict[str, Any] = {"label_selector": render(query.selector)} if query.selector else {}
        if len(targets) > 1:  # a token's namespaces: each listed whole, paged here (this server's tokens)
            objs = (o for ns in targets for o in self.api.every(self.api.trainings, ns, **kw))
            return page(map(summary_of, itertools.islice(objs, self.max_objects)), query)
        kw["limit"] = query.limit
        if query.continue_token:
            kw["_continue"] = query.continue_token
        body = self.api.trainings(targets[0], **kw)
        items = [models.summary(metadata_of(o), status_of(o)) for o in body.get("items") or []]
        if query.phase is not None:  # a page may hold fewer than limit: phase is no server-side filter
            items = [s for s in items if s.phase == query.phase]
        return models.TrainingList.of(items, (body.get("metadata") or {}).get("continue") or None)

    def _summaries(self, cache: Cache) -> list[models.TrainingSummary]:
        """Every cached training's summary: the list is made again only after the trainings changed,
        each summary only after its training changed."""
        trainings = cache.collections["trainings"]
        held = self._summary_list
        changes = trainings.changes  # read first: a change while building is built again next time
        if held is not None and held[0] == changes and held[1] is cache:
            return held[2]
        out = []
        for key, _, objs in trainings.groups():
            out.append(cache.memo("summary", key, ("trainings",), functools.partial(summary_of, objs[0])))
        self._summary_list = (changes, cache, out)
        return out

    # ---------------------------------------------------------------------------- one training

    def _training(self, namespace: str, name: str) -> Obj:
        self._scoped(namespace)
        cache = self._whole("trainings")
        if cache is not None:
            found = cache.group("trainings", (namespace, name))
            if found:
                return found[0]
            raise NotFound(f"no training {namespace}/{name}")
        try:
            return self.api.training(namespace, name)
        except NotFound:
            raise NotFound(f"no training {namespace}/{name}") from None

    def get_training(self, namespace: str, name: str) -> models.TrainingResource:
        self._scoped(namespace)
        cache = self._whole("trainings", "progress", "configs", "pods")
        if cache is not None:
            key = (namespace, name)

            def build() -> models.TrainingResource:
                obj = self._training(namespace, name)
                uid = obj["metadata"].get("uid")
                data = self._own(cache, "progress", key, names(name)["progress"], uid) or {}
                config = self._own(cache, "configs", key, names(name)["config"], uid)
                pods = [p for p in cache.group("pods", key) if owned_by(p, uid)]
                return training_of(obj, data, pods, config)

            return cache.memo("training", key, ("trainings", "progress", "configs", "pods"), build)
        obj = self._training(namespace, name)
        uid = obj["metadata"].get("uid")
        data = self._own_map_data(namespace, names(name)["progress"], uid)
        config = self._own_map_data(namespace, names(name)["config"], uid) or None
        selector = f"{LABEL_TRAINING}={name},{LABEL_ROLE}=trainer"
        pods = list(self.api.every(self.api.pods, namespace, selector, limit=self.max_objects))
        return training_of(obj, data, [p for p in pods if owned_by(p, uid)], config)

    @staticmethod
    def _own_map(
        cache: Cache, collection: str, key: tuple[str, str], name: str, uid: str | None
    ) -> Obj | None:
        """The training's own ConfigMap `name` of a cached collection (None: none of its own yet)."""
        for cm in cache.group(collection, key):
            if cm["metadata"]["name"] == name and owned_by(cm, uid):
                return cm
        return None

    def _own(
        self, cache: Cache, collection: str, key: tuple[str, str], name: str, uid: str | None
    ) -> dict[str, str] | None:
        cm = self._own_map(cache, collection, key, name, uid)
        return None if cm is None else cm.get("data") or {}

    def _own_map_data(self, namespace: str, name: str, uid: str | None) -> dict[str, str]:
        """The data of one of the training's own ConfigMaps ({} when it has none of its own yet)."""
        cm = self.api.config_map(namespace, name)
        if cm is None or not owned_by(cm, uid):
            return {}
        return cm.get("data") or {}

    def history(self, namespace: str, name: str) -> bytes:
        """The /history answer: built from one GET of the progress ConfigMap; cached, kept per its
        history's digest (Cache.history) and served while the watch shows that history."""
        obj = self._training(namespace, name)
        uid = obj["metadata"].get("uid")
        progress = names(name)["progress"]
        cache = self._whole("progress")
        if cache is None:
            data = self._own_map_data(namespace, progress, uid)
            return models.history_answer(data.get(reporting.HISTORY_KEY))
        cm = self._own_map(cache, "progress", (namespace, name), progress, uid)
        if cm is None:
            return models.history_answer(None)

        def read() -> str | None:
            got = self.api.config_map(namespace, progress)
            if got is None or not owned_by(got, uid):
                return None
            return (got.get("data") or {}).get(reporting.HISTORY_KEY)

        return cache.history((namespace, progress), cm.get(HISTORY_VERSION, ""), read)

    def events(self, namespace: str, name: str) -> list[models.TrainingEvent]:
        self._scoped(namespace)
        cache = self._whole("trainings", "events")
        if cache is not None:
            key = (namespace, name)

            def build() -> list[models.TrainingEvent]:
                uid = self._training(namespace, name)["metadata"].get("uid")
                return sorted_events(
                    [e for e in cache.group("events", key) if involves(e, namespace, name, uid)]
                )

            return cache.memo("events", key, ("trainings", "events"), build)
        obj = self._training(namespace, name)
        uid = obj["metadata"].get("uid")
        found = [e for e in self._events(namespace, name) if involves(e, namespace, name, uid)]
        return sorted_events(found)

    def _events(self, namespace: str | None, name: str | None) -> Iterator[Obj]:
        """Events involving GraphTrainings (of `name` if given): by field selector where the server
        supports it for events (every real one), else the namespace's events, filtered here."""
        if self._field_selectors:
            try:
                yield from self.api.every(
                    self.api.events,
                    namespace,
                    field_selector=self._event_selector(name),
                    limit=self.max_objects,
                )
                return
            except Refused as exc:
                if exc.status != 400:
                    raise
                self._no_field_selectors()
        yield from self.api.every(self.api.events, namespace, limit=self.max_objects)

    @staticmethod
    def _event_selector(name: str | None) -> str:
        return f"involvedObject.kind={KIND}" + (f",involvedObject.name={name}" if name else "")

    def _no_field_selectors(self) -> None:
        log.info("the API server filters no events by involvedObject: filtering them here")
        self._field_selectors = False

    def check(self) -> None:
        self.api.trainings(self.namespace, limit=1)

    # ------------------------------------------------------------------------ the cache's calls

    def _endpoints(self) -> dict[str, tuple[Lister, Watcher]]:
        """Each cached collection's list (a page) and watch, over the namespace served (or all)."""
        ns, api = self.namespace, self.api

        def lister(fn: Callable[..., Any], *args: Any) -> Lister:
            def one_page(token: str | None) -> Obj:
                return fn(ns, *args, limit=PAGE, **({"_continue": token} if token else {}))

            return one_page

        def watcher(fn: Callable[..., Any], *args: Any) -> Watcher:
            def watch(
                version: str, seconds: int, hold: Callable[[Callable[[], None]], None]
            ) -> Iterator[Obj]:
                caller = functools.partial(api.stream, version=version, seconds=seconds, hold=hold)
                return fn(ns, *args, caller=caller)

            return watch

        def events_page(token: str | None) -> Obj:
            kw: dict[str, Any] = {"limit": PAGE, **({"_continue": token} if token else {})}
            if self._field_selectors:
                try:
                    return api.events(ns, field_selector=self._event_selector(None), **kw)
                except Refused as exc:
                    if exc.status != 400:
                        raise
                    self._no_field_selectors()
            return api.events(ns, **kw)

        def events_watch(
            version: str, seconds: int, hold: Callable[[Callable[[], None]], None]
        ) -> Iterator[Obj]:
            caller = functools.partial(api.stream, version=version, seconds=seconds, hold=hold)
            kw = {"field_selector": self._event_selector(None)} if self._field_selectors else {}
            return api.events(ns, caller=caller, **kw)

        endpoints: dict[str, tuple[Lister, Watcher]] = {
            "trainings": (lister(api.trainings), watcher(api.trainings)),
            "events": (events_page, events_watch),
        }
        for collection in ("progress", "configs", "pods"):
            fn = api.pods if collection == "pods" else api.config_maps
            endpoints[collection] = (lister(fn, SELECTORS[collection]), watcher(fn, SELECTORS[collection]))
        return endpoints
