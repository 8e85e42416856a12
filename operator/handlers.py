"""kopf handlers: thin. Every trigger (the GraphTraining created, resumed or changed; any labelled child
changed; a periodic timer for stall detection; a plan's timed requeue, for its deadline) runs the same
reconcile: observe, plan, apply. Handlers take kopf's keyword arguments by name (kopf passes them all).

Run with `graphtrain operator` (or `kopf run --standalone -m graphtrain.operator.handlers`). Watches
have server and client timeouts (a silent watch is a known kopf pitfall), kopf's own peering is never
used (several replicas elect a leader on a Lease: leader.py, operator/cli.py), and kopf keeps its
bookkeeping in annotations so the status holds only fields the CRD declares.

The operator configuration (config.py) is the command's (use_config(), before kopf starts); run
without the command, the startup handler loads it from $GRAPHTRAIN_OPERATOR_CONFIG or takes the
built-in defaults. So are its metrics (use_metrics(): the registry its /metrics serves): every
reconcile is counted by result and timed, and the status it decided is what the training's metrics
show; the Kubernetes API calls that fail are counted where they are made (k8s.py).

Children are not listed at each reconcile: one watch per child kind keeps a cache of them
(cache.py, fed by child_watch.watch_children) and asks a work queue (workqueue.py: WORKERS threads,
each training at most once at a time, requests for a waiting one merged) to reconcile the training
whose child changed, after the cache holds the change. The GraphTraining itself is read fresh each
time (one GET), so its status never goes back, but by the periodic tick's reconciles: they take it as
its watch last showed it once that holds the operator's own last status write (watched.py: at 300
trainings a tick was 300 GETs), and write their status onto that version only (k8s.Stale: a copy
behind the training is read again with a GET; a plan on the copy that creates or deletes is made
again on a GET first, as its status write comes after those). The operator's own creates and
deletes enter the cache at once, so no reconcile makes again what the last one made. A plan that would
end or restart work on what the cache shows (a rank's pod missing after the trainers ran, an earlier
attempt's pods, the token Secret gone: Plan.confirm) is made again on children listed from the API
server before anything is applied: a lagging or relisting watch failed a healthy training so.

No finalizer: every child carries an ownerReference to its GraphTraining (but a data claim kept by
storage.whenDeleted Retain, which nothing deletes), so the cluster's garbage collector deletes them
however the training goes. A finalizer of kopf's held every GraphTraining until the operator let go:
with the operator down, a namespace being deleted stayed Terminating, and deleting the CRD never
completed (kopf serves no resource it cannot patch). kopf adds one for any timer or mandatory delete
handler, so neither is used: the periodic reconciles are a thread of ours (tick()), and the end of a
training is seen on its watch events (on_event: children deleted at once, its metrics and log state
forgotten; one held by someone else's finalizer gets the status that says every role stopped).

When the operator stops, pending requeues are cancelled, the watches end and the queue runs nothing
more: a standby may lead next, and a requeue of this process must not reconcile after it let go.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import kopf

from graphtrain.operator import child_watch, crd_version, k8s, logs
from graphtrain.operator import config as operator_config
from graphtrain.operator.cache import ChildCache
from graphtrain.operator.context import Plan
from graphtrain.operator.endpoints import OperatorMetrics
from graphtrain.operator.observation import finished
from graphtrain.operator.reconcile import plan
from graphtrain.operator.watched import Watched
from graphtrain.operator.workqueue import WorkQueue

log = logging.getLogger("graphtrain.operator")
GROUP, VERSION, PLURAL = k8s.GROUP, k8s.VERSION, k8s.PLURAL
# the timer's period, and the threads that run the reconciles the child watches ask for (each training
# on one at a time); `graphtrain operator` checks both before it imports this module
TIMER_SECONDS, WORKERS = operator_config.loop_settings()
REQUEUE_SLACK = 1.0  # seconds after a plan's requeue time: status times have whole seconds
# each training's lock, while a reconcile holds or waits for it (_lock())
_locks: weakref.WeakValueDictionary[tuple[str, str], threading.Lock] = weakref.WeakValueDictionary()
_locks_guard = threading.Lock()
_timers: dict[tuple[str, str], threading.Timer] = {}
_timers_lock = threading.Lock()
_config: operator_config.OperatorConfig | None = None
_metrics = OperatorMetrics()  # unserved until the command gives the one it serves (use_metrics)
_namespaces: tuple[str, ...] = ()  # those the operator watches (none: all)
_queue: WorkQueue[tuple[str, str]] | None = None  # started by the startup handler
_watching = threading.Event()  # set: the child watches stop
_watched = Watched()  # each training as its watch last showed it: the tick's reconciles GET none
k8s.use_on_written(lambda namespace, name, rv: _watched.wrote((namespace, name), rv))


def always() -> bool:
    """The fence of a standalone operator (no --leader-elect): it always may act."""
    return True


_fence: Callable[[], bool] = always
_fenced_logged = threading.Event()  # the first skip is logged at info, the others at debug


def use_config(config: operator_config.OperatorConfig) -> None:
    """The configuration the handlers make children with (the command loads it before kopf starts)."""
    global _config
    _config = config


def use_namespaces(namespaces: list[str] | tuple[str, ...]) -> None:
    """The namespaces the operator watches (the command's --namespace; none: all): the child watches
    list and watch in each of them, which is what a namespaced Role allows."""
    global _namespaces
    _namespaces = tuple(namespaces)


def metrics() -> OperatorMetrics:
    """The metrics the handlers count into now."""
    return _metrics


def use_metrics(metrics: OperatorMetrics) -> None:
    """The metrics the handlers and the API calls count into (the command serves their registry)."""
    global _metrics
    _metrics = metrics
    k8s.use_error_counter(metrics.api_error)


def use_fence(fence: Callable[[], bool]) -> None:
    """What every reconcile asks before it observes and before it writes: with --leader-elect, the
    elector's may_act (it leads and renewed within the renew deadline); kopf alone cannot know that a
    replica resumed from a pause has lost the Lease before its election thread noticed."""
    global _fence
    _fence = fence
    _fenced_logged.clear()


def may_act(namespace: str, name: str) -> bool:
    """The fence, logged when it holds a reconcile back (once at info, then at debug)."""
    if _fence():
        return True
    level = logging.DEBUG if _fenced_logged.is_set() else logging.INFO
    _fenced_logged.set()
    log.log(level, "not leading (or the lease is not renewed): reconcile of %s/%s skipped", namespace, name)
    return False


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.watching.connect_timeout = 30
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="operator.graphtrain.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="operator.graphtrain.io")
    settings.posting.enabled = False  # our own events, one per transition (k8s.post_event)
    k8s.load_config()
    if _config is None:  # not started by `graphtrain operator`
        use_config(operator_config.load())
    start_watches()


def start_watches() -> None:
    """The child watches feed the cache reconciles observe from (cache.py) and ask the work queue for
    the reconcile of the training whose child changed (workqueue.py)."""
    global _queue, _watching
    stop_watches()
    cache = ChildCache([kind for _, kind in k8s.CHILD_KINDS], _namespaces or ("",))
    queue: WorkQueue[tuple[str, str]] = WorkQueue(
        lambda key: reconcile(*key), WORKERS, periodic_work=lambda key: reconcile(*key, watched=True)
    )
    _queue, _watching = queue.start(), threading.Event()
    k8s.use_cache(cache)
    child_watch.watch_children(cache, lambda namespace, name: queue.add((namespace, name)), _watching)
    threading.Thread(target=_ticking, args=(queue, _watching), name="tick", daemon=True).start()


def stop_watches() -> None:
    """The watches end, the queue runs nothing more, reconciles list their children again."""
    global _queue
    _watching.set()
    if _queue is not None:
        _queue.stop(timeout=10)
        _queue = None
    k8s.use_cache(None)


@kopf.on.cleanup()
def stop_requeues(**_: Any) -> None:
    """No reconcile after the operator stopped (a standby may be leading by then)."""
    with _timers_lock:
        for timer in _timers.values():
            timer.cancel()
        _timers.clear()
    stop_watches()


def _lock(namespace: str, name: str) -> threading.Lock:
    """The training's lock, one at a time per training. Held weakly: it goes once no reconcile holds
    or waits for it (a defaultdict kept a lock for every training the operator ever saw, for life)."""
    with _locks_guard:
        lock = _locks.get((namespace, name))
        if lock is None:
            lock = _locks[(namespace, name)] = threading.Lock()
        return lock


def reconcile(namespace: str, name: str, watched: bool = False) -> None:
    """Observe, plan, apply; then arrange the plan's timed requeue (or cancel the last one). Counted by
    result (ok, error, skipped) and timed. `watched` (the tick's): the training as its watch showed it
    when that is current (watched.py), not a GET."""
    start, result = time.perf_counter(), "error"
    try:
        result = _reconcile(namespace, name, watched)
    except Exception:  # its status write may have happened or not: the copy is not used until a GET
        _watched.distrust((namespace, name))  # and the watch agree on a version (watched.py)
        raise
    finally:
        _metrics.reconciled(result, time.perf_counter() - start)


def _reconcile(namespace: str, name: str, watched: bool = False) -> str:
    with _lock(namespace, name):
        body = _watched.current((namespace, name)) if watched else None
        try:
            return _locked(namespace, name, body)
        except k8s.Stale:  # the watch's copy was behind the training (a lagging watch): read it
            _watched.distrust((namespace, name))
            return _locked(namespace, name, None)


def _locked(namespace: str, name: str, body: dict[str, Any] | None, cached: Plan | None = None) -> str:
    """_reconcile() under the training's lock, on `body` (the watch's copy) or a GET (None); its children
    from the cache, or listed when `cached` (the plan on the cache's would end or restart work:
    Plan.confirm), which is said and counted if the list does not bear it out."""
    if not may_act(namespace, name):
        return "skipped"
    observed = k8s.observe(namespace, name, body, fresh=cached is not None)
    if observed is None:  # gone (its DELETED event may have fallen in a gap of kopf's watch)
        _known.pop((namespace, name), None)
        _watched.forget((namespace, name))
        requeue(namespace, name, None)
        _metrics.forget(namespace, name)
        logs.forget(namespace, name)
        return "skipped"
    if body is None:  # a GET: the copy is current once the watch shows its version (watched.py)
        _watched.read((namespace, name), observed.training["metadata"].get("resourceVersion"))
    decided = plan(observed, config=_config, token=secrets.token_hex(24))
    if body is not None and decided.actions:  # the copy's plan acts: planned again on a GET first
        return _locked(namespace, name, None)
    if decided.confirm:  # it ends or restarts work on what the cache showed: planned again on a list
        log.info(
            "%s/%s: %s, as the child cache shows it: listing its children", namespace, name, decided.confirm
        )
        return _locked(namespace, name, None, cached=decided)
    if cached is not None and disagree(cached, decided):
        _metrics.cache_behind()
        log.warning(
            "%s/%s: the child cache was behind the API server: on it, %s (phase %s); on the list, phase %s",
            namespace,
            name,
            cached.confirm,
            cached.status.get("phase"),
            decided.status.get("phase"),
        )
    if not may_act(namespace, name):
        return "skipped"
    try:
        applied = k8s.apply(decided, observed, fence=_fence)
    except k8s.NameTaken as exc:  # a child's name holds another's object: hold, making nothing more
        observed.taken = exc.taken
        decided = plan(observed, config=_config)
        applied = k8s.apply(decided, observed, fence=_fence)
    if not applied:
        return "skipped"  # the lease was lost meanwhile: the new leader writes the rest
    old = observed.training.get("status") or {}
    logs.decided(namespace, name, old, decided)
    _metrics.training(namespace, name, old, decided.status)
    if (observed.training.get("metadata") or {}).get("deletionTimestamp"):
        # going: a timed reconcile that waited for the lock while ended() ran must not export it
        # again after ended() forgot it (nothing would forget it a second time)
        _metrics.forget(namespace, name)
    requeue(namespace, name, decided.requeue_after)
    return "ok"


def disagree(cached: Plan, listed: Plan) -> bool:
    """Whether the plan made on listed children differs from the one made on the cache's where it
    matters: its phase, its restarts, or what it deletes."""

    def said(p: Plan) -> tuple[Any, ...]:
        deletes = sorted(a.key for a in p.actions if a.verb == "delete")
        return p.status.get("phase"), p.status.get("restarts"), deletes

    return said(cached) != said(listed)


def requeue(namespace: str, name: str, after: float | None) -> None:
    """Reconcile the training again in `after` seconds whatever else happens (its deadline must fire
    with no event to wake the operator; the periodic timer alone would fire it up to TIMER_SECONDS
    late); None cancels. One pending requeue per training: a new plan replaces the last one's."""
    with _timers_lock:
        pending = _timers.pop((namespace, name), None)
        if pending is not None:
            pending.cancel()
        if after is None:
            return
        timer = threading.Timer(after + REQUEUE_SLACK, _requeued, (namespace, name))
        timer.daemon = True
        _timers[(namespace, name)] = timer
        timer.start()


def _requeued(namespace: str, name: str) -> None:
    """A requeue's reconcile, on the timer's own thread: a failure is logged, not lost in the thread,
    and tried again a timer period later unless another plan asked for a requeue meanwhile (the
    periodic timer skips finished trainings, whose TTL only this requeue fires)."""
    try:
        reconcile(namespace, name)
    except Exception:
        log.exception("requeued reconcile of %s/%s failed", namespace, name)
        with _timers_lock:
            again = _timers.get((namespace, name)) in (None, threading.current_thread())
        if again:
            requeue(namespace, name, TIMER_SECONDS)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_training(*, name: str, namespace: str | None, **_: Any) -> None:
    if namespace:  # always: GraphTrainings are namespaced
        reconcile(namespace, name)


# what the tick does with each training the operator sees: reconcile it, skip it (finished: its TTL is
# its plan's requeue), or nothing more (being deleted: on_event handled its end)
DUE, IDLE, GOING = "due", "idle", "going"
# from on_event: (namespace, name) -> {uid: state}, each inner dict replaced whole, never changed (the
# tick thread reads them). By uid: a training deleted and made again under its name has its events on
# another of kopf's workers, so the old one's DELETED may come after the new one's first events.
_known: dict[tuple[str, str], dict[str, str]] = {}


def due(status: dict[str, Any]) -> bool:
    """Whether the periodic tick reconciles a training of this status: not when it finished, unless its
    phase was patched over its end (that phase is written back)."""
    ended = finished(status)
    return ended is None or status.get("phase") != ended


# every SWEEP_PERIODS-th tick asks for every training known, finished or going too: kopf re-lists after
# a watch gap and makes up no DELETED, so a finished training deleted in it stayed known for good (its
# metrics exported: a Failed one's alert firing); its reconcile finds it gone and forgets it
SWEEP_PERIODS = 20


def tick(queue: WorkQueue[tuple[str, str]], sweep: bool = False) -> int:
    """Ask the work queue, in its periodic lane, for every training the tick is due for (stall
    detection, a deadline missed by its requeue), or every one known (`sweep`); how many."""
    keys = [key for key, states in list(_known.items()) if sweep or DUE in states.values()]
    if sweep:  # one LIST: only a training it shows at another version than the copy, or not, GETs
        _watched.swept(k8s.training_versions(_namespaces))
    for key in keys:
        queue.add(key, periodic=True)
    return len(keys)


def _ticking(queue: WorkQueue[tuple[str, str]], stop: threading.Event) -> None:
    """Each period: is the CRD still served (kopf, its CRD deleted, served nothing and said so twice in
    its log, /readyz said leading, and a CRD installed again was not always picked up), then tick().
    Discovery's word alone is not enough (crd_version.lagging): a restarted API server lists the CRD
    in its discovery a moment after it serves it. A failure is logged and the next period runs."""
    periods = 0
    while not stop.wait(TIMER_SECONDS):
        periods += 1
        try:
            unserved = k8s.crd_unserved()
            if unserved is not None and crd_version.lagging(k8s.crd_object()):
                log.warning(
                    "%s, though the CRD is established: discovery lags, asked again next period", unserved
                )
                unserved = None
            if unserved is not None:
                _on_unserved(unserved)
                return
            tick(queue, sweep=periods % SWEEP_PERIODS == 0)
        except Exception:  # a thread that died here ticked no training again, and checked no CRD
            log.exception("the periodic tick failed; tried again in %s s", TIMER_SECONDS)


def _log_unserved(message: str) -> None:
    log.error("%s: the handlers serve nothing until the operator restarts", message)


_on_unserved: Callable[[str], None] = _log_unserved


def use_on_unserved(react: Callable[[str], None]) -> None:
    """What the tick does once the API server serves no GraphTraining kopf could handle (its one-line
    reason): `graphtrain operator` stops and exits 1 saying it, as it does at start (the kubelet
    restarts it, and it serves the CRD once installed); run by kopf alone, it is logged."""
    global _on_unserved
    _on_unserved = react


def note(key: tuple[str, str], uid: str, state: str | None) -> bool:
    """Set (None: drop) the state of training `uid` under `key`; whether another training of this name
    is known (one deleted whose DELETED is still to come, or one made after it)."""
    others = {u: s for u, s in (_known.get(key) or {}).items() if u != uid}
    states = others if state is None else {**others, uid: state}
    if states:
        _known[key] = states
    else:
        _known.pop(key, None)
    return bool(others)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_event(
    *,
    type: str | None,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    uid: str,
    event: kopf.RawEvent | None = None,
    **_: Any,
) -> None:
    """Every watch event of a GraphTraining (none adds a finalizer): what the tick does with it, and
    its end: gone (DELETED), or being deleted while someone else's finalizer holds it. A coroutine on
    kopf's event loop: most events only note the status; an end runs on a thread of its own. By uid:
    the end of a training whose name already holds a new one deletes the old one's children only."""
    if not namespace:  # always: GraphTrainings are namespaced
        return
    key = (namespace, name)
    was = (_known.get(key) or {}).get(uid)
    raw: Any = event["object"] if event is not None else None
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp") or not isinstance(raw, dict):
        _watched.forget(key)
    elif alone(namespace, name, uid):  # not one of two trainings of a name (their events interleave)
        _watched.seen(key, raw)
    else:
        _watched.forget(key)
    if type == "DELETED":
        only = not note(key, uid, None)
        if was != GOING:
            await asyncio.to_thread(ended, namespace, name, uid, False, only)
    elif body.get("metadata", {}).get("deletionTimestamp"):
        if was != GOING:
            only = not note(key, uid, GOING)
            await asyncio.to_thread(ended, namespace, name, uid, True, only)
    else:
        note(key, uid, DUE if due(dict(body.get("status") or {})) else IDLE)


def alone(namespace: str, name: str, uid: str) -> bool:
    """Whether no other training of this name than `uid` was seen (a new one made after it was deleted)."""
    return not [u for u in _known.get((namespace, name)) or {} if u != uid]


def ended(namespace: str, name: str, uid: str, held: bool, only: bool = True) -> None:
    """A GraphTraining is gone or going: its children are deleted now (the garbage collector does it
    too, through their ownerReferences; a cluster without one, or a slow one, is not waited for), its
    requeue cancelled, its metrics and log state forgotten. `held` (someone else's finalizer keeps it
    readable): its status then says every role stopped (plan() of a training being deleted). Not
    `only` (its name holds a new training already): its children alone, by uid; the requeue, metrics
    and log state under the name are the new one's. Errors are logged: nothing holds the deletion, the
    collector deletes what is left."""
    if only:
        requeue(namespace, name, None)
    try:
        if may_act(namespace, name):
            with _lock(namespace, name):  # after a reconcile in flight, which may have made children
                log.info(
                    "%s/%s deleted: %d children deleted",
                    namespace,
                    name,
                    k8s.delete_children(namespace, name, uid),
                )
            if held and only:
                reconcile(namespace, name)
    except Exception as exc:
        log.warning("%s/%s deleted: its children are left to the garbage collector: %s", namespace, name, exc)
    finally:
        if only and alone(namespace, name, uid):  # a new one seen meanwhile keeps its own
            _metrics.forget(namespace, name)  # after the reconcile, which counts it
            logs.forget(namespace, name)


# A labelled child changed: its training is reconciled by the work queue, asked by the child watches
# (start_watches), not by kopf handlers: those would run before the cache has the change.
