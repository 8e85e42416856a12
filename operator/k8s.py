"""The only module that talks to the Kubernetes API: observe a GraphTraining and its children, apply a plan.

Creates are idempotent (409 ignored: another reconcile got there first; unless the object there is not
the training's: NameTaken, before the plan's later creates; a namespace being deleted stops the plan's
creates without an error, an admission plugin's refusal (a quota, a LimitRange, Pod Security) or the
authorizer's (a right the chart withholds) stops them and is said in the status and an event:
refusals.py), deletes too (404 ignored; of the very object observed, its uid a precondition: 409 if
its name holds another now, which a cache behind the cluster may not show yet), the status is
merge-patched on the status subresource only when it changed, and each event of the plan is posted
against the GraphTraining. Children are found by the graphtrain.io/training label.

LeaseClient reads and writes the operator's leader-election Lease for leader.py (get, create, update:
the verbs the chart's Role grants on leases), each call with a timeout, a conflict reported as None;
the Lease carries an ownerReference to the operator's Deployment (owner_reference(), read once at
start with the chart's `get` on that one Deployment), so `helm uninstall` leaves no Lease behind.

Every call that fails is counted by its verb (use_error_counter(): the operator's
graphtrain_operator_api_errors_total), but for the answers the code expects and handles as normal: a
404 where something may be gone, a 409 where another writer may have been first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from graphtrain.contract.children import LABEL_TRAINING
from graphtrain.contract.conditions import Event
from graphtrain.contract.spec import API_VERSION, KIND
from graphtrain.contract.watch import Broken
from graphtrain.operator import gang_admission, gang_holds, manifests
from graphtrain.operator.cache import ChildCache
from graphtrain.operator.context import Action, Plan
from graphtrain.operator.observation import NameTaken, Observed, Stale, key
from graphtrain.operator.ownership import owned, same, whose
from graphtrain.operator.refusals import judge, namespace_terminating, refusal, told, unserved_message

log = logging.getLogger("graphtrain.operator")
GROUP, VERSION = API_VERSION.split("/")
PLURAL = "graphtrainings"
CHILD_KINDS = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "PersistentVolumeClaim"),
    ("batch/v1", "Job"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("policy/v1", "PodDisruptionBudget"),
    ("apps/v1", "StatefulSet"),
    ("v1", "Pod"),
]
_client: DynamicClient | None = None
_lock = threading.Lock()
_resources: dict[tuple[str, str], Any] = {}  # (apiVersion, kind) -> the dynamic client's resource
_discovery = threading.Lock()  # the dynamic client's discovery cache is not thread-safe
_cache: ChildCache | None = None  # the children as the watches see them (None: list them each time)
_holds = gang_holds.GangHolds()  # the gangs undone, waiting before their creates are tried again


def _uncounted(verb: str) -> None:
    pass


_count_error: Callable[[str], None] = _uncounted


def _unwatched(namespace: str, name: str, rv: str | None) -> None:
    pass


_on_written: Callable[[str, str, str | None], None] = _unwatched


def use_on_written(told: Callable[[str, str, str | None], None]) -> None:
    """Who is told of each status write (namespace, name, the resourceVersion it made): watched.py."""
    global _on_written
    _on_written = told


def use_error_counter(count: Callable[[str], None]) -> None:
    """Where failed API calls are counted: count(verb), verb in get|list|create|patch|replace|delete."""
    global _count_error
    _count_error = count


@contextlib.contextmanager
def calling(verb: str, expected: tuple[int, ...] = ()) -> Iterator[None]:
    """Count the API call made in the block if it fails, unless with one of the `expected` statuses;
    the exception goes on to the caller as it was."""
    try:
        yield
    except ApiException as exc:
        if exc.status not in expected:
            _count_error(verb)
        raise
    except (urllib3.exceptions.HTTPError, OSError, Broken):  # Broken: a watch's stream cut once begun
        _count_error(verb)
        raise


class CredentialsError(Exception):
    """No usable Kubernetes credentials (the message says which source was tried and why it failed)."""


def load_config() -> None:
    """In-cluster credentials in a pod, else $KUBECONFIG / ~/.kube/config.

    Raises:
        CredentialsError: neither gives a usable configuration.
    """
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config()
        else:
            kubernetes.config.load_kube_config()
    except (kubernetes.config.ConfigException, OSError, TypeError, ValueError) as exc:
        source = "in-cluster service account" if os.environ.get("KUBERNETES_SERVICE_HOST") else "kubeconfig"
        raise CredentialsError(f"no Kubernetes credentials ({source}): {exc}") from None


CALL_TIMEOUT = (5.0, 10.0)  # connect, read: a call that names none (discovery; urllib3 tries 4 times)


class _Bounded(kubernetes.client.ApiClient):
    """Every call bounded: the dynamic client's discovery names no timeout, and an API server that
    took the connection and never answered held the operator's start there for good, silent."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["_request_timeout"] = kwargs.get("_request_timeout") or CALL_TIMEOUT
        return super().call_api(*args, **kwargs)


POOL_SIZE = 32  # kept-alive connections: the child watches' streams, the workers', kopf's executor's


def client() -> DynamicClient:
    """One client for every call of the process, its connections kept alive (the client's default
    pool keeps 5 per CPU: on 2 CPUs fewer than the child watches alone hold open, so each call beyond
    them would open, TLS-handshake and drop a connection)."""
    global _client
    with _lock:
        if _client is None:
            config = kubernetes.client.Configuration.get_default_copy()
            config.connection_pool_maxsize = POOL_SIZE
            _client = DynamicClient(_Bounded(configuration=config))
        return _client


def _res(api_version: str, kind: str) -> Any:
    """The dynamic client's resource, looked up once (its discovery search cost ~1 ms a call), one
    lookup at a time: the client's discovery fills a shared cache, and the watch threads' first
    lookups at once broke it (KeyError: 'resources' inside kubernetes.dynamic.discovery)."""
    found = _resources.get((api_version, kind))
    if found is None:
        with _discovery:
            found = _resources.get((api_version, kind))
            if found is None:
                found = client().resources.get(api_version=api_version, kind=kind)
                _resources[(api_version, kind)] = found
    return found


def resource(api_version: str, kind: str) -> Any:
    """The dynamic client's resource, its lookup cached (_res): for the operator's other API module
    (lease_store.py)."""
    return _res(api_version, kind)


def api_message(exc: ApiException) -> str:
    """The API server's own words for a refusal (the Status body's message), else its HTTP reason."""
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or exc.reason or "")


def crd_unserved() -> str | None:
    """Why the API server serves no GraphTraining kopf could handle (none, or its CRD being deleted: no
    patch), or None (served, or no answer: kopf retries). Started so, kopf served nothing, /readyz said
    leading, and a CRD installed later was often never picked up (its rescan ran before discovery).
    Asked afresh (the group's discovery document, not the client's cache): the tick asks it too."""
    try:
        with calling("get", expected=(404,)):
            found = _raw(
                client().request("GET", f"/apis/{API_VERSION}", serialize=False, _request_timeout=30)
            )
    except ApiException as exc:
        if exc.status != 404:
            return None
        found = {}
    except (urllib3.exceptions.HTTPError, OSError):
        return None
    verbs = next((r.get("verbs") for r in found.get("resources") or [] if r.get("name") == PLURAL), None)
    if verbs is None:
        return (
            f"the API server serves no {PLURAL}.{API_VERSION}: install the GraphTraining CRD first "
            "(helm installs it unless --skip-crds; kubectl apply -f charts/graphtrain/crds/)"
        )
    if "patch" not in verbs:
        return f"the CRD {PLURAL}.{GROUP} is being deleted: GraphTrainings cannot be patched"
    return None


def crd_object(timeout: float = 10.0) -> dict[str, Any] | int | None:
    """The GraphTraining CRD ({} when there is none), the status of a refusal (401, 403: no RBAC to list
    CRDs), None without an answer (crd_version.py reads it). A list by name: the operator's ClusterRole
    lists CRDs, gets none."""
    try:
        answer = _res("apiextensions.k8s.io/v1", "CustomResourceDefinition").get(
            field_selector=f"metadata.name={PLURAL}.{GROUP}", serialize=False, _request_timeout=timeout
        )
        found = _raw(answer)["items"]
    except ApiException as exc:
        return int(exc.status) if exc.status in (401, 403) else None
    except (ResourceNotFoundError, urllib3.exceptions.HTTPError, OSError, ValueError, KeyError):
        return None
    return dict(found[0]) if found else {}


def use_cache(cache: ChildCache | None) -> None:
    """Observe children from `cache` (fed by watch_children) instead of listing them; None: list."""
    global _cache
    _cache = cache


def _raw(answer: Any) -> dict[str, Any]:
    """The JSON of an answer asked for with serialize=False (no ResourceInstance wrapping)."""
    return dict(json.loads(answer.data))


def observe(
    namespace: str, name: str, body: dict[str, Any] | None = None, fresh: bool = False
) -> Observed | None:
    """The GraphTraining (read with a GET, unless `body`: as its watch showed it, watched.py) and its
    children (see owned()): from the watches' cache once it is synced, unless `fresh` (listed); None if
    it is gone."""
    watched = body is not None
    try:
        with calling("get", expected=(404,)):
            if body is None:
                body = _raw(_res(API_VERSION, KIND).get(name=name, namespace=namespace, serialize=False))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    children: dict[str, Any] = {}
    pods: list[dict[str, Any]] = []
    cache = _synced_cache(fresh)
    for _, kind, obj in _children(namespace, name, body["metadata"]["uid"], retained=True, cache=cache):
        children[key(kind, obj["metadata"]["name"])] = obj
        if kind == "Pod":
            pods.append(obj)
    now = dt.datetime.now(dt.UTC)
    return Observed(body, children, pods, now, watched=watched, cached=cache is not None)


def _synced_cache(fresh: bool) -> ChildCache | None:
    """The watches' cache to read children from: None (list them) if `fresh` or before it is synced."""
    return _cache if _cache is not None and not fresh and _cache.synced(timeout=0) else None


LIST_PAGE = 500  # trainings a page of the sweep's list (one consistent snapshot across its pages)


def training_versions(namespaces: tuple[str, ...] = ()) -> dict[tuple[str, str], str] | None:
    """(namespace, name) -> resourceVersion of every GraphTraining (in `namespaces`; none: all), by a
    LIST (one a namespace, paged: its pages are one snapshot): the tick's sweep, which GETs only the
    trainings whose version differs from the watch's copy, or missing. None if a list failed."""
    found: dict[tuple[str, str], str] = {}
    try:
        for namespace in namespaces or (None,):
            token = None
            for _ in range(1_000_000 // LIST_PAGE):  # bounded: a million trainings
                with calling("list"):
                    page = _raw(
                        _res(API_VERSION, KIND).get(
                            namespace=namespace, limit=LIST_PAGE, _continue=token, serialize=False
                        )
                    )
                for item in page.get("items") or []:
                    meta = item["metadata"]
                    found[(meta["namespace"], meta["name"])] = meta.get("resourceVersion") or ""
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError, KeyError) as exc:
        log.warning("the sweep's list of GraphTrainings failed (%s): each is read with a GET", exc)
        return None
    return found


def _children(
    namespace: str, name: str, uid: str, retained: bool = False, cache: ChildCache | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """(apiVersion, kind, object) of every child of the training with this uid, in CHILD_KINDS order
    (Jobs and StatefulSets before the pods they own); `retained`: also the data claim a training of
    this name kept (storage.whenDeleted Retain: no owner), which the training uses but never deletes.
    From `cache` (see _synced_cache); None: listed, one call a kind."""
    selector = f"{LABEL_TRAINING}={name}"
    cached = cache.children(namespace, name) if cache is not None else {}
    owners, found = {uid}, []
    for api_version, kind in CHILD_KINDS:
        if cache is not None:
            items = cached[kind]
        else:
            with calling("list"):
                answer = _res(api_version, kind).get(
                    namespace=namespace, label_selector=selector, serialize=False
                )
            items = sorted(_raw(answer)["items"], key=lambda o: o["metadata"]["name"])
        for obj in items:
            if owned(obj, owners) or (
                retained and kind == "PersistentVolumeClaim" and manifests.retained_claim(obj, name)
            ):
                found.append((api_version, kind, obj))
                if kind in ("Job", "StatefulSet"):
                    owners.add(obj["metadata"]["uid"])
    return found


def apply(plan: Plan, observed: Observed, fence: Callable[[], bool] = lambda: True) -> bool:
    """Write the plan: its creates and deletes, the status if it changed, its events. `fence` is asked
    before each write; once it says no (the Lease was lost meanwhile), nothing more is written and
    False is returned (True: all of it was written)."""
    body = observed.training
    ns = body["metadata"]["namespace"]
    refusals: list[Event] = []
    forbidden: dict[str, str] = {}  # every create refused, in the API server's words: said in the status
    # a create of a kind not served, in a namespace being deleted, or refused by admission: the creates
    # after it wait (a pod made without its refused peer would wait for it, holding its peer's quota)
    unserved = False
    gang = gang_admission.members(plan.actions, plan.gang)
    tried = gang_holds.fingerprint([a.obj for a in gang])  # held after an undo (gang_holds.py)
    waiting = _holds.held(body["metadata"]["uid"], tried) if gang else None
    try:
        refused = (waiting or _gang_refused(gang, body, len(plan.gang))) if gang else None
    except NameTaken:  # a dry run's 409 from another's pod: the pods made before wait for no peer
        if plan.gang and fence():
            _undo(plan.gang, body, ns)
        raise
    made_gang: list[dict[str, Any]] = []  # its pods this apply made: deleted if a later one is refused
    peers = list(plan.gang)  # its pods made before, observed: deleted with them (made_before())
    for action in plan.actions:
        if not fence():
            return False
        obj = action.obj
        if refused is not None and action is gang[0]:  # said once, where the gang starts
            if peers:  # a gang made in part whose rest cannot be made holds nothing
                refused = refused[0], gang_admission.partial_undone(refused[1], _undo(peers, body, ns))
                peers = []
            unserved, forbidden[refused[0]] = True, refused[1]
            refusals += [e for e in [refusal(body, *refused)] if e is not None]
        if unserved and action.verb == "create":
            continue
        try:
            with calling(action.verb, expected=(404, 409)):
                res = _res(obj["apiVersion"], obj["kind"])
                if action.verb == "create":
                    made = _raw(res.create(body=obj, namespace=ns, serialize=False))
                    if _cache is not None:
                        _cache.created(made)
                    if any(action is a for a in gang):
                        made_gang.append(made)
                else:  # with a uid: only that object (409 if the name now holds another), as TTLs do
                    options: dict[str, Any] = {"propagationPolicy": "Background"}
                    if obj["metadata"].get("uid"):
                        options["preconditions"] = {"uid": obj["metadata"]["uid"]}
                    res.delete(name=obj["metadata"]["name"], namespace=ns, body=options, serialize=False)
                    if _cache is not None:
                        _cache.deleted(obj["kind"], ns, obj["metadata"]["name"], obj["metadata"].get("uid"))
        except ResourceNotFoundError:
            # a kind no installed CRD serves (a gang's PodGroup without Volcano or coscheduling): said once
            # as a refusal, nothing made after it (its pods would wait forever); a delete has nothing to do
            if action.verb == "create":
                unserved = True
                forbidden[action.key] = unserved_message(obj)
                said = refusal(body, action.key, forbidden[action.key])
                refusals += [said] if said is not None else []
        except ApiException as exc:
            judged = judge(obj, exc.status, exc.body, api_message(exc)) if action.verb == "create" else None
            if action.verb == "create" and namespace_terminating(exc.status, exc.body):
                unserved = True  # the namespace's trainings go with it: nothing more is made there
            elif judged is not None:  # invalid (400, 422), or forbidden (403): the later creates wait
                unserved = unserved or judged.waits
                message = judged.message
                if judged.waits and (made_gang or peers) and any(action is a for a in gang):
                    if not fence():
                        return False
                    n, gone = len(gang) + len(peers), _undo(peers + made_gang, body, ns)
                    message = gang_admission.undone(message, n, gone)
                    _holds.undone(body["metadata"]["uid"], tried, action.key, message)
                    made_gang = peers = []
                forbidden[action.key] = message
                said = refusal(body, action.key, message, judged.level)
                refusals += [said] if said is not None else []
            elif action.verb == "create" and exc.status == 409:
                held = _whose_is(obj, body)
                if held is not None:
                    if (made_gang or peers) and any(action is a for a in gang) and fence():  # made ones wait
                        _undo(peers + made_gang, body, ns)
                    raise NameTaken({action.key: held}) from None
            elif action.verb == "delete" and exc.status in (404, 409) and obj["metadata"].get("uid"):
                if _cache is not None:  # that object is gone (409: another stands under its name)
                    _cache.deleted(obj["kind"], ns, obj["metadata"]["name"], obj["metadata"]["uid"])
            elif exc.status not in (404, 409):
                raise
    if made_gang:  # made whole (a create that raised left the rest to the next reconcile)
        _holds.made(body["metadata"]["uid"])
    if not fence():
        return False
    status = told(plan.status, forbidden)
    if not same(status, body.get("status") or {}):
        meta = {"resourceVersion": body["metadata"]["resourceVersion"]} if observed.watched else {}
        try:  # the watch's copy: onto that version only (Stale)
            with calling("patch", expected=(409,) if meta else ()):
                written = _res(API_VERSION, KIND).status.patch(
                    body={"metadata": meta, "status": status},
                    name=body["metadata"]["name"],
                    namespace=ns,
                    content_type="application/merge-patch+json",
                    serialize=False,
                )
        except ApiException as exc:
            if exc.status != 409 or not meta:
                raise
            raise Stale(f"{ns}/{body['metadata']['name']}") from None
        rv = _raw(written)["metadata"].get("resourceVersion") if getattr(written, "data", None) else None
        _on_written(ns, body["metadata"]["name"], rv)
    for event in [*plan.events, *refusals]:
        if not fence():
            return False
        post_event(body, event)
    return True


def _gang_refused(gang: list[Action], training: dict[str, Any], made: int = 0) -> tuple[str, str] | None:
    """gang_admission.refused() of dry runs of the gang as one pod, then alone until one is refused (the
    first only if the one pod is over quota): 2 calls a reconcile while it waits. A 409 from another's
    pod: NameTaken before any is made (else made and deleted again at every reconcile)."""
    pods, ns = _res("v1", "Pod"), training["metadata"]["namespace"]

    def dry(obj: dict[str, Any]) -> gang_admission.Answer:
        try:
            with calling("create", expected=(400, 403, 409, 422)):
                pods.create(body=obj, namespace=ns, serialize=False, dry_run="All")
        except ApiException as exc:
            return exc.status, exc.body, api_message(exc)
        return None

    together = dry(gang_admission.as_one([a.obj for a in gang]))
    alone: list[gang_admission.Answer] = []
    for action in gang[:1] if gang_admission.over_quota(together) else gang:  # 2 calls while it waits
        alone.append(dry(action.obj))
        held = _whose_is(action.obj, training) if alone[-1] and alone[-1][0] == 409 else None
        if held is not None:
            raise NameTaken({action.key: held})
        if gang_admission.waits(action, alone[-1]):
            break
    return gang_admission.refused(gang, alone, together, made)


def _undo(pods: list[dict[str, Any]], training: dict[str, Any], ns: str) -> list[str]:
    """Delete the gang's pods this apply made (only this training's: ownership.owned, and by uid) after
    a later one was refused (gang_admission.py says why); the gang is then held (gang_holds.py)."""
    res, gone = _res("v1", "Pod"), []
    for pod in pods:
        if not owned(pod, {training["metadata"]["uid"]}):
            continue
        meta = pod["metadata"]
        options = {"propagationPolicy": "Background", "preconditions": {"uid": meta["uid"]}}
        try:
            with calling("delete", expected=(404, 409)):
                res.delete(name=meta["name"], namespace=ns, body=options, serialize=False)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        if _cache is not None:  # that pod (409: another stands under its name; the watch shows it)
            _cache.deleted("Pod", ns, meta["name"], meta["uid"])
        gone.append(meta["name"])
    return gone


def _whose_is(obj: dict[str, Any], training: dict[str, Any]) -> str | None:
    """whose() of the object of `obj`'s name, which answered 409 on create (None: the training's own, as
    when the watches' cache had not seen an earlier create yet; gone since, the next plan makes it).
    Read with a list by name: the chart grants list on every child kind it watches, not get. A kind
    it may only create (a gang's PodGroup) cannot be read: None, the 409 taken as before."""
    meta = training["metadata"]
    try:
        with calling("list", expected=(403, 404)):
            res = _res(obj["apiVersion"], obj["kind"])
            answer = res.get(
                namespace=meta["namespace"],
                field_selector=f"metadata.name={obj['metadata']['name']}",
                serialize=False,
            )
    except ApiException as exc:
        if exc.status in (403, 404):
            return None
        raise
    items = _raw(answer).get("items") or []
    return next(
        (w for o in items if (w := whose({**o, "kind": obj["kind"]}, meta["name"], meta["uid"]))), None
    )


def post_event(body: dict[str, Any], event: Event) -> None:
    meta = body["metadata"]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ev = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:1024],
        "source": {"component": "graphtrain-operator"},
        "reportingComponent": "graphtrain-operator",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        with calling("create"):
            _res("v1", "Event").create(body=ev, namespace=meta["namespace"])
    except ApiException as exc:  # events are best effort
        log.warning("could not post event %s: %s", event.reason, exc.reason)


def delete_children(namespace: str, name: str, uid: str) -> int:
    """Delete every child of the training (owned by it, or by its own Job/StatefulSet): what the garbage
    collector does through the ownerReferences, done here too so nothing outlives a GraphTraining on a
    cluster whose collector is slow or absent (the test API server has none)."""
    deleted = 0  # listed afresh: a deletion must not miss a child the watches have not shown yet
    for api_version, kind, obj in reversed(_children(namespace, name, uid)):
        meta = obj["metadata"]  # that object (its uid): never one of a training made again since the list
        try:
            with calling("delete", expected=(404, 409)):
                _res(api_version, kind).delete(
                    name=meta["name"],
                    namespace=namespace,
                    body={"propagationPolicy": "Background", "preconditions": {"uid": meta["uid"]}},
                    serialize=False,
                )
            deleted += 1
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        if _cache is not None:
            _cache.deleted(kind, namespace, meta["name"], meta["uid"])
    return deleted
