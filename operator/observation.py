"""What the operator observed, and how it reads it: the GraphTraining and its children (Observed), and
pure readings of the objects in it (a Job's outcome, a pod's phase, readiness, failure or trouble
starting, the partition pod's report, the applied spec, the trainers' progress and silence).

Every function here takes literal Kubernetes objects (dicts) and returns plain data: no decision is
taken here, so the stages (stages.py, lifecycle.py) read the same facts the same way.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from graphtrain.contract import failures, reporting
from graphtrain.contract.children import LABEL_ROLE, names
from graphtrain.contract.roles import PEER_LOST
from graphtrain.contract.spec import GraphTraining, MemoryNeed, PartitionStatus, RunPolicy, load_yaml

Obj = dict[str, Any]
FINISHED = ("Succeeded", "Failed")  # a pod's terminal phases


def finished(status: Obj) -> str | None:
    """The phase a training ended with ("Succeeded" or "Failed"), by the condition the operator sets
    with it (Succeeded or Failed True); None while it runs. status.phase alone is not taken: patched by
    hand, Succeeded stopped a running training's pods and reported a success with nothing finished,
    and Training made a finished training's shard servers, and trainers, again."""
    said = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return next((p for p in ("Failed", "Succeeded") if said.get(p) == "True"), None)


@dataclass
class Observed:
    """A GraphTraining, its children and pods as read at `now`: all plan() decides from."""

    training: Obj
    children: dict[str, Obj] = field(default_factory=dict)  # "Kind/name" -> object
    pods: list[Obj] = field(default_factory=list)  # every pod labelled with the training
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    # "Kind/name" -> whose: a child the plan would create whose name holds an object not this training's
    taken: dict[str, str] = field(default_factory=dict)
    watched: bool = False  # `training` is the watch's copy (watched.py), not a GET: see k8s.Stale
    cached: bool = False  # `children` and `pods` as the watches' cache holds them (cache.py), not listed


class Stale(Exception):
    """The watch's copy of a training (Observed.watched) is older than the training: its status write
    said 409 (a resourceVersion precondition). A plan on it would take a transition again (an event
    posted twice, a restart counted twice): the caller reads the training with a GET and plans again."""


class NameTaken(Exception):
    """A create answered 409 and the object of that name is not the training's: {"Kind/name": whose}.
    Children are observed by label and owner, so such an object is invisible to the plan, which took
    the 409 for an earlier reconcile's and mounted the object (a Secret, claim, ConfigMap) into the
    training's pods. apply() stops at it, before the plan's later creates and its status."""

    def __init__(self, taken: dict[str, str]):
        super().__init__(taken)
        self.taken = taken


def key(kind: str, name: str) -> str:
    """A child's key in Observed.children."""
    return f"{kind}/{name}"


def iso(t: dt.datetime) -> str:
    """A status time: RFC 3339, UTC, whole seconds."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> dt.datetime | None:
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
    """Why a pod failed: its reason and exit code, and the last non-empty line of its termination
    message (a log's tail under FallbackToLogsOnError, whose last line is the error), else the pod's."""
    t = terminated(pod)
    st = pod.get("status") or {}
    why = t.get("reason") or st.get("reason") or "Failed"
    lines = [line for line in (t.get("message") or "").splitlines() if line.strip()]
    detail = lines[-1] if lines else st.get("message") or ""
    code = t.get("exitCode")
    return f"{pod['metadata']['name']} failed ({why}{f', exit code {code}' if code is not None else ''})" + (
        f": {detail.strip()[:300]}" if detail else ""
    )


def first_failure(pods: list[Obj]) -> Obj:
    """The failed pod to name, of several (trainers by rank): one whose failure is its own before one
    that lost its peer or a shard server (consequence()), then the one that ended first, then the
    lowest rank. Named by rank alone, an OOM-killed rank 1 hid behind rank 0's peer loss."""

    def key(ranked: tuple[int, Obj]) -> tuple[bool, str, int]:
        rank, pod = ranked
        t = terminated(pod)
        return (consequence(pod), t.get("finishedAt") or "~", rank)

    return min(enumerate(pods), key=key)[1]


PEER_LOSS_GRACE = 30.0  # seconds a peer loss waits for the failure that caused it to be seen


def lost_shard(pod: Obj) -> int | None:
    """The shard a failed trainer pod says went away (contract/failures.py: the kvstore client's wording
    in its log's tail, the termination message), else None."""
    return failures.lost_shard(terminated(pod).get("message") or "")


def consequence(pod: Obj) -> bool:
    """A trainer's failure caused by another's end: its peer's (roles.PEER_LOST) or a shard server's."""
    return PEER_LOST in (terminated(pod).get("message") or "") or lost_shard(pod) is not None


def culprit_due(
    failed: list[Obj], trainers: list[Obj], now: dt.datetime, servers: dict[int, Server] | None = None
) -> float | None:
    """Seconds to wait before judging failed trainers whose every failure is a consequence (a peer loss,
    roles.PEER_LOST, or a lost shard server, contract/failures.py), or None to judge now. A trainer whose
    peer died fails within a second, often before the kubelet reports the dead one's pod: judged at once,
    the survivor was named and the cause never. A peer loss waits while another trainer still runs; a
    lost shard while no end of that shard's server (`servers`: each shard's pod and container status)
    is seen since the trainers started (shard_cause). Bounded (PEER_LOSS_GRACE from the first such
    failure): a hung peer or server that never ends must not hold the training."""
    if not failed or not all(consequence(p) for p in failed):
        return None
    shards = any(lost_shard(p) is not None for p in failed)
    if shards and shard_cause(failed, servers or {}) is not None:
        return None
    if not shards and not any(pod_phase(p) not in FINISHED for p in trainers):
        return None
    ended = [parse_time(terminated(p).get("finishedAt")) for p in failed]
    first = min((t for t in ended if t is not None), default=now)
    left = PEER_LOSS_GRACE - (now - first).total_seconds()
    return left if left > 0 else None


# a shard server's pod name, the pod's metadata ({}: no pod observed) and its container's status
Server = tuple[str, Obj, Obj]


def server_end(status: Obj) -> Obj:
    """A shard server container's last end: its current state's `terminated` (a pod that failed), else
    its lastState's (the kubelet restarted it); {} when it never ended."""
    now = (status.get("state") or {}).get("terminated")
    return now or (status.get("lastState") or {}).get("terminated") or {}


def server_gone(server: Server, since: dt.datetime | None) -> tuple[str, str] | None:
    """(when, how) shard server `server` went away since `since` (the failed trainers' start; None:
    unknown, any end counts): its container ended (restarted in place, or failed), its pod is being
    deleted, was made again (a deleted StatefulSet pod) or is missing; None when none is seen."""
    pod, meta, status = server
    end = server_end(status)
    when = parse_time(end.get("finishedAt"))
    if end and (since is None or when is None or when >= since):
        code = end.get("exitCode")
        why = (end.get("reason") or "Error") + (f", exit code {code}" if code is not None else "")
        at = f" at {end['finishedAt']}" if end.get("finishedAt") else ""
        how = "failed" if (status.get("state") or {}).get("terminated") else "was restarted"
        return end.get(
            "finishedAt"
        ) or "~", f"ended ({why}){at} and {how} (restarts: {status.get('restartCount', 0)})"
    if not meta:
        return "~", "has no pod (deleted)"
    if meta.get("deletionTimestamp"):
        return meta["deletionTimestamp"], f"is being deleted (since {meta['deletionTimestamp']})"
    made = parse_time(meta.get("creationTimestamp"))
    if since is not None and made is not None and made > since:
        return meta["creationTimestamp"], f"was replaced (the pod made again at {meta['creationTimestamp']})"
    return None


def shard_cause(failed: list[Obj], servers: dict[int, Server]) -> str | None:
    """Why the failed trainers failed, naming the shard server that caused it: every failure is a
    consequence, one says shard N went away, and shard N's server went away (server_gone) no earlier
    than the first failed trainer started; the earliest of the shards the trainers name. None when none
    is seen (a hung server, a network cut: the trainer is named). A StatefulSet restarts its pod in
    place, so the trainers' pods were the only ones to fail and the condition named a trainer."""
    if not failed or not all(consequence(p) for p in failed):
        return None
    starts = [parse_time((p.get("status") or {}).get("startTime")) for p in failed]
    since = min((t for t in starts if t is not None), default=None)
    named = sorted({s for p in failed if (s := lost_shard(p)) is not None})
    gone = [(g, s) for s in named if s in servers and (g := server_gone(servers[s], since)) is not None]
    if not gone:
        return None
    (_, how), shard = min(gone)
    trainer = first_failure(failed)
    return (
        f"shard server {shard} (pod {servers[shard][0]}) {how}; the trainers lost it: {pod_failure(trainer)}"
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
    """Why a pod cannot start, and since when (None: unknown, so no timeout can be counted). `what`:
    "pod", or the workload ("job", "statefulset") whose pods were never made."""

    pod: str
    reason: str
    message: str
    since: dt.datetime | None
    what: str = "pod"

    def __str__(self) -> str:
        said = " ".join(self.message.split())[:300]
        return f"{self.what} {self.pod}: {self.reason}" + (f": {said}" if said else "")


UNMADE_GRACE = 60.0  # seconds a Job or StatefulSet has to make its pods before the plan names it


def unmade(workload: Obj | None, pods: list[Obj], now: dt.datetime) -> Trouble | None:
    """A Job or StatefulSet that, UNMADE_GRACE seconds after its creation, has fewer pods than it runs:
    its controller's creates were refused (a ResourceQuota too small, a LimitRange's bounds, Pod
    Security), which only its events say (FailedCreate), so the stage said "running" or "0/2 ready"
    for ever. A Job counts only while it never had a pod (no active, failed or succeeded one): since
    it started (status.startTime, which its controller sets again when a suspension ends: a Job Kueue
    held for an hour has not failed to start), else its creation, the start timeout runs. A StatefulSet
    replaces a pod deleted at any time, so when its pods went missing is unknown: named, with no
    timeout. A suspended Job (Kueue) makes none."""
    if workload is None:
        return None
    meta, spec, st = workload["metadata"], workload.get("spec") or {}, workload.get("status") or {}
    created = parse_time(st.get("startTime")) or parse_time(meta.get("creationTimestamp"))
    if created is None or (now - created).total_seconds() < UNMADE_GRACE or meta.get("deletionTimestamp"):
        return None
    kind, name = workload.get("kind", ""), meta["name"]
    where = f"kubectl describe {kind.lower()} {name}"
    if kind == "Job":
        if pods or spec.get("suspend") or any(st.get(k) for k in ("active", "failed", "succeeded")):
            return None
        said = f"has made no pod (a quota, LimitRange or Pod Security refusal is in `{where}`)"
        return Trouble(name, "NoPod", said, created, "job")
    want, have = int(spec.get("replicas", 1)), len(pods)
    if have >= want:
        return None
    said = f"has made {have} of its {want} pods (a quota, LimitRange or Pod Security refusal is in `{where}`)"
    return Trouble(name, "PodsMissing", said, None, "statefulset")


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
    created = parse_time(meta.get("creationTimestamp"))
    scheduled = _condition(pod, "PodScheduled")
    if (
        scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
    ):  # not SchedulingGated
        since = parse_time(scheduled.get("lastTransitionTime")) or created
        return Trouble(
            meta["name"], scheduled.get("reason") or "Unschedulable", scheduled.get("message", ""), since
        )
    for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in NOT_STARTING:
            ready = _condition(pod, "Ready")
            since = (
                parse_time(ready.get("lastTransitionTime"))
                or parse_time(scheduled.get("lastTransitionTime"))
                or created
            )
            return Trouble(meta["name"], waiting["reason"], waiting.get("message", ""), since)
    return None


def waiting_for_group(pod: Obj) -> bool:
    """A pod not bound yet because its group is not admitted or not schedulable whole: scheduling gates
    (Kueue's admission gate), or PodScheduled False (a gang scheduler holds every member while one
    cannot fit)."""
    if pod["metadata"].get("deletionTimestamp") or pod_phase(pod) in FINISHED:
        return False
    if (pod.get("spec") or {}).get("schedulingGates"):
        return True
    scheduled = _condition(pod, "PodScheduled")
    return scheduled.get("status") == "False" and scheduled.get("reason") in (
        "Unschedulable",
        "SchedulingGated",
    )


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


def memory_need(pods: list[Obj], old: Obj) -> MemoryNeed | None:
    """What each role's pods need (status.partition.memory): the succeeded partition pod's report, else
    the status' (kept after the pod is gone); None when neither says (a partition made by an operator
    before this one measured it)."""
    said = ((partition_stats(pods) or old.get("partition") or {}).get("memory")) or None
    try:
        return MemoryNeed.model_validate(said) if said is not None else None
    except ValidationError:
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
    text = (cm.get("data") or {}).get("spec.yaml")
    return _applied(text) if isinstance(text, str) else None


@functools.lru_cache(maxsize=4096)
def _applied(text: str) -> GraphTraining | None:
    """The applied spec read from its text, once per text (every reconcile reads it: the YAML load
    and validation were a third of a plan's time). The model is shared: never changed, only copied."""
    try:
        return load_yaml(text)
    except Exception:  # noqa: BLE001 - a hand-edited config map: treat as absent, recreated below
        return None


# ------------------------------------------------------------------------------------ trainers


def progress_status(cm: Obj | None) -> Obj:
    """status.progress from rank 0's report in the progress ConfigMap; {} when it has none that reads
    (the last one stays)."""
    report = reporting.training_progress((cm or {}).get("data"))
    return {"progress": reporting.to_wire(report)} if report is not None else {}


def silent_rank(trainers: dict[int, Obj], cm: Obj | None, now: dt.datetime, policy: RunPolicy) -> str | None:
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
            parse_time(report.updated_at if report else None),
            parse_time(st.get("startTime")),
            *map(parse_time, started),
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
