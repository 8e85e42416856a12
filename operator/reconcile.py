"""plan(observed) -> (actions, status, events): every decision of the operator, as pure functions.

The operator observes a GraphTraining and its children (listed by label), calls plan(), then applies
the creates and deletes, writes the status if it changed, posts the events, and reconciles again after
`requeue_after` seconds if the plan asks (a deadline fires with no other event). Nothing here talks to
the API, so every phase transition and failure is a table-driven unit test with literal dicts.

plan() runs stages in order, each a pure function of the observation that sets its conditions through
the shared vocabulary (contract/conditions.py) and either decides the phase or hands on to the next:
the spec (stages.py), then the lifecycle's terminal and suspend stages (lifecycle.py), then the
partition stage, the memory stage (sizing.py: limits below what the partition measured are refused
before any shard server or trainer is made), the shards and trainers stages (stages.py). What the
stages read is observation.py's; the units they decide in (Action, Plan, Context, Step) are context.py's.

A plan that ends the training (Succeeded or Failed, for any cause) is settled (lifecycle.settle):
the roles it stopped no longer read as ready or running. A GraphTraining being deleted (deletionTimestamp
set) gets a plan with no action and no event (its children are going, and no late trigger, a child's
event, the timer or a requeue, may make them again) whose status says every role is stopped.

A child name that holds an object the training does not own (its create answered 409: k8s.NameTaken)
holds the training with SpecValid False / NameConflict, making nothing: taken as the training's own, a
foreign Secret, claim or ConfigMap would be mounted into pods running spec.image.

The applied spec lives in the <name>-config ConfigMap. A later spec change that cannot apply to a
running job (anything but runPolicy and suspend) is refused with SpecValid False / UpdateRefused while
the job goes on with the applied spec; nothing is half-applied. A spec the models reject never gets
children.
"""

from __future__ import annotations

from graphtrain.contract import conditions
from graphtrain.contract.spec import Phase
from graphtrain.operator import gang_admission, lifecycle
from graphtrain.operator.config import OperatorConfig, built_in
from graphtrain.operator.context import TERMINAL, Action, Context, Plan, Step, ended
from graphtrain.operator.observation import Obj, Observed, iso
from graphtrain.operator.sizing import memory_stage
from graphtrain.operator.spec_stage import spec_hash, spec_stage
from graphtrain.operator.stages import partition_stage, shards_stage, trainers_stage

STAGES = (
    lifecycle.terminal_stage,
    lifecycle.suspend_stage,
    partition_stage,
    memory_stage,
    shards_stage,
    trainers_stage,
)
"""After the spec stage, in order; each ends the plan with a phase or hands on (the last always ends it)."""


def plan(obs: Observed, config: OperatorConfig | None = None, token: str = "") -> Plan:
    """Decide what to create or delete, what the status is and which events say so: the spec stage,
    then STAGES until one decides the phase. `config`: the operator's (None: the built-in defaults);
    `token`: used if the Secret is missing."""
    body = obs.training
    old = body.get("status") or {}
    previous = conditions.parse(old.get("conditions") or [])
    if body["metadata"].get("deletionTimestamp"):  # being deleted: nothing is made for it, nothing said
        conds = conditions.Conditions(previous, iso(obs.now), old.get("observedGeneration"))
        going = lifecycle.deleting(body, conds)
        return Plan([], {**old, **going, "conditions": dumped(conds)}, [])
    conds = conditions.Conditions(previous, iso(obs.now), body["metadata"].get("generation"))
    status: Obj = {
        "restarts": int(old.get("restarts", 0)),
        "startTime": old.get("startTime") or iso(obs.now),
    }
    kept = ("completionTime", "partition", "progress", "appliedSpecHash", "trainersRanAttempt")
    status.update({k: old[k] for k in kept if old.get(k) is not None})
    decided = spec_stage(obs, conds)
    if decided.hold:  # the applied spec is lost and the current one is not it: wait, touching nothing
        phase = Phase(old.get("phase") or Phase.pending.value)
        return _finish(obs, conds, Step([], status, phase), decided.observed_generation)
    if decided.gt is None:  # failed for its spec; its TTL still runs, if its runPolicy reads
        ends = lifecycle.expiry(lifecycle.invalid_ttl(body), old.get("completionTime") or iso(obs.now))
        gone = [lifecycle.delete_training(body)] if ends is not None and obs.now >= ends else []
        wait = max(0.0, (ends - obs.now).total_seconds()) if ends is not None else None
        step = Step(gone, status, Phase.failed)
        return _finish(obs, conds, step, decided.observed_generation, wait)
    if obs.taken:  # a name the plan would create holds another's object: wait, making nothing
        conditions.set_name_conflict(conds, name_conflict(obs.taken))
        phase = Phase(old.get("phase") or Phase.pending.value)
        return _finish(obs, conds, Step([], status, phase), decided.observed_generation, TAKEN_RECHECK)
    ctx = Context(obs, decided.gt, config or built_in(), token)
    actions: list[Action] = []
    waits: list[float] = []
    unsure: list[str] = []  # what the plan ends or restarts on, as the cache showed it (Plan.confirm)
    for stage in STAGES:
        step = stage(ctx, conds)
        actions += step.actions
        unsure += [step.confirm] if step.confirm else []
        status.update(step.status)
        waits += [step.requeue_after] if step.requeue_after is not None else []
        if step.phase is not None:
            status["appliedSpecHash"] = _applied_hash(ctx, actions, old.get("appliedSpecHash"))
            if step.phase in TERMINAL:  # the TTL counts from completionTime (set now if it just ended)
                unsure += _stops_unfinished(ctx, actions)
                status.update(lifecycle.settle(ctx, conds, actions, status, step.phase))
                ttl = ctx.gt.spec.run_policy.ttl_seconds_after_finished
                ends = lifecycle.expiry(ttl, status.get("completionTime") or iso(obs.now))
            else:  # a suspended training has no startTime: its deadline does not run
                ends = lifecycle.deadline(ctx) if step.phase != Phase.suspended else None
            waits += [max(0.0, (ends - obs.now).total_seconds())] if ends is not None else []
            wait = min(waits, default=None)
            done = _finish(obs, conds, Step(actions, status, step.phase), decided.observed_generation, wait)
            done.gang = gang_admission.made_before(actions, ctx.pods("trainer"))
            if done.gang:  # k8s.apply deletes them if the rest cannot be made: is the rest missing?
                made = ", ".join(sorted(p["metadata"]["name"] for p in done.gang))
                unsure.append(f"the gang made in part ({made})")
            done.confirm = "; ".join(unsure) if obs.cached and _changes(done, old) else ""
            return done
    raise AssertionError("the trainers stage always decides the phase")


def _stops_unfinished(ctx: Context, actions: list[Action]) -> list[str]:
    """The clean-up of an ended training deletes the trainer pods not finished (runPolicy.cleanPodPolicy
    Running) as the cache shows them: one that finished since, its phase not yet in the cache, would
    lose its `kubectl logs`. Such a plan is confirmed by a list (Plan.confirm)."""
    deleted = {a.obj["metadata"]["name"] for a in actions if a.verb == "delete" and a.obj["kind"] == "Pod"}
    stopped = sorted(
        n for p in ctx.pods("trainer") if (n := p["metadata"]["name"]) in deleted and not ended(p)
    )
    return [f"trainer pods {', '.join(stopped)} stopped as not finished"] if stopped else []


def _changes(done: Plan, old: Obj) -> bool:
    """Whether a plan deletes, makes a gang's rest (deleting the pods made before if it cannot be made),
    posts a Warning event, or moves the phase or the restarts: one that does none of these (an earlier
    attempt's pods all stopping already: a pod held Terminating on a lost node stays so for good) is
    written as it is, not confirmed by a list at every reconcile."""
    was = (old.get("phase"), int(old.get("restarts", 0)))
    moved = (done.status.get("phase"), int(done.status.get("restarts", 0))) != was
    warns = any(e.type == conditions.Severity.warning for e in done.events)  # a new one: Stalled (Report)
    return moved or warns or bool(done.gang) or any(a.verb == "delete" for a in done.actions)


def _applied_hash(ctx: Context, actions: list[Action], had: str | None) -> str | None:
    """status.appliedSpecHash: the hash of the spec the training runs with, once it has run (its config
    ConfigMap, the applied spec, is there or this plan makes it); None (removed) while it never ran.
    It says "has run" to the CRD's transition rules (contract/spec/updates.py OPEN: a suspended training
    without it may still change). With the ConfigMap gone but other children there (deleted by hand
    while suspended), the hash it had stays: it is what tells a changed spec then (spec_stage._lost_spec)."""
    config = ctx.names["config"]
    makes = any(a.verb == "create" and a.key == f"ConfigMap/{config}" for a in actions)
    if makes or not ctx.absent("ConfigMap", config):
        return spec_hash(ctx.gt)
    return had if ctx.obs.children else None


TAKEN_RECHECK = 10.0  # seconds: a foreign object's deletion wakes no watch of ours (it has no label)


def name_conflict(taken: dict[str, str]) -> str:
    """SpecValid's message for children whose names hold objects that are not the training's. Such an
    object is never used: a Secret, claim or ConfigMap of that name would be mounted into pods running
    spec.image, a Service would take the trainers' traffic."""
    held = "; ".join(f"{k.replace('/', ' ', 1)} {whose}" for k, whose in sorted(taken.items()))
    return (
        f"{held}: the training makes nothing that would use it until the name is free (delete that object, "
        "or create the GraphTraining under another name)"
    )


def dumped(conds: conditions.Conditions) -> list[Obj]:
    """The conditions as the status holds them (camelCase, no empty fields)."""
    return [c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in conds.as_list()]


def _finish(
    obs: Observed,
    conds: conditions.Conditions,
    step: Step,
    observed_generation: int | None,
    requeue_after: float | None = None,
) -> Plan:
    """The plan of a decided phase: the status with its conditions, and the events of what changed."""
    assert step.phase is not None
    status = {**step.status, "phase": step.phase.value, "conditions": dumped(conds)}
    if observed_generation is not None:
        status["observedGeneration"] = observed_generation
    if step.phase in TERMINAL and "completionTime" not in status:
        status["completionTime"] = iso(obs.now)
    changed = conditions.phase_event((obs.training.get("status") or {}).get("phase"), step.phase)
    return Plan(step.actions, status, [*([changed] if changed else []), *conds.events()], requeue_after)
