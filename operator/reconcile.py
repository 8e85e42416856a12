"""plan(observed) -> (actions, status, events): every decision of the operator, as pure functions.

The operator observes a GraphTraining and its children (listed by label), calls plan(), then applies
the creates and deletes, writes the status if it changed, posts the events, and reconciles again after
`requeue_after` seconds if the plan asks (a deadline fires with no other event). Nothing here talks to
the API, so every phase transition and failure is a table-driven unit test with literal dicts.

plan() runs stages in order, each a pure function of the observation that sets its conditions through
the shared vocabulary (spec.conditions) and either decides the phase or hands on to the next:
  spec       valid? once running, the applied spec with the current runPolicy and suspend; other
             changes refused
  terminal   a finished training keeps its pods cleaned (runPolicy.cleanPodPolicy) and is deleted
             runPolicy.ttlSecondsAfterFinished after it finished; one past activeDeadlineSeconds fails
  suspend    spec.suspend: every pod stopped, the rest kept, phase Suspended
  partition  the base children and the partition job, until it succeeded
  shards     the shard servers' StatefulSet and each server's state
  trainers   the trainer pods of the current attempt: start, restart, fail, succeed; progress, stalls
             (reported, or restarted with runPolicy.stallPolicy Restart)
Pods that cannot start (unschedulable, a container waiting in ImagePullBackOff, CrashLoopBackOff, ...)
are named in their stage's condition (PodsNotStarting), and fail the training after
runPolicy.startTimeoutSeconds (StartTimeout).

A GraphTraining being deleted (deletionTimestamp set) gets an empty plan: its children are going, and
no late trigger (a child's event, the timer, a requeue) may make them again.

The applied spec lives in the <name>-config ConfigMap. A later spec change that cannot apply to a
running job (anything but runPolicy) is refused with SpecValid False / UpdateRefused while the job
goes on with the applied spec; nothing is half-applied. A spec the models reject never gets children.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from graphtrain.contract import conditions, reporting
from graphtrain.contract.children import LABEL_ATTEMPT, LABEL_RANK, LABEL_ROLE, names
from graphtrain.contract.conditions import Event
from graphtrain.contract.spec import (
    API_VERSION,
    KIND,
    CleanPodPolicy,
    ConditionType,
    GraphTraining,
    PartitionStatus,
    Phase,
    RunPolicy,
    ShardState,
    SpecError,
    StallPolicy,
    load_yaml,
    parse,
)
from graphtrain.operator import manifests
from graphtrain.operator.config import OperatorConfig, built_in

Obj = dict[str, Any]
MUTABLE = {"runPolicy", "suspend"}  # spec sections a running job takes on


@dataclass
class Observed:
    training: Obj
    children: dict[str, Obj] = field(default_factory=dict)  # "Kind/name" -> object
    pods: list[Obj] = field(default_factory=list)  # every pod labelled with the training
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


@dataclass(frozen=True)
class Action:
    verb: Literal["create", "delete"]
    obj: Obj

    @property
    def key(self) -> str:
        return f"{self.obj['kind']}/{self.obj['metadata']['name']}"


@dataclass
class Plan:
    actions: list[Action]
    status: Obj
    events: list[Event]
    # reconcile again in this many seconds (a deadline, a start timeout, a TTL), events or not
    requeue_after: float | None = None


def key(kind: str, name: str) -> str:
    return f"{kind}/{name}"


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# ------------------------------------------------------------------------------------- reading


def job_outcome(job: Obj | None) -> tuple[str, str]:
    """("absent" | "running" | "succeeded" | "failed", message)."""
    if job is None:
        return "absent", ""
    st = job.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded", ""
        if c.get("status") == "True" and c.get("type") == "Failed":
            return "failed", f"{c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": ")
    if st.get("succeeded"):
        return "succeeded", ""
    return "running", ""


def pod_phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def pod_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def terminated(pod: Obj) -> Obj:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        t = (cs.get("state") or {}).get("terminated")
        if t:
            return t
    return {}


def pod_failure(pod: Obj) -> str:
    t = terminated(pod)
    st = pod.get("status") or {}
    why = t.get("reason") or st.get("reason") or "Failed"
    detail = t.get("message") or st.get("message") or ""
    code = t.get("exitCode")
    return f"{pod['metadata']['name']} failed ({why}{f', exit code {code}' if code is not None else ''})" + (
        f": {detail.strip()[:300]}" if detail else ""
    )


# A container waiting for one of these will not start by itself: a wrong image or tag, a missing pull
# secret, ConfigMap or Secret, a command that crashes at once. ContainerCreating, PodInitializing (a slow
# pull, a large volume) are on their way and not listed.
NOT_STARTING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


@dataclass(frozen=True)
class Trouble:
    """Why a pod cannot start, and since when (None: unknown, so no timeout can be counted)."""

    pod: str
    reason: str
    message: str
    since: dt.datetime | None

    def __str__(self) -> str:
        said = " ".join(self.message.split())[:300]
        return f"pod {self.pod}: {self.reason}" + (f": {said}" if said else "")


def _condition(pod: Obj, kind: str) -> Obj:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def pod_trouble(pod: Obj) -> Trouble | None:
    """Why `pod` cannot start: unschedulable (PodScheduled False), or a container (init containers
    first) waiting for a reason in NOT_STARTING; None for a pod that runs, finished, is being deleted or
    is on its way. Since: when it was last ready (a crash loop after hours of serving counts from its
    crash), else when it was scheduled or refused scheduling, else its creation."""
    meta, st = pod["metadata"], pod.get("status") or {}
    if meta.get("deletionTimestamp") or pod_phase(pod) in FINISHED:
        return None
    created = _parse_time(meta.get("creationTimestamp"))
    scheduled = _condition(pod, "PodScheduled")
    if (
        scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
    ):  # not SchedulingGated
        since = _parse_time(scheduled.get("lastTransitionTime")) or created
        return Trouble(
            meta["name"], scheduled.get("reason") or "Unschedulable", scheduled.get("message", ""), since
        )
    for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in NOT_STARTING:
            ready = _condition(pod, "Ready")
            since = (
                _parse_time(ready.get("lastTransitionTime"))
                or _parse_time(scheduled.get("lastTransitionTime"))
                or created
            )
            return Trouble(meta["name"], waiting["reason"], waiting.get("message", ""), since)
    return None


def troubles(pods: list[Obj]) -> list[Trouble]:
    """The troubles of the pods that cannot start, by pod name."""
    found = (pod_trouble(p) for p in sorted(pods, key=lambda p: p["metadata"]["name"]))
    return [t for t in found if t is not None]


def partition_stats(pods: list[Obj]) -> Obj | None:
    """The partition status from the succeeded partition pod's termination message (JSON)."""
    for pod in pods:
        if pod["metadata"].get("labels", {}).get(LABEL_ROLE) != "partition" or pod_phase(pod) != "Succeeded":
            continue
        try:
            data = json.loads(terminated(pod).get("message") or "")
            return PartitionStatus.model_validate(data).model_dump(
                by_alias=True, exclude_none=True, mode="json"
            )
        except (ValueError, RecursionError, ValidationError):  # a pod's message nested too deep too
            return None
    return None


def partition_error(pods: list[Obj], limit: int = 800) -> str:
    """Why the partition pod failed, in its own words: the last non-empty line of its termination
    message (the report file if written, else its log's tail, terminationMessagePolicy
    FallbackToLogsOnError; a command's error is its last line), at most `limit` characters (an event
    holds 1024, and the pre-seed command at the end of offline mode's error must survive); "" if none."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"], reverse=True):
        if pod["metadata"].get("labels", {}).get(LABEL_ROLE) != "partition" or pod_phase(pod) != "Failed":
            continue
        lines = [line.strip() for line in (terminated(pod).get("message") or "").splitlines() if line.strip()]
        if lines:
            return lines[-1][:limit]
    return ""


def applied_spec(children: dict[str, Obj], name: str) -> GraphTraining | None:
    cm = children.get(key("ConfigMap", names(name)["config"]))
    if cm is None:
        return None
    try:
        return load_yaml(cm["data"]["spec.yaml"])
    except Exception:  # noqa: BLE001 - a hand-edited config map: treat as absent, recreated below
        return None


# ---------------------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class SpecDecision:
    """The spec stage's outcome: the spec the training runs with (None: invalid and never applied, so
    the training fails without children) and the generation its status reports (a refused update's is
    not observed)."""

    gt: GraphTraining | None
    observed_generation: int | None


@dataclass(frozen=True)
class Context:
    """What the stages after the spec read: the observation, the spec that applies, and what new
    children are made with (the operator's configuration; the token, used if the Secret is missing)."""

    obs: Observed
    gt: GraphTraining
    config: OperatorConfig = field(default_factory=built_in)
    token: str = ""

    @property
    def body(self) -> Obj:
        return self.obs.training

    @property
    def old(self) -> Obj:
        """The status as the operator last wrote it."""
        return self.obs.training.get("status") or {}

    @property
    def namespace(self) -> str:
        return str(self.obs.training["metadata"]["namespace"])

    @property
    def names(self) -> dict[str, str]:
        return names(self.obs.training["metadata"]["name"])

    @property
    def attempt(self) -> int:
        """The trainers' attempt: the number of restarts so far."""
        return int(self.old.get("restarts", 0))

    def child(self, kind: str, name: str) -> Obj | None:
        return self.obs.children.get(key(kind, name))

    def pods(self, role: str) -> list[Obj]:
        return [p for p in self.obs.pods if p["metadata"].get("labels", {}).get(LABEL_ROLE) == role]

    def ensure(self, *objs: Obj | None) -> list[Action]:
        """Creates of the objects not observed (None: not wanted)."""
        return [
            Action("create", o)
            for o in objs
            if o is not None and key(o["kind"], o["metadata"]["name"]) not in self.obs.children
        ]

    def remove(self, kind: str, name: str, api_version: str) -> list[Action]:
        """The delete of a child, if it is observed and not being deleted already."""
        child = self.obs.children.get(key(kind, name))
        if child is None or child["metadata"].get("deletionTimestamp"):
            return []
        meta = {"name": name, "namespace": self.namespace}
        return [Action("delete", {"apiVersion": api_version, "kind": kind, "metadata": meta})]


@dataclass
class Step:
    """A stage's decision: what to create or delete, the status fields it observed, and the phase the
    plan ends with (None: the next stage decides). Conditions go through the shared setters."""

    actions: list[Action] = field(default_factory=list)
    status: Obj = field(default_factory=dict)
    phase: Phase | None = None
    requeue_after: float | None = None  # seconds until something falls due with no event (a timeout)


TERMINAL = (Phase.succeeded, Phase.failed)
FINISHED = ("Succeeded", "Failed")  # a pod's terminal phases


def spec_stage(obs: Observed, conds: conditions.Conditions) -> SpecDecision:
    """Is the spec valid, and which applies. Before the first children, the current spec (invalid:
    SpecValid False and Failed). After, the applied one (the config ConfigMap's), taking only the
    current runPolicy and suspend; any other change is refused (SpecValid False / UpdateRefused) and
    its generation is not reported as observed."""
    body = obs.training
    meta = body["metadata"]
    generation = meta.get("generation")
    try:
        current: GraphTraining | None = parse(
            {k: v for k, v in body.items() if k in ("apiVersion", "kind", "metadata", "spec")}
        )
        problem = ""
    except SpecError as exc:
        current, problem = None, "; ".join(map(str, exc.problems))
    applied = applied_spec(obs.children, meta["name"])
    if applied is None:
        if current is None:
            conditions.set_spec_invalid(conds, problem)
        else:
            conditions.set_spec_valid(conds)
        return SpecDecision(current, generation)
    new = current.spec.model_dump(by_alias=True, mode="json") if current else None
    had = applied.spec.model_dump(by_alias=True, mode="json")
    refused = [k for k in sorted(had) if (new is None or new.get(k) != had[k]) and k not in MUTABLE]
    observed_generation = generation
    if current is None:
        conditions.set_update_refused(conds, f"the new spec is invalid: {problem}")
        observed_generation = (body.get("status") or {}).get("observedGeneration")
    elif refused:
        fields = ", ".join(f"spec.{k}" for k in refused)
        conditions.set_update_refused(
            conds,
            f"{fields} cannot change once the training started; the job goes on with the applied spec "
            "(revert the change or create a new GraphTraining)",
        )
        observed_generation = (body.get("status") or {}).get("observedGeneration")
    else:
        conditions.set_spec_valid(conds)
    if current is not None:
        mutable = {"run_policy": current.spec.run_policy, "suspend": current.spec.suspend}
        applied = applied.model_copy(update={"spec": applied.spec.model_copy(update=mutable)})
    return SpecDecision(applied, observed_generation)


def deadline(ctx: Context) -> dt.datetime | None:
    """When runPolicy.activeDeadlineSeconds runs out, counted from the training's start (status.startTime,
    set at its first reconcile and again when it resumes from a suspension), as a Job's is from its
    start; None without a deadline."""
    seconds = ctx.gt.spec.run_policy.active_deadline_seconds
    if not seconds:
        return None
    started = _parse_time(ctx.old.get("startTime")) or ctx.obs.now
    return started + dt.timedelta(seconds=seconds)


def expiry(ttl: int | None, completion: str | None) -> dt.datetime | None:
    """When a finished training is deleted: runPolicy.ttlSecondsAfterFinished (`ttl`) after its
    completionTime (None: no TTL, or no completion time)."""
    done = _parse_time(completion)
    if ttl is None or done is None:
        return None
    return done + dt.timedelta(seconds=ttl)


def delete_training(body: Obj) -> Action:
    """The delete of the GraphTraining itself at its TTL: of this very one (its uid), never of one
    re-created with its name meanwhile."""
    meta = {"name": body["metadata"]["name"], "namespace": body["metadata"]["namespace"]}
    meta |= {"uid": body["metadata"]["uid"]} if body["metadata"].get("uid") else {}
    return Action("delete", {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta})


def _invalid_ttl(body: Obj) -> int | None:
    """runPolicy.ttlSecondsAfterFinished of a spec that failed validation, if its runPolicy alone reads."""
    try:
        raw = (body.get("spec") or {}).get("runPolicy") or {}
        return RunPolicy.model_validate(raw).ttl_seconds_after_finished
    except ValidationError:
        return None


def terminal_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """A finished training is reported as it ended (with rank 0's last progress report, which can come
    after the pods' end); what its clean-up policy stops stays stopped (a pod
    that was still terminating, a delete that failed), and once its TTL ran out it is deleted. One past
    its deadline fails with DeadlineExceeded and is cleaned up; its other conditions stay as last
    observed."""
    phase = ctx.old.get("phase")
    if phase in TERMINAL:
        _keep_conditions(ctx, conds)
        actions = clean_up(ctx)
        ends = expiry(ctx.gt.spec.run_policy.ttl_seconds_after_finished, ctx.old.get("completionTime"))
        if ends is not None and ctx.obs.now >= ends:
            actions.append(delete_training(ctx.body))
        # rank 0's last report (the final test metric) may land after the pods' end decided the phase
        progress = progress_status(ctx.child("ConfigMap", ctx.names["progress"]))
        return Step(actions, status=progress, phase=Phase(phase))
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


def _partition_if_running(ctx: Context) -> list[Action]:
    job = ctx.names["partition"]
    return ctx.remove("Job", job, "batch/v1") if job_outcome(ctx.child("Job", job))[0] == "running" else []


def clean_up(ctx: Context) -> list[Action]:
    """What a finished training stops, by runPolicy.cleanPodPolicy: Running, the shard servers'
    StatefulSet, a running partition Job and the trainer pods not finished; All, also the partition Job
    and every trainer pod; None, nothing. (The pods of a deleted Job or StatefulSet go with it: the
    garbage collector, background propagation.)"""
    policy = ctx.gt.spec.run_policy.clean_pod_policy
    if policy == CleanPodPolicy.none:
        return []
    every = policy == CleanPodPolicy.all_
    actions = ctx.remove("StatefulSet", ctx.names["shards"], "apps/v1")
    actions += ctx.remove("Job", ctx.names["partition"], "batch/v1") if every else _partition_if_running(ctx)
    for name in sorted(
        p["metadata"]["name"] for p in ctx.pods("trainer") if every or pod_phase(p) not in FINISHED
    ):
        actions += ctx.remove("Pod", name, "v1")
    return actions


def stop_all(ctx: Context) -> list[Action]:
    """What a suspension stops: the shard servers, a running partition Job and every trainer pod (the
    trainers of a world restart together), whatever the clean-up policy."""
    actions = ctx.remove("StatefulSet", ctx.names["shards"], "apps/v1") + _partition_if_running(ctx)
    for name in sorted(p["metadata"]["name"] for p in ctx.pods("trainer")):
        actions += ctx.remove("Pod", name, "v1")
    return actions


def trainers_done(ctx: Context) -> bool:
    """Every rank of the current attempt succeeded."""
    done = [
        p
        for p in ctx.pods("trainer")
        if p["metadata"]["labels"].get(LABEL_ATTEMPT) == str(ctx.attempt) and pod_phase(p) == "Succeeded"
    ]
    return len(done) == ctx.gt.spec.trainers.replicas


def suspend_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """spec.suspend (a Job's, for Kueue): every pod stops, the rest stays (claim, partition, token,
    checkpoints); phase Suspended and startTime cleared (the deadline does not run). Back to false,
    Suspended False Resumed and the next stages make the pods again, which restore the last checkpoint.
    Created suspended, nothing is made: its spec stays free to change until it first runs."""
    was = any(c.type == ConditionType.suspended for c in conditions.parse(ctx.old.get("conditions") or []))
    if ctx.gt.spec.suspend and trainers_done(ctx):  # finished before the suspension was seen:
        return Step()  # it succeeds (trainers stage), not re-run from the last checkpoint on resumption
    if not ctx.gt.spec.suspend:
        if was:
            conditions.set_resumed(conds, "spec.suspend is false: resumed from the last checkpoint")
        return Step()
    for c in conditions.parse(ctx.old.get("conditions") or []):  # a partition made stays; one stopped midway
        if c.type == ConditionType.partition_ready and c.status == "True":  # is made again on resumption
            conds.keep(c)
    conditions.set_suspended(
        conds,
        "spec.suspend is true: every pod is stopped, the data claim and checkpoints kept; "
        "spec.suspend false resumes from the last checkpoint",
    )
    # None: the merge patch removes them (no startTime, no shard server while suspended)
    return Step(stop_all(ctx), status={"startTime": None, "shards": None}, phase=Phase.suspended)


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
        f"pod {first.pod} could not start for {waited:.0f} s (runPolicy.startTimeoutSeconds {timeout}): "
        + message,
    )
    return Step(clean_up(ctx), phase=Phase.failed)


def partition_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """The base children (applied spec, token, progress map, trainer RBAC, data claim) and the partition
    job; the plan stops here until the job succeeded, and fails if it failed."""
    gt, body, n = ctx.gt, ctx.body, ctx.names
    actions = ctx.ensure(
        manifests.config_map(body, gt),
        manifests.token_secret(body, gt, ctx.token) if ctx.token else None,
        manifests.progress_map(body, gt),
        *manifests.trainer_rbac(body, gt),
        manifests.data_claim(body, gt, ctx.config),
        manifests.partition_job(body, gt, ctx.config),
    )
    outcome, why = job_outcome(ctx.child("Job", n["partition"]))
    if outcome == "failed":
        said = partition_error(ctx.obs.pods)
        conditions.set_partition_failed(conds, f"job {n['partition']}: {why}" + (f": {said}" if said else ""))
        return Step(actions + clean_up(ctx), phase=Phase.failed)
    if outcome != "succeeded":
        stuck = troubles(ctx.pods("partition"))
        if stuck:
            kind = ConditionType.partition_ready
            held = _cannot_start(ctx, conds, stuck, kind, f"job {n['partition']}")
            return Step(actions + held.actions, {}, held.phase or Phase.partitioning, held.requeue_after)
        conditions.set_partitioning(conds, f"job {n['partition']} is running")
        return Step(actions, phase=Phase.partitioning)
    conditions.set_partitioned(conds, "the partition job succeeded")
    stats = partition_stats(ctx.obs.pods)
    return Step(actions, status={"partition": stats} if stats is not None else {})


def ready_shards(ctx: Context) -> int:
    """How many shard servers the StatefulSet reports ready."""
    sts = ctx.child("StatefulSet", ctx.names["shards"]) or {}
    return int((sts.get("status") or {}).get("readyReplicas") or 0)


def shards_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """The shard servers' Service, NetworkPolicy and PodDisruptionBudget (made before the pods they
    govern), StatefulSet, and each server's state from its pod."""
    gt, n, body, config = ctx.gt, ctx.names, ctx.body, ctx.config
    actions = ctx.ensure(
        manifests.shard_service(body, gt),
        manifests.shard_network_policy(body, gt, config),
        manifests.shard_disruption_budget(body, gt, config),
        manifests.shard_statefulset(body, gt, config),
    )
    pods = {p["metadata"]["name"]: p for p in ctx.pods("shards")}
    shards = []
    for i, address in enumerate(manifests.shard_addresses(gt, ctx.namespace)):
        pod = pods.get(f"{n['shards']}-{i}")
        restarts = sum(
            int(cs.get("restartCount", 0))
            for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []
        )
        state = ShardState.pending
        if pod is not None:
            state = (
                ShardState.ready
                if pod_ready(pod)
                else ShardState.failed
                if pod_phase(pod) == "Failed"
                else ShardState.loading
            )
        shards.append({"index": i, "state": state.value, "address": address, "restarts": restarts})
    ready, total = ready_shards(ctx), gt.spec.num_shards
    conditions.set_shards_ready(conds, ready, total)
    stuck = troubles(list(pods.values()))
    if stuck and ready < total:
        kind = ConditionType.shards_ready
        held = _cannot_start(ctx, conds, stuck, kind, f"{min(ready, total)}/{total} shard servers ready")
        return Step(actions + held.actions, {"shards": shards}, held.phase, held.requeue_after)
    return Step(actions, status={"shards": shards})


def trainers_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """The trainer pods of the current attempt: removes an earlier attempt's first, starts them once
    every shard server is ready, restarts every rank after a failure (up to runPolicy.backoffLimit),
    and ends the training when all succeeded or one failed for good; reports progress and stalls."""
    gt, attempt, world = ctx.gt, ctx.attempt, ctx.gt.spec.trainers.replicas
    trainers = {int(p["metadata"]["labels"].get(LABEL_RANK, -1)): p for p in ctx.pods("trainer")}
    stale = [p for p in trainers.values() if p["metadata"]["labels"].get(LABEL_ATTEMPT) != str(attempt)]
    if stale:  # a restart in progress: the old attempt's pods go first
        conditions.set_trainers_waiting(
            conds, conditions.Reason.restarting, f"recreating the trainers (restart {attempt})"
        )
        actions = [a for p in stale for a in ctx.remove("Pod", p["metadata"]["name"], "v1")]
        return Step(actions, phase=Phase.restarting)
    leaving = sorted(
        p["metadata"]["name"] for p in trainers.values() if p["metadata"].get("deletionTimestamp")
    )
    if leaving:  # stopped by a suspension (or by hand): judged by nothing, made again once gone
        conditions.set_trainers_waiting(
            conds, conditions.Reason.not_started, f"waiting for {', '.join(leaving)} to stop"
        )
        return Step(phase=Phase.starting)
    if not trainers:
        if ready_shards(ctx) < gt.spec.num_shards:
            conditions.set_trainers_waiting(
                conds, conditions.Reason.not_started, "waiting for the shard servers"
            )
            return Step(phase=Phase.starting)
        pods = (manifests.trainer_pod(ctx.body, gt, ctx.config, r, attempt) for r in range(world))
        conditions.set_trainers_waiting(conds, conditions.Reason.starting, f"creating {world} trainer pods")
        return Step(
            ctx.ensure(manifests.trainer_service(ctx.body, gt), *pods),
            phase=Phase.training if attempt == 0 else Phase.restarting,
        )
    missing = ctx.ensure(
        *(
            manifests.trainer_pod(ctx.body, gt, ctx.config, r, attempt)
            for r in range(world)
            if r not in trainers
        )
    )
    cm = ctx.child("ConfigMap", ctx.names["progress"])
    step = Step(missing, status=progress_status(cm))
    failed = sorted((r, p) for r, p in trainers.items() if pod_phase(p) == "Failed")
    if failed:
        return _trainer_failed(ctx, conds, step, pod_failure(failed[0][1]), trainers)
    if len(trainers) == world and all(pod_phase(p) == "Succeeded" for p in trainers.values()):
        conditions.set_trainers_waiting(conds, conditions.Reason.completed, "every trainer finished")
        kept = gt.spec.run_policy.clean_pod_policy == CleanPodPolicy.none
        said = "shard servers kept (runPolicy.cleanPodPolicy None)" if kept else "shard servers stopped"
        conditions.set_succeeded(conds, f"training finished; {said}")
        return Step(step.actions + clean_up(ctx), step.status, Phase.succeeded)
    running = sum(pod_phase(p) in ("Running", "Succeeded") for p in trainers.values())
    if running == world:
        conditions.set_trainers_running(conds, f"{running}/{world} trainers running")
        silent = _silent_rank(trainers, cm, ctx.obs.now, gt.spec.run_policy)
        conditions.set_stalled(conds, silent)
        if silent is not None and gt.spec.run_policy.stall_policy == StallPolicy.restart:
            return _trainer_failed(ctx, conds, step, f"{silent}; runPolicy.stallPolicy is Restart", trainers)
        return Step(step.actions, step.status, Phase.training)
    conditions.set_trainers_waiting(conds, conditions.Reason.starting, f"{running}/{world} trainers running")
    stuck = troubles(list(trainers.values()))
    if stuck:
        kind = ConditionType.trainers_ready
        held = _cannot_start(ctx, conds, stuck, kind, f"{running}/{world} trainers running")
        return Step(
            step.actions + held.actions, step.status, held.phase or Phase.training, held.requeue_after
        )
    return Step(step.actions, step.status, Phase.training)


def _trainer_failed(
    ctx: Context, conds: conditions.Conditions, step: Step, message: str, trainers: dict[int, Obj]
) -> Step:
    """A trainer failed: every rank restarts from the last checkpoint while runPolicy.backoffLimit
    allows (the next attempt's pods are made once these are gone), else the training fails."""
    attempt, limit = ctx.attempt, ctx.gt.spec.run_policy.backoff_limit
    if attempt < limit:
        conditions.set_trainer_failed(
            conds, f"{message}; restart {attempt + 1}/{limit} from the last checkpoint"
        )
        removes = [a for p in trainers.values() for a in ctx.remove("Pod", p["metadata"]["name"], "v1")]
        return Step(step.actions + removes, {**step.status, "restarts": attempt + 1}, Phase.restarting)
    conditions.set_trainer_failed(conds, message)
    conditions.set_failed(
        conds,
        conditions.Reason.backoff_limit_exceeded if attempt else conditions.Reason.trainer_failed,
        message,
    )
    return Step(step.actions + clean_up(ctx), step.status, Phase.failed)


# ------------------------------------------------------------------------------------------ plan

STAGES = (terminal_stage, suspend_stage, partition_stage, shards_stage, trainers_stage)
"""After the spec stage, in order; each ends the plan with a phase or hands on (the last always ends it)."""


def plan(obs: Observed, config: OperatorConfig | None = None, token: str = "") -> Plan:
    """Decide what to create or delete, what the status is and which events say so: the spec stage,
    then STAGES until one decides the phase. `config`: the operator's (None: the built-in defaults);
    `token`: used if the Secret is missing."""
    body = obs.training
    old = body.get("status") or {}
    if body["metadata"].get("deletionTimestamp"):  # being deleted: nothing is made for it, nothing said
        return Plan([], old, [])
    conds = conditions.Conditions(
        conditions.parse(old.get("conditions") or []), _iso(obs.now), body["metadata"].get("generation")
    )
    status: Obj = {
        "restarts": int(old.get("restarts", 0)),
        "startTime": old.get("startTime") or _iso(obs.now),
    }
    status.update({k: old[k] for k in ("completionTime", "partition", "progress") if old.get(k) is not None})
    decided = spec_stage(obs, conds)
    if decided.gt is None:  # failed for its spec; its TTL still runs, if its runPolicy reads
        ends = expiry(_invalid_ttl(body), old.get("completionTime") or _iso(obs.now))
        gone = [delete_training(body)] if ends is not None and obs.now >= ends else []
        wait = max(0.0, (ends - obs.now).total_seconds()) if ends is not None else None
        step = Step(gone, status, Phase.failed)
        return _finish(obs, conds, step, decided.observed_generation, wait)
    ctx = Context(obs, decided.gt, config or built_in(), token)
    actions: list[Action] = []
    waits: list[float] = []
    for stage in STAGES:
        step = stage(ctx, conds)
        actions += step.actions
        status.update(step.status)
        waits += [step.requeue_after] if step.requeue_after is not None else []
        if step.phase is not None:
            if step.phase in TERMINAL:  # the TTL counts from completionTime (set now if it just ended)
                ttl = ctx.gt.spec.run_policy.ttl_seconds_after_finished
                ends = expiry(ttl, status.get("completionTime") or _iso(obs.now))
            else:  # a suspended training has no startTime: its deadline does not run
                ends = deadline(ctx) if step.phase != Phase.suspended else None
            waits += [max(0.0, (ends - obs.now).total_seconds())] if ends is not None else []
            wait = min(waits, default=None)
            return _finish(obs, conds, Step(actions, status, step.phase), decided.observed_generation, wait)
    raise AssertionError("the trainers stage always decides the phase")


def _finish(
    obs: Observed,
    conds: conditions.Conditions,
    step: Step,
    observed_generation: int | None,
    requeue_after: float | None = None,
) -> Plan:
    """The plan of a decided phase: the status with its conditions, and the events of what changed."""
    assert step.phase is not None
    status = {**step.status, "phase": step.phase.value}
    status["conditions"] = [
        c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in conds.as_list()
    ]
    if observed_generation is not None:
        status["observedGeneration"] = observed_generation
    if step.phase in TERMINAL and "completionTime" not in status:
        status["completionTime"] = _iso(obs.now)
    changed = conditions.phase_event((obs.training.get("status") or {}).get("phase"), step.phase)
    return Plan(step.actions, status, [*([changed] if changed else []), *conds.events()], requeue_after)


def progress_status(cm: Obj | None) -> Obj:
    """status.progress from rank 0's report in the progress ConfigMap; {} when it has none that reads
    (the last one stays)."""
    report = reporting.training_progress((cm or {}).get("data"))
    return {"progress": reporting.to_wire(report)} if report is not None else {}


def _silent_rank(trainers: dict[int, Obj], cm: Obj | None, now: dt.datetime, policy: RunPolicy) -> str | None:
    """The rank whose last heartbeat (or its container's start, if later) is oldest, if older than
    stallTimeoutSeconds."""
    data = (cm or {}).get("data") or {}
    worst: tuple[float, int] | None = None
    for rank, pod in trainers.items():
        if pod_phase(pod) == "Succeeded":
            continue
        report = reporting.rank_report(data, rank)
        # the latest of its last report, its pod's start and its container's: a report of an earlier
        # attempt (before a restart or a suspension) says nothing of this pod, and the pod's startTime
        # is before its image pull (minutes for a cold CUDA image), when the rank could not report yet
        st = pod.get("status") or {}
        started = [
            ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            for cs in st.get("containerStatuses") or []
        ]
        times = (
            _parse_time(report.updated_at if report else None),
            _parse_time(st.get("startTime")),
            *map(_parse_time, started),
        )
        seen = max((t for t in times if t is not None), default=None)
        if seen is None:
            continue
        age = (now - seen).total_seconds()
        if worst is None or age > worst[0]:
            worst = (age, rank)
    if worst is not None and worst[0] > policy.stall_timeout_seconds:
        return (
            f"rank {worst[1]} has not reported for {worst[0]:.0f} s "
            f"(runPolicy.stallTimeoutSeconds {policy.stall_timeout_seconds})"
        )
    return None
