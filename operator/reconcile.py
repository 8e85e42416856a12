"""plan(observed) -> (actions, status, events): every decision of the operator, as a pure function.

The operator observes a GraphTraining and its children (listed by label), calls plan(), then applies
the creates and deletes, writes the status if it changed and posts the events. Nothing here talks to
the API, so every phase transition and failure is a table-driven unit test with literal dicts.

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

from graphtrain.operator import manifests as M
from graphtrain.runtime import spec as S
from graphtrain.runtime.spec import conditions as C
from graphtrain.runtime.spec import reporting
from graphtrain.runtime.spec.conditions import Event

Obj = dict[str, Any]
MUTABLE = {"runPolicy"}  # spec sections a running job takes on


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


def partition_stats(pods: list[Obj]) -> Obj | None:
    """The partition status from the succeeded partition pod's termination message (JSON)."""
    for pod in pods:
        if (
            pod["metadata"].get("labels", {}).get(M.LABEL_ROLE) != "partition"
            or pod_phase(pod) != "Succeeded"
        ):
            continue
        try:
            data = json.loads(terminated(pod).get("message") or "")
            return S.PartitionStatus.model_validate(data).model_dump(
                by_alias=True, exclude_none=True, mode="json"
            )
        except (ValueError, ValidationError):
            return None
    return None


def applied_spec(children: dict[str, Obj], name: str) -> S.GraphTraining | None:
    cm = children.get(key("ConfigMap", M.names(name)["config"]))
    if cm is None:
        return None
    try:
        return S.load_yaml(cm["data"]["spec.yaml"])
    except Exception:  # noqa: BLE001 - a hand-edited config map: treat as absent, recreated below
        return None


# ------------------------------------------------------------------------------------------ plan


def plan(obs: Observed, image: str = M.DEFAULT_IMAGE, token: str = "") -> Plan:
    """Decide what to create or delete and what the status is. `token`: used if the Secret is missing."""
    body = obs.training
    meta = body["metadata"]
    name, generation = meta["name"], meta.get("generation")
    old = body.get("status") or {}
    conds = C.Conditions(C.parse(old.get("conditions") or []), _iso(obs.now), generation)
    status: Obj = {
        "restarts": int(old.get("restarts", 0)),
        "startTime": old.get("startTime") or _iso(obs.now),
    }
    for keep in ("completionTime", "partition", "progress"):
        if old.get(keep) is not None:
            status[keep] = old[keep]
    actions: list[Action] = []

    def finish(phase: S.Phase, observed_generation: int | None = generation) -> Plan:
        status["phase"] = phase.value
        status["conditions"] = [
            c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in conds.as_list()
        ]
        if observed_generation is not None:
            status["observedGeneration"] = observed_generation
        if phase in (S.Phase.succeeded, S.Phase.failed) and "completionTime" not in status:
            status["completionTime"] = _iso(obs.now)
        changed = C.phase_event(old.get("phase"), phase)
        return Plan(actions, status, [*([changed] if changed else []), *conds.events()])

    # --- the spec: valid? and, once running, the applied one ------------------------------------
    try:
        current: S.GraphTraining | None = S.parse(
            {k: v for k, v in body.items() if k in ("apiVersion", "kind", "metadata", "spec")}
        )
        problem = ""
    except S.SpecError as exc:
        current, problem = None, "; ".join(map(str, exc.problems))
    applied = applied_spec(obs.children, name)
    observed_generation = generation
    if applied is None:
        if current is None:
            C.set_spec_invalid(conds, problem)
            return finish(S.Phase.failed)
        gt = current
        C.set_spec_valid(conds)
    else:
        gt = applied
        new = current.spec.model_dump(by_alias=True, mode="json") if current else None
        had = applied.spec.model_dump(by_alias=True, mode="json")
        changed = sorted(k for k in had if new is None or new.get(k) != had[k])
        refused = [k for k in changed if k not in MUTABLE]
        if current is None:
            C.set_update_refused(conds, f"the new spec is invalid: {problem}")
            observed_generation = old.get("observedGeneration")
        elif refused:
            fields = ", ".join(f"spec.{k}" for k in refused)
            C.set_update_refused(
                conds,
                f"{fields} cannot change once the training started; the job goes on with the applied spec "
                "(revert the change or create a new GraphTraining)",
            )
            observed_generation = old.get("observedGeneration")
        else:
            C.set_spec_valid(conds)
        if current is not None:
            gt = gt.model_copy(
                update={"spec": gt.spec.model_copy(update={"run_policy": current.spec.run_policy})}
            )

    ns = meta["namespace"]
    n = M.names(name)
    kids = obs.children

    def ensure(*objs: Obj | None) -> None:
        for o in objs:
            if o is not None and key(o["kind"], o["metadata"]["name"]) not in kids:
                actions.append(Action("create", o))

    def remove(kind: str, obj_name: str, api_version: str) -> None:
        if key(kind, obj_name) in kids:
            actions.append(
                Action(
                    "delete",
                    {
                        "apiVersion": api_version,
                        "kind": kind,
                        "metadata": {"name": obj_name, "namespace": ns},
                    },
                )
            )

    if old.get("phase") in (S.Phase.succeeded.value, S.Phase.failed.value):  # terminal: report, touch nothing
        for c in C.parse(old.get("conditions") or []):
            if c.type != S.ConditionType.spec_valid:
                conds.keep(c)
        return finish(S.Phase(old["phase"]), observed_generation)

    # --- base children and the partition job ----------------------------------------------------
    ensure(
        M.config_map(body, gt),
        M.token_secret(body, gt, token) if token else None,
        M.progress_map(body, gt),
        *M.trainer_rbac(body, gt),
        M.data_claim(body, gt),
        M.partition_job(body, gt, image),
    )
    outcome, why = job_outcome(kids.get(key("Job", n["partition"])))
    if outcome == "failed":
        C.set_partition_failed(conds, f"job {n['partition']}: {why}")
        return finish(S.Phase.failed, observed_generation)
    if outcome != "succeeded":
        C.set_partitioning(conds, f"job {n['partition']} is running")
        return finish(S.Phase.partitioning, observed_generation)
    stats = partition_stats(obs.pods)
    if stats is not None:
        status["partition"] = stats
    C.set_partitioned(conds, "the partition job succeeded")

    # --- shard servers --------------------------------------------------------------------------
    ensure(M.shard_service(body, gt), M.shard_statefulset(body, gt, image))
    replicas = gt.spec.num_shards
    sts = kids.get(key("StatefulSet", n["shards"]))
    ready = int(((sts or {}).get("status") or {}).get("readyReplicas") or 0)
    shard_pods = {
        p["metadata"]["name"]: p
        for p in obs.pods
        if p["metadata"].get("labels", {}).get(M.LABEL_ROLE) == "shards"
    }
    shards = []
    addresses = M.shard_addresses(gt, ns)
    for i in range(replicas):
        pod = shard_pods.get(f"{n['shards']}-{i}")
        restarts = sum(
            int(cs.get("restartCount", 0))
            for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []
        )
        state = S.ShardState.pending
        if pod is not None:
            state = (
                S.ShardState.ready
                if pod_ready(pod)
                else S.ShardState.failed
                if pod_phase(pod) == "Failed"
                else S.ShardState.loading
            )
        shards.append({"index": i, "state": state.value, "address": addresses[i], "restarts": restarts})
    status["shards"] = shards
    all_ready = ready >= replicas
    C.set_shards_ready(conds, ready, replicas)

    # --- trainers -------------------------------------------------------------------------------
    world = gt.spec.trainers.replicas
    attempt = status["restarts"]
    trainers = {
        int(p["metadata"]["labels"].get(M.LABEL_RANK, -1)): p
        for p in obs.pods
        if p["metadata"].get("labels", {}).get(M.LABEL_ROLE) == "trainer"
    }
    stale = {
        r: p for r, p in trainers.items() if p["metadata"]["labels"].get(M.LABEL_ATTEMPT) != str(attempt)
    }
    if stale:  # a restart in progress: the old attempt's pods go first
        for p in stale.values():
            remove("Pod", p["metadata"]["name"], "v1")
        C.set_trainers_waiting(conds, C.Reason.restarting, f"recreating the trainers (restart {attempt})")
        return finish(S.Phase.restarting, observed_generation)
    if not trainers:
        if not all_ready:
            C.set_trainers_waiting(conds, C.Reason.not_started, "waiting for the shard servers")
            return finish(S.Phase.starting, observed_generation)
        ensure(
            M.trainer_service(body, gt), *(M.trainer_pod(body, gt, image, r, attempt) for r in range(world))
        )
        C.set_trainers_waiting(conds, C.Reason.starting, f"creating {world} trainer pods")
        return finish(S.Phase.training if attempt == 0 else S.Phase.restarting, observed_generation)
    ensure(*(M.trainer_pod(body, gt, image, r, attempt) for r in range(world) if r not in trainers))

    _progress(status, kids.get(key("ConfigMap", n["progress"])))
    failed = sorted((r, p) for r, p in trainers.items() if pod_phase(p) == "Failed")
    if failed:
        message = pod_failure(failed[0][1])
        if attempt < gt.spec.run_policy.backoff_limit:
            status["restarts"] = attempt + 1
            for p in trainers.values():
                remove("Pod", p["metadata"]["name"], "v1")
            C.set_trainer_failed(
                conds,
                f"{message}; restart {attempt + 1}/{gt.spec.run_policy.backoff_limit} from the last "
                "checkpoint",
            )
            return finish(S.Phase.restarting, observed_generation)
        C.set_trainer_failed(conds, message)
        C.set_failed(conds, C.Reason.backoff_limit_exceeded if attempt else C.Reason.trainer_failed, message)
        remove("StatefulSet", n["shards"], "apps/v1")
        return finish(S.Phase.failed, observed_generation)
    if len(trainers) == world and all(pod_phase(p) == "Succeeded" for p in trainers.values()):
        C.set_trainers_waiting(conds, C.Reason.completed, "every trainer finished")
        C.set_succeeded(conds, "training finished; shard servers stopped")
        remove("StatefulSet", n["shards"], "apps/v1")
        return finish(S.Phase.succeeded, observed_generation)
    running = sum(pod_phase(p) in ("Running", "Succeeded") for p in trainers.values())
    if running == world:
        C.set_trainers_running(conds, f"{running}/{world} trainers running")
    else:
        C.set_trainers_waiting(conds, C.Reason.starting, f"{running}/{world} trainers running")
    if running == world:
        silent = _silent_rank(
            trainers, kids.get(key("ConfigMap", n["progress"])), obs.now, gt.spec.run_policy
        )
        C.set_stalled(conds, silent)
    return finish(S.Phase.training, observed_generation)


def _progress(status: Obj, cm: Obj | None) -> None:
    """status.progress from rank 0's report in the progress ConfigMap (a missing or unreadable one keeps
    the last)."""
    report = reporting.training_progress((cm or {}).get("data"))
    if report is not None:
        status["progress"] = reporting.to_wire(report)


def _silent_rank(
    trainers: dict[int, Obj], cm: Obj | None, now: dt.datetime, policy: S.RunPolicy
) -> str | None:
    """The rank whose last heartbeat (else its pod's start) is oldest, if older than stallTimeoutSeconds."""
    data = (cm or {}).get("data") or {}
    worst: tuple[float, int] | None = None
    for rank, pod in trainers.items():
        if pod_phase(pod) == "Succeeded":
            continue
        report = reporting.rank_report(data, rank)
        seen = _parse_time(report.updated_at if report else None)
        seen = seen or _parse_time((pod.get("status") or {}).get("startTime"))
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
