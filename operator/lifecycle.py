"""The ends of a training, as pure stages and rules: its deadline (runPolicy.activeDeadlineSeconds),
its clean-up and TTL once finished (runPolicy.cleanPodPolicy, ttlSecondsAfterFinished), its
suspension (spec.suspend), and the status it ends with (settle()).

  terminal   a finished training keeps its pods cleaned and is deleted its TTL after it finished;
             one past its deadline fails
  suspend    spec.suspend: every pod stopped, the rest kept, phase Suspended

settle() is what makes a finished status tell the truth: once a training succeeded, failed (any cause)
or is being deleted, a role whose pods are stopped (gone, going, or deleted by this very plan) no
longer reads as ready or running: its condition says Stopped (conditions.set_stopped) and its shard
servers' states say Stopped, while what runPolicy.cleanPodPolicy None keeps running is reported as it
runs.
"""

from __future__ import annotations

import datetime as dt

from pydantic import ValidationError

from graphtrain.contract import conditions
from graphtrain.contract.children import LABEL_ATTEMPT, names, rank_pods
from graphtrain.contract.spec import (
    API_VERSION,
    KIND,
    CleanPodPolicy,
    ConditionType,
    Phase,
    RunPolicy,
    ShardState,
    colocated,
)
from graphtrain.operator.context import Action, Context, Step, clean_up, stop_all
from graphtrain.operator.observation import (
    FINISHED,
    Obj,
    finished,
    key,
    parse_time,
    pod_phase,
    progress_status,
)
from graphtrain.operator.stages import ready_shards, shard_statuses


def deadline(ctx: Context) -> dt.datetime | None:
    """When runPolicy.activeDeadlineSeconds runs out, counted from the training's start (status.startTime,
    set at its first reconcile and again when it resumes from a suspension), as a Job's is from its
    start; None without a deadline."""
    seconds = ctx.gt.spec.run_policy.active_deadline_seconds
    if not seconds:
        return None
    started = parse_time(ctx.old.get("startTime")) or ctx.obs.now
    return started + dt.timedelta(seconds=seconds)


def expiry(ttl: int | None, completion: str | None) -> dt.datetime | None:
    """When a finished training is deleted: runPolicy.ttlSecondsAfterFinished (`ttl`) after its
    completionTime (None: no TTL, or no completion time)."""
    done = parse_time(completion)
    if ttl is None or done is None:
        return None
    return done + dt.timedelta(seconds=ttl)


def delete_training(body: Obj) -> Action:
    """The delete of the GraphTraining itself at its TTL: of this very one (its uid), never of one
    re-created with its name meanwhile."""
    meta = {"name": body["metadata"]["name"], "namespace": body["metadata"]["namespace"]}
    meta |= {"uid": body["metadata"]["uid"]} if body["metadata"].get("uid") else {}
    return Action("delete", {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta})


def invalid_ttl(body: Obj) -> int | None:
    """runPolicy.ttlSecondsAfterFinished of a spec that failed validation, if its runPolicy alone reads."""
    try:
        raw = (body.get("spec") or {}).get("runPolicy") or {}
        return RunPolicy.model_validate(raw).ttl_seconds_after_finished
    except ValidationError:
        return None


def terminal_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """A finished training is reported as it ended (with rank 0's last progress report, which can come
    after the pods' end, and the state of shard servers runPolicy.cleanPodPolicy None keeps serving);
    what its clean-up policy stops stays stopped (a pod that was still terminating, a delete that
    failed), and once its TTL ran out it is deleted. One past its deadline fails with DeadlineExceeded
    and is cleaned up. Either way settle() (in plan()) says which roles are stopped."""
    phase = finished(ctx.old)
    if phase is not None:
        _keep_conditions(ctx, conds)
        actions = clean_up(ctx)
        ends = expiry(ctx.gt.spec.run_policy.ttl_seconds_after_finished, ctx.old.get("completionTime"))
        if ends is not None and ctx.obs.now >= ends:
            actions.append(delete_training(ctx.body))
        # rank 0's last report (the final test metric) may land after the pods' end decided the phase
        status = progress_status(ctx.child("ConfigMap", ctx.names["progress"]))
        if not servers_gone(ctx, actions):  # kept: reported as they serve
            status["shards"] = shard_statuses(ctx)
            conditions.set_shards_ready(conds, ready_shards(ctx), ctx.gt.spec.num_shards)
        return Step(actions, status=status, phase=Phase(phase))
    ends = deadline(ctx)
    if ends is None or ctx.obs.now < ends:
        return Step()
    _keep_conditions(ctx, conds)
    seconds = ctx.gt.spec.run_policy.active_deadline_seconds
    conditions.set_failed(
        conds,
        conditions.Reason.deadline_exceeded,
        f"the training ran past runPolicy.activeDeadlineSeconds ({seconds} s from its start, "
        f"{ctx.old.get('startTime')}); its pods are stopped as runPolicy.cleanPodPolicy "
        f"{ctx.gt.spec.run_policy.clean_pod_policy} says",
    )
    return Step(actions=clean_up(ctx), phase=Phase.failed)


def _keep_conditions(ctx: Context, conds: conditions.Conditions) -> None:
    """Carry the last status' conditions over (the spec stage's SpecValid stands)."""
    for c in conditions.parse(ctx.old.get("conditions") or []):
        if c.type != ConditionType.spec_valid:
            conds.keep(c)


def servers_gone(ctx: Context, actions: list[Action]) -> bool:
    """The shard servers have stopped or are stopping: their StatefulSet gone, or with partition
    locality no worker pod running (a worker pod's sidecar stops with its trainers)."""
    if not colocated(ctx.gt.spec):
        return ctx.gone("StatefulSet", ctx.names["shards"], actions)
    return not trainer_pods_run(ctx, actions)


def trainer_pods_run(ctx: Context, actions: list[Action]) -> bool:
    """A trainer (or worker) pod runs on: not finished, not being deleted, not deleted by `actions`."""
    deleted = {a.key for a in actions if a.verb == "delete"}
    return any(
        pod_phase(p) not in FINISHED
        and not p["metadata"].get("deletionTimestamp")
        and key("Pod", p["metadata"]["name"]) not in deleted
        for p in ctx.pods("trainer")
    )


def trainers_done(ctx: Context) -> bool:
    """Every rank of the current attempt succeeded."""
    done = {
        rank
        for p in ctx.pods("trainer")
        for rank, view in rank_pods(p)
        if p["metadata"]["labels"].get(LABEL_ATTEMPT) == str(ctx.attempt) and pod_phase(view) == "Succeeded"
    }
    return len(done) == ctx.gt.spec.trainers.replicas


def suspend_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """spec.suspend (a Job's, for Kueue): every pod stops, the rest stays (claim, partition, token,
    checkpoints); phase Suspended and startTime cleared (the deadline does not run). Back to false,
    Suspended False Resumed and the next stages make the pods again, which restore the last checkpoint.
    Created suspended, nothing is made: its spec stays free to change until it first runs. ShardsReady
    and TrainersReady stay, False / Stopped (and Stalled too), as a training that ended says it: a
    reader of the status sees what ran before and that it is stopped, not conditions gone missing."""
    was = any(c.type == ConditionType.suspended for c in conditions.parse(ctx.old.get("conditions") or []))
    if ctx.gt.spec.suspend and trainers_done(ctx):  # finished before the suspension was seen:
        return Step()  # it succeeds (trainers stage), not re-run from the last checkpoint on resumption
    if not ctx.gt.spec.suspend:
        if was:
            conditions.set_resumed(conds, "spec.suspend is false: resumed from the last checkpoint")
        return Step()
    # a partition made stays (one stopped midway is made again on resumption); the running roles'
    # conditions stay, to say that their pods stopped
    running = {ConditionType.shards_ready, ConditionType.trainers_ready, ConditionType.stalled}
    for c in conditions.parse(ctx.old.get("conditions") or []):
        if (c.type == ConditionType.partition_ready and c.status == "True") or c.type in running:
            conds.keep(c)
    every = roles(ctx.body["metadata"]["name"])
    stopping = {k: every[k] for k in (ConditionType.shards_ready, ConditionType.trainers_ready)}
    conditions.set_stopped(conds, stopping, "the training is suspended (spec.suspend)")
    conditions.set_suspended(
        conds,
        "spec.suspend is true: every pod is stopped, the data claim and checkpoints kept; "
        "spec.suspend false resumes from the last checkpoint",
    )
    # None: the merge patch removes them (no startTime, no shard server while suspended; the pods made on
    # resumption have not run)
    status = {"startTime": None, "shards": None, "trainersRanAttempt": None}
    return Step(stop_all(ctx), status=status, phase=Phase.suspended)


# ------------------------------------------------------------------------------------- the end


def roles(name: str) -> dict[ConditionType, str]:
    """The role conditions of training `name`, and what stops when its role stops (set_stopped)."""
    return {
        ConditionType.partition_ready: f"job {names(name)['partition']}",
        ConditionType.shards_ready: "shard servers",
        ConditionType.trainers_ready: "trainers",
    }


def stopped_shards(shards: list[Obj] | None) -> list[Obj] | None:
    """status.shards once the shard servers are stopped: each says Stopped, keeping its restarts."""
    return None if shards is None else [{**s, "state": ShardState.stopped.value} for s in shards]


def settle(
    ctx: Context, conds: conditions.Conditions, actions: list[Action], status: Obj, phase: Phase
) -> Obj:
    """The status fields of a training that ended (`phase` Succeeded or Failed) with this plan's
    `actions`: a role whose pods are stopped (gone, going, or deleted by `actions`) says so through
    conditions.set_stopped, and stopped shard servers' states say Stopped; a role that still runs
    (runPolicy.cleanPodPolicy None keeps it) keeps the condition it was last observed with."""
    n, policy = ctx.names, ctx.gt.spec.run_policy.clean_pod_policy
    trainers_run = trainer_pods_run(ctx, actions)
    stopped = {
        ConditionType.partition_ready: ctx.gone("Job", n["partition"], actions),
        ConditionType.shards_ready: servers_gone(ctx, actions),
        ConditionType.trainers_ready: not trainers_run,
    }
    why = f"the training {phase.value.lower()}"
    why += f" (runPolicy.cleanPodPolicy {policy})" if policy != CleanPodPolicy.none else ""
    every = roles(ctx.body["metadata"]["name"])
    conditions.set_stopped(conds, {k: what for k, what in every.items() if stopped[k]}, why)
    if not stopped[ConditionType.shards_ready]:
        return {}
    shards = stopped_shards(status.get("shards", ctx.old.get("shards")))
    return {"shards": shards} if shards else {}


def deleting(body: Obj, conds: conditions.Conditions) -> Obj:
    """A GraphTraining being deleted (its children go with it): its last status' conditions, carried
    into `conds`, with every role stopped (conditions.set_stopped); returns the status fields that
    change with them (the shard servers' states). Its phase stays: metadata.deletionTimestamp says
    that it is going."""
    old = body.get("status") or {}
    for c in conditions.parse(old.get("conditions") or []):
        conds.keep(c)
    conditions.set_stopped(conds, roles(body["metadata"]["name"]), "the GraphTraining is being deleted")
    shards = stopped_shards(old.get("shards"))
    return {"shards": shards} if shards else {}
