"""The stages that run a training, in plan()'s order after the lifecycle's (lifecycle.py): the spec,
the partition, the shard servers, the trainers. Each is a pure function of the Context that sets its
conditions through the shared setters (contract/conditions.py) and returns a Step: the children to
create or delete, the status fields it observed, and the phase if it ends the plan.

  spec       valid? once running, the applied spec with the current runPolicy and suspend; other
             changes refused (spec_stage.py)
  partition  the base children and the partition job, until it succeeded
  shards     the shard servers' StatefulSet and each server's state
  trainers   the trainer pods of the current attempt: start, restart, fail, succeed; progress, stalls
             (reported, or restarted with runPolicy.stallPolicy Restart)
Pods that cannot start (unschedulable, a container waiting in ImagePullBackOff, CrashLoopBackOff, ...)
are named in their stage's condition (PodsNotStarting), and fail the training after
runPolicy.startTimeoutSeconds (StartTimeout); so is a Job or StatefulSet whose pods were never made
(observation.unmade: its controller's creates refused by a quota, a LimitRange, Pod Security).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from graphtrain.contract import conditions, reporting
from graphtrain.contract.children import LABEL_ATTEMPT, SHARD_CONTAINER, rank_pods, worker_name
from graphtrain.contract.spec import (
    CleanPodPolicy,
    ConditionType,
    GraphTraining,
    Mode,
    Phase,
    ShardState,
    StallPolicy,
    colocated,
)
from graphtrain.operator import gang, manifests, workers
from graphtrain.operator.context import Action, Context, Step, clean_up
from graphtrain.operator.observation import (
    FINISHED,
    Obj,
    Server,
    Trouble,
    culprit_due,
    first_failure,
    job_outcome,
    parse_time,
    partition_error,
    partition_stats,
    pod_failure,
    pod_phase,
    pod_ready,
    progress_status,
    shard_cause,
    silent_rank,
    troubles,
    unmade,
    waiting_for_group,
)


def _cannot_start(
    ctx: Context, conds: conditions.Conditions, stuck: list[Trouble], kind: ConditionType, what: str
) -> Step:
    """Pods of a stage cannot start: its condition names each (PodsNotStarting); once one of them has
    not started for runPolicy.startTimeoutSeconds the training fails (StartTimeout) and is cleaned up,
    until then the plan asks to run again when that time falls (phase None: the stage goes on)."""
    claim = ctx.child("PersistentVolumeClaim", ctx.names["data"])
    pending = (claim or {}).get("status", {}).get("phase") == "Pending"
    message = f"{what}: " + "; ".join(map(str, stuck))
    if pending and any(t.reason == "Unschedulable" for t in stuck):
        message += f"; claim {ctx.names['data']} is Pending (no volume bound)"
    conditions.set_pods_not_starting(conds, kind, message)
    timeout = ctx.gt.spec.run_policy.start_timeout_seconds
    known = [t for t in stuck if t.since is not None]
    if not known:
        return Step()
    first = min(known, key=lambda t: t.since or ctx.obs.now)
    waited = (ctx.obs.now - (first.since or ctx.obs.now)).total_seconds()
    if waited < timeout:
        return Step(requeue_after=timeout - waited)
    conditions.set_failed(
        conds,
        conditions.Reason.start_timeout,
        f"{first.what} {first.pod} could not start for {waited:.0f} s "
        f"(runPolicy.startTimeoutSeconds {timeout}): " + message,
    )  # on a pod's status as last seen: one the watch has not shown started since fails it (confirm)
    return Step(clean_up(ctx), phase=Phase.failed, confirm=f"{first.what} {first.pod} could not start")


def partition_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """The base children (applied spec, token, progress map, trainer RBAC, data claim) and the partition
    job; the plan stops here until the job succeeded, and fails if it failed."""
    gt, body, n = ctx.gt, ctx.body, ctx.names
    kept = _partition_kept(ctx, conds)
    earlier = _earlier_partition(ctx) if not kept else []
    if _inference_without_volume(ctx):
        conditions.set_partition_failed(
            conds,
            f"mode inference reads spec.inference.checkpoint from the training's volume, and this training "
            f"has none (no claim {n['data']}: the operator would make it empty): name the claim the "
            "trained checkpoint is on in spec.storage.volumeClaimName",
        )
        said = f"no claim {n['data']} nor ConfigMap {n['config']} for mode inference"
        return Step(clean_up(ctx), phase=Phase.failed, confirm=said)
    actions = ctx.ensure(  # the costly ones (a YAML dump, the command line) only when missing
        manifests.config_map(body, gt) if ctx.absent("ConfigMap", n["config"]) else None,
        manifests.token_secret(body, gt, ctx.token) if ctx.token else None,
        manifests.progress_map(body, gt),
        *manifests.trainer_rbac(body, gt),
        manifests.data_claim(body, gt, ctx.config),
        manifests.partition_job(body, gt, ctx.config)
        if ctx.absent("Job", n["partition"]) and not kept and not earlier
        else None,
    )
    if earlier:
        conditions.set_partitioning(
            conds, f"waiting for pod {', '.join(earlier)} of an earlier partition job to stop"
        )
        return Step(actions, phase=Phase.partitioning)
    if ctx.token and ctx.absent("Secret", n["token"]) and _roles_running(ctx):
        return _token_lost(ctx, conds, actions)
    outcome, why = ("succeeded", "") if kept else job_outcome(ctx.child("Job", n["partition"]))
    if outcome == "failed":
        said = partition_error(ctx.obs.pods)
        conditions.set_partition_failed(conds, f"job {n['partition']}: {why}" + (f": {said}" if said else ""))
        return Step(actions + clean_up(ctx), phase=Phase.failed)
    if outcome != "succeeded":
        pods = ctx.pods("partition")
        none_made = unmade(ctx.child("Job", n["partition"]), pods, ctx.obs.now)
        stuck = troubles(pods) + ([none_made] if none_made else [])
        if stuck:
            kind = ConditionType.partition_ready
            held = _cannot_start(ctx, conds, stuck, kind, f"job {n['partition']}")
            phase = held.phase or Phase.partitioning
            return Step(actions + held.actions, {}, phase, held.requeue_after, held.confirm)
        conditions.set_partitioning(conds, f"job {n['partition']} is running")
        return Step(actions, phase=Phase.partitioning)
    conditions.set_partitioned(conds, "the partition job succeeded")
    stats = partition_stats(ctx.obs.pods)
    return Step(actions, status={"partition": stats} if stats is not None else {})


def _partition_kept(ctx: Context, conds: conditions.Conditions) -> bool:
    """The partition Job succeeded (PartitionReady True when last reconciled) and was deleted since (by
    hand, a Job TTL or a cluster policy): its partition stays on the claim and the training goes on
    with it. Made again, the Job would write a new partition under the running shard servers and
    trainers, the phase would go back to Partitioning while they train, and a failure of that Job
    would fail the training."""
    was = conds.previous.get(str(ConditionType.partition_ready))
    done = was is not None and was.status == "True"
    return done and ctx.absent("Job", ctx.names["partition"])


def _earlier_partition(ctx: Context) -> list[str]:
    """The pods of a partition Job deleted before it ended, still stopping (or orphaned, and running):
    a Job made again at once would partition beside them on the same claim, its start sweeping the
    scratch files they write, with twice the memory and disk. Its pods are this training's partition
    pods while no Job of that name exists."""
    if not ctx.absent("Job", ctx.names["partition"]):
        return []
    pods = ctx.pods("partition")
    return sorted(p["metadata"]["name"] for p in pods if pod_phase(p) not in FINISHED)


def _inference_without_volume(ctx: Context) -> bool:
    """Mode inference on no claim of its own: no storage.volumeClaimName and no <name>-data (a training
    of this name retains one), so the claim the operator would make is empty and its checkpoint absent.
    Judged before the first child: once the training's children exist, the claim it made is its own."""
    gt = ctx.gt
    return (
        gt.spec.mode == Mode.inference
        and not gt.spec.storage.volume_claim_name
        and ctx.absent("PersistentVolumeClaim", ctx.names["data"])
        and ctx.absent("ConfigMap", ctx.names["config"])
    )


def _roles_running(ctx: Context) -> list[Obj]:
    """The shard servers' StatefulSet and the trainer (or worker) pods, those observed: what runs with
    the token read once at its start."""
    sts = ctx.child("StatefulSet", ctx.names["shards"])
    return ([sts] if sts is not None else []) + ctx.pods("trainer")


def _token_lost(ctx: Context, conds: conditions.Conditions, actions: list[Action]) -> Step:
    """The token Secret was deleted while roles run: the new one (in `actions`) differs from the token
    the running servers and trainers read at their start, so a trainer restarted later would be refused
    by the old servers (and a server restarted alone by the old trainers) until the backoff limit. So
    every role restarts together with the new token, from the last checkpoint: the servers' StatefulSet
    and every trainer pod go, counted as one restart of runPolicy.backoffLimit."""
    n = ctx.names
    trainers = {rank: view for p in ctx.pods("trainer") for rank, view in rank_pods(p)}
    why = f"Secret {n['token']} (the shard servers' token) was deleted while the training ran"
    if ctx.attempt >= ctx.gt.spec.run_policy.backoff_limit:  # no restart left: it fails, cleaned up
        step = _trainer_failed(ctx, conds, {}, why, trainers)
        return Step(actions + step.actions, step.status, step.phase, confirm=why)
    servers = ctx.remove("StatefulSet", n["shards"], "apps/v1")
    step = _trainer_failed(ctx, conds, {}, f"{why}: every role restarts with a new token", trainers)
    return Step(actions + servers + step.actions, step.status, step.phase, confirm=why)


def _sidecar(pod: Obj) -> Obj:
    """A worker pod's shard-server status (its native sidecar's), {} before the kubelet reports it."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return next((cs for cs in statuses if cs.get("name") == SHARD_CONTAINER), {})


def _server_pods(ctx: Context) -> dict[int, Obj]:
    """Each shard server's pod by index: its StatefulSet pod, or with partition locality its worker
    pod (operator/workers.py)."""
    if colocated(ctx.gt.spec):
        pods = {p["metadata"]["name"]: p for p in ctx.pods("trainer")}
        each = (pods.get(worker_name(ctx.gt.metadata.name, i)) for i in range(ctx.gt.spec.num_shards))
    else:
        pods = {p["metadata"]["name"]: p for p in ctx.pods("shards")}
        each = (pods.get(f"{ctx.names['shards']}-{i}") for i in range(ctx.gt.spec.num_shards))
    return {i: p for i, p in enumerate(each) if p is not None}


def _server_statuses(ctx: Context) -> dict[int, Server]:
    """Each shard server's pod name, metadata ({}: none observed) and container status (a worker pod's
    sidecar, else its StatefulSet pod's shard-server container, or its only one): shard_cause's input."""
    pods, local, out = _server_pods(ctx), colocated(ctx.gt.spec), {}
    for i in range(ctx.gt.spec.num_shards):
        name = worker_name(ctx.gt.metadata.name, i) if local else f"{ctx.names['shards']}-{i}"
        pod = pods.get(i) or {"metadata": {}}
        own = (pod.get("status") or {}).get("containerStatuses") or [{}]
        cs = _sidecar(pod) if local else next((c for c in own if c.get("name") == SHARD_CONTAINER), own[0])
        out[i] = (name, pod["metadata"], cs)
    return out


def _sidecar_only(pod: Obj) -> Obj:
    """A worker pod as its shard server sees it, for the trouble check: its sidecar's status without
    the trainers' (a crash-looping sidecar is the shard stage's to name; a trainer's is the trainers')."""
    return {**pod, "status": {**(pod.get("status") or {}), "containerStatuses": []}}


def _server_ready(ctx: Context, pod: Obj) -> bool:
    if colocated(ctx.gt.spec):
        return bool(_sidecar(pod).get("ready")) and not pod["metadata"].get("deletionTimestamp")
    return pod_ready(pod)


def ready_shards(ctx: Context) -> int:
    """How many shard servers are ready: as the StatefulSet reports, or with partition locality each
    worker pod's sidecar."""
    if colocated(ctx.gt.spec):
        return sum(_server_ready(ctx, p) for p in _server_pods(ctx).values())
    sts = ctx.child("StatefulSet", ctx.names["shards"]) or {}
    return int((sts.get("status") or {}).get("readyReplicas") or 0)


def shard_statuses(ctx: Context) -> list[Obj]:
    """status.shards: each server's state from its pod (Pending without one), address and restarts."""
    pods, shards = _server_pods(ctx), []
    for i, address in enumerate(manifests.shard_addresses(ctx.gt, ctx.namespace)):
        pod = pods.get(i)
        st = (pod or {}).get("status") or {}
        own = (
            [_sidecar(pod)]
            if pod is not None and colocated(ctx.gt.spec)
            else st.get("containerStatuses") or []
        )
        restarts = sum(int(cs.get("restartCount", 0)) for cs in own)
        state = ShardState.pending
        if pod is not None:
            state = (
                ShardState.ready
                if _server_ready(ctx, pod)
                else ShardState.failed
                if pod_phase(pod) == "Failed"
                else ShardState.loading
            )
        shards.append({"index": i, "state": state.value, "address": address, "restarts": restarts})
    return shards


def shards_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """The shard servers' Service, NetworkPolicy and PodDisruptionBudget (made before the pods they
    govern), StatefulSet, and each server's state from its pod."""
    gt, body, config = ctx.gt, ctx.body, ctx.config
    if colocated(gt.spec):  # the servers are the worker pods' sidecars, made by the trainers stage
        actions = ctx.ensure(
            workers.worker_network_policy(body, gt, config),
            workers.worker_disruption_budget(body, gt, config),
            gang.pod_group(body, gt),  # before the pods that join it
        )
    else:
        first = ctx.absent("StatefulSet", ctx.names["shards"])
        actions = ctx.ensure(
            manifests.shard_service(body, gt),
            manifests.shard_network_policy(body, gt, config),
            manifests.trainer_network_policy(body, gt, config),  # before the trainer pods
            manifests.shard_disruption_budget(body, gt, config),
            gang.pod_group(body, gt) if first else None,  # before the pods that join it
            manifests.shard_statefulset(body, gt, config, ctx.memory) if first else None,
        )
    shards = shard_statuses(ctx)
    ready, total = ready_shards(ctx), gt.spec.num_shards
    conditions.set_shards_ready(conds, ready, total)
    servers = (
        [_sidecar_only(p) for p in _server_pods(ctx).values()] if colocated(gt.spec) else ctx.pods("shards")
    )
    stuck = _held_for_group(ctx, conds, servers, ConditionType.shards_ready, "shard servers")
    missing = (
        None
        if colocated(gt.spec)
        else unmade(ctx.child("StatefulSet", ctx.names["shards"]), servers, ctx.obs.now)
    )
    stuck += [missing] if missing is not None else []
    if stuck and ready < total:
        kind = ConditionType.shards_ready
        held = _cannot_start(ctx, conds, stuck, kind, f"{min(ready, total)}/{total} shard servers ready")
        return Step(actions + held.actions, {"shards": shards}, held.phase, held.requeue_after, held.confirm)
    return Step(actions, status={"shards": shards})


def trainers_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """The trainer pods of the current attempt: removes an earlier attempt's first, starts them once
    every shard server is ready, restarts every rank after a failure (up to runPolicy.backoffLimit),
    and ends the training when all succeeded or one failed for good; reports progress and stalls."""
    gt, attempt, world = ctx.gt, ctx.attempt, ctx.gt.spec.trainers.replicas
    pods = ctx.pods("trainer")
    trainers = {rank: view for p in pods for rank, view in rank_pods(p)}  # a rank as its container runs
    stale = [p for p in pods if p["metadata"]["labels"].get(LABEL_ATTEMPT) != str(attempt)]
    if stale:  # a restart in progress: the old attempt's pods go first
        conditions.set_trainers_waiting(
            conds, conditions.Reason.restarting, f"recreating the trainers (restart {attempt})"
        )
        actions = [a for p in stale for a in ctx.remove("Pod", p["metadata"]["name"], "v1")]
        said = f"pod {', '.join(sorted(p['metadata']['name'] for p in stale))} of an earlier attempt"
        return Step(actions, phase=Phase.restarting, confirm=said)
    leaving = sorted(p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp"))
    ready = conds.previous.get(str(ConditionType.trainers_ready))
    cm = ctx.child("ConfigMap", ctx.names["progress"])
    ran = attempt_ran(ctx.old, attempt, ready is not None and ready.status == "True", trainers, cm)
    lost = _lost(ran, leaving, [r for r in range(world) if r not in trainers])
    if lost:
        status = progress_status(ctx.child("ConfigMap", ctx.names["progress"]))
        return replace(_trainer_failed(ctx, conds, status, lost, trainers), confirm=lost)
    if leaving:  # stopped by a suspension before this attempt ran: judged by nothing, made again once gone
        conditions.set_trainers_waiting(
            conds, conditions.Reason.not_started, f"waiting for {', '.join(leaving)} to stop"
        )
        return Step(phase=Phase.starting)
    if not trainers:  # a group's trainers are made with its servers: the group waits for every member
        alone = not gang.is_grouped(gt) and not colocated(gt.spec)  # worker pods hold their servers
        if ready_shards(ctx) < gt.spec.num_shards and alone:
            conditions.set_trainers_waiting(
                conds, conditions.Reason.not_started, "waiting for the shard servers"
            )
            return Step(phase=Phase.starting)
        made = _pods_for(ctx, range(world))
        conditions.set_trainers_waiting(
            conds, conditions.Reason.starting, f"creating {len(made)} {_what(gt)} pods"
        )
        first = Phase.starting if colocated(gt.spec) else Phase.training  # worker pods: servers to load
        return Step(
            ctx.ensure(manifests.trainer_service(ctx.body, gt), *made),
            phase=first if attempt == 0 else Phase.restarting,
        )
    made = _pods_for(ctx, [r for r in range(world) if r not in trainers])
    # with their rendezvous Service: deleted meanwhile, a rank made again would never find rank 0
    missing = ctx.ensure(manifests.trainer_service(ctx.body, gt), *made) if made else []
    step = Step(missing, status=progress_status(cm))
    if ran:  # written again where a status without it was restored or written by an older writer
        step.status["trainersRanAttempt"] = attempt
    failed = [p for _, p in sorted(trainers.items()) if pod_phase(p) == "Failed"]
    if failed:  # no missing rank is made: every rank restarts, or the training ends
        servers = _server_statuses(ctx)
        due = culprit_due(failed, list(trainers.values()), ctx.obs.now, servers)
        if due is not None:  # a consequence (peer or shard lost): its cause is named once it is seen
            return Step(step.actions, step.status, _going(ctx), requeue_after=due)
        why = shard_cause(failed, servers) or pod_failure(first_failure(failed))
        return _trainer_failed(ctx, conds, step.status, why, trainers)
    if len(trainers) == world and all(pod_phase(p) == "Succeeded" for p in trainers.values()):
        conditions.set_trainers_waiting(conds, conditions.Reason.completed, "every trainer finished")
        kept = gt.spec.run_policy.clean_pod_policy == CleanPodPolicy.none
        said = "shard servers kept (runPolicy.cleanPodPolicy None)" if kept else "shard servers stopped"
        done = "inference" if gt.spec.mode == Mode.inference else "training"
        conditions.set_succeeded(conds, f"{done} finished; {said}")
        return Step(step.actions + clean_up(ctx), step.status, Phase.succeeded)
    running = sum(pod_phase(p) in ("Running", "Succeeded") for p in trainers.values())
    if running == world:
        conditions.set_trainers_running(conds, f"{running}/{world} trainers running")
        step.status["trainersRanAttempt"] = attempt
        silent = silent_rank(trainers, cm, ctx.obs.now, gt.spec.run_policy)
        conditions.set_stalled(conds, silent)
        if silent is not None and gt.spec.run_policy.stall_policy == StallPolicy.restart:
            why = f"{silent}; runPolicy.stallPolicy is Restart"  # heartbeats as the cache last saw them
            return replace(_trainer_failed(ctx, conds, step.status, why, trainers), confirm=silent)
        # Report: a Stalled condition and its Warning, confirmed when they are new (reconcile._changes)
        return Step(step.actions, step.status, _going(ctx), confirm=silent or "")
    conditions.set_trainers_waiting(conds, conditions.Reason.starting, f"{running}/{world} trainers running")
    stuck = _held_for_group(ctx, conds, pods, ConditionType.trainers_ready, "trainers")
    if stuck:
        kind = ConditionType.trainers_ready
        held = _cannot_start(ctx, conds, stuck, kind, f"{running}/{world} trainers running")
        phase = held.phase or _going(ctx)
        return Step(step.actions + held.actions, step.status, phase, held.requeue_after, held.confirm)
    return Step(step.actions, step.status, _going(ctx))


def attempt_ran(old: Obj, attempt: int, ready: bool, trainers: dict[int, Obj], cm: Obj | None) -> bool:
    """Whether every rank of attempt `attempt` ran at once (see _lost): status.trainersRanAttempt
    (`old`'s) says so once the operator saw it. A status without it (one from before the field, or
    restored or rewritten by a writer that drops it) is judged by what the cluster still holds:
    TrainersReady True (`ready`), or a rank whose heartbeat (rank-<i> in the progress ConfigMap `cm`)
    was written after its pod of this attempt (`trainers`: rank -> its pod) started: a trainer reports
    only once every rank met at the rendezvous. A pod being deleted says nothing: after a suspension
    (which removes the field) the pods stopping ran before it, not in the resumed attempt. Pure."""
    if old.get("trainersRanAttempt") == attempt or ready:
        return True
    data = (cm or {}).get("data")
    for rank, pod in trainers.items():
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        report = reporting.rank_report(data, rank)
        said = parse_time(report.updated_at if report is not None else None)
        began = _started(pod)
        if said is not None and began is not None and said >= began:
            return True
    return False


def _started(pod: Obj) -> dt.datetime | None:
    """When the pod's trainer last started: the latest of its startTime and its containers' start (a
    heartbeat before it is an earlier pod's, or its container's before a restart)."""
    st = pod.get("status") or {}
    times = [parse_time(st.get("startTime"))]
    for cs in st.get("containerStatuses") or []:
        for state in ((cs.get("state") or {}).get("running"), (cs.get("state") or {}).get("terminated")):
            times.append(parse_time((state or {}).get("startedAt")))
    return max((t for t in times if t is not None), default=None)


def _lost(ran: bool, leaving: list[str], missing: list[int]) -> str | None:
    """Why the attempt lost a rank, or None: a pod being deleted or gone (by hand, a node lost) after
    every rank of the attempt `ran` (status.trainersRanAttempt; it stays when TrainersReady goes False,
    as it does while a lost node's pod reads Unknown before it is deleted). The ranks train together,
    so one made again alone waits for peers that went on or finished (a pod deleted as the others
    succeeded waited so forever), and its gang's rules would delete the running peers if it could not
    be made; the attempt fails instead, and every rank restarts from the last checkpoint while
    runPolicy.backoffLimit allows. Before every rank ran, a missing rank is made and a leaving pod (a
    suspension's) is waited for."""
    if not (leaving or missing) or not ran:
        return None
    if leaving:
        return f"pod {', '.join(leaving)} deleted while the trainers ran"
    return f"the pod of rank {', '.join(map(str, missing))} deleted while the trainers ran"


def _going(ctx: Context) -> Phase:
    """The phase of a training whose trainers are made: Training; with worker pods, Starting (or
    Restarting) until every shard server of the attempt was ready once, as a StatefulSet's servers
    load before any trainer pod is made: what a reader sees while the servers load is the same."""
    was = ctx.old.get("phase")
    loading = ready_shards(ctx) < ctx.gt.spec.num_shards
    if colocated(ctx.gt.spec) and was in (Phase.starting, Phase.restarting) and loading:
        return Phase(was)
    return Phase.training


def _what(gt: GraphTraining) -> str:
    return "worker" if colocated(gt.spec) else "trainer"


def _pods_for(ctx: Context, ranks: range | list[int]) -> list[Obj]:
    """The pods that run `ranks` in the current attempt: a trainer pod each, or with partition locality
    the worker pod of each of their partitions."""
    gt = ctx.gt
    if colocated(gt.spec):
        parts = sorted({workers.partition_of(gt, r) for r in ranks})
        return [workers.worker_pod(ctx.body, gt, ctx.config, p, ctx.attempt, ctx.memory) for p in parts]
    return [manifests.trainer_pod(ctx.body, gt, ctx.config, r, ctx.attempt, ctx.memory) for r in ranks]


def _held_for_group(
    ctx: Context, conds: conditions.Conditions, pods: list[Obj], kind: ConditionType, what: str
) -> list[Trouble]:
    """The troubles of `pods`, less those of grouped pods gated or pending for their group (no failure:
    Kueue or the gang scheduler holds every member until all fit; no start timeout runs for them),
    whose wait the stage's condition then says."""
    stuck = troubles(pods)
    if not gang.is_grouped(ctx.gt):
        return stuck
    held = sorted(p["metadata"]["name"] for p in pods if waiting_for_group(p))
    stuck = [t for t in stuck if t.pod not in held]
    if held and not stuck:
        conditions.set_waiting_for_group(
            conds,
            kind,
            f"{len(held)} {what} gated or pending until pod group {gang.group_of(ctx.gt)} is admitted "
            f"whole: {', '.join(held)}",
        )
    return stuck


def _trainer_failed(
    ctx: Context, conds: conditions.Conditions, status: Obj, message: str, trainers: dict[int, Obj]
) -> Step:
    """A trainer failed: every rank restarts from the last checkpoint while runPolicy.backoffLimit
    allows (the next attempt's pods are made once these are gone), else the training fails."""
    attempt, limit = ctx.attempt, ctx.gt.spec.run_policy.backoff_limit
    if attempt < limit:
        conditions.set_trainer_failed(
            conds, f"{message}; restart {attempt + 1}/{limit} from the last checkpoint"
        )
        doomed = sorted({p["metadata"]["name"] for p in trainers.values()})
        removes = [a for name in doomed for a in ctx.remove("Pod", name, "v1")]
        return Step(removes, {**status, "restarts": attempt + 1}, Phase.restarting)
    conditions.set_trainer_failed(conds, message)
    conditions.set_failed(
        conds,
        conditions.Reason.backoff_limit_exceeded if attempt else conditions.Reason.trainer_failed,
        message,
    )
    return Step(clean_up(ctx), status, Phase.failed)
