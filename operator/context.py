"""The units of a plan: the Actions it takes, the Plan itself, the Context a stage decides in and the
Step it returns; and the deletes several stages share (what a finished training stops, what a
suspension stops). Pure: Actions are data, k8s.apply() carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from graphtrain.contract.children import LABEL_PARTITION, LABEL_ROLE, names, rank_pods
from graphtrain.contract.conditions import Event
from graphtrain.contract.spec import CleanPodPolicy, GraphTraining, MemoryNeed, Phase
from graphtrain.operator.config import OperatorConfig, built_in
from graphtrain.operator.observation import (
    FINISHED,
    Obj,
    Observed,
    job_outcome,
    key,
    memory_need,
    pod_phase,
)

TERMINAL = (Phase.succeeded, Phase.failed)


@dataclass(frozen=True)
class Action:
    """Create or delete one object (a delete's obj holds its apiVersion, kind, name and namespace; a
    uid too when only that very object may go)."""

    verb: Literal["create", "delete"]
    obj: Obj

    @property
    def key(self) -> str:
        return f"{self.obj['kind']}/{self.obj['metadata']['name']}"


@dataclass
class Plan:
    """plan()'s answer: what to create or delete, the whole status, the events of what changed."""

    actions: list[Action]
    status: Obj
    events: list[Event]
    # reconcile again in this many seconds (a deadline, a start timeout, a TTL), events or not
    requeue_after: float | None = None
    # the gang's pods made before (observed) when the actions make the rest: undone with them if the
    # rest cannot be made (gang_admission.made_before)
    gang: list[Obj] = field(default_factory=list)
    # why this plan, made on cached children, must be made again on listed ones before it is applied
    # ("": it need not): it ends or restarts work on a child's absence or age, which a cache behind the
    # cluster can show wrongly (a watch lagging, or relisting)
    confirm: str = ""


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
    def memory(self) -> MemoryNeed | None:
        """What each role's pods need, as the partition measured it (None: not said)."""
        return memory_need(self.obs.pods, self.old)

    @property
    def attempt(self) -> int:
        """The trainers' attempt: the number of restarts so far."""
        return int(self.old.get("restarts", 0))

    def child(self, kind: str, name: str) -> Obj | None:
        return self.obs.children.get(key(kind, name))

    def pods(self, role: str) -> list[Obj]:
        return [p for p in self.obs.pods if p["metadata"].get("labels", {}).get(LABEL_ROLE) == role]

    def absent(self, kind: str, name: str) -> bool:
        """Not observed: a child whose manifest is worth building (ensure() creates only those)."""
        return key(kind, name) not in self.obs.children

    def ensure(self, *objs: Obj | None) -> list[Action]:
        """Creates of the objects not observed (None: not wanted)."""
        return [
            Action("create", o)
            for o in objs
            if o is not None and key(o["kind"], o["metadata"]["name"]) not in self.obs.children
        ]

    def gone(self, kind: str, name: str, actions: list[Action]) -> bool:
        """A child that is absent (and not created by `actions`), being deleted, or deleted by
        `actions`: whatever it ran has stopped or is stopping."""
        child, done = self.child(kind, name), {(a.verb, a.key) for a in actions}
        if child is None:
            return ("create", key(kind, name)) not in done
        return bool(child["metadata"].get("deletionTimestamp")) or ("delete", key(kind, name)) in done

    def remove(self, kind: str, name: str, api_version: str) -> list[Action]:
        """The delete of a child, if it is observed and not being deleted already: of that very object
        (its uid: k8s.apply makes it a precondition), never of one made again under its name that a
        cache behind the cluster has not shown yet (a trainer pod keeps its name across attempts)."""
        child = self.obs.children.get(key(kind, name))
        if child is None or child["metadata"].get("deletionTimestamp"):
            return []
        meta = {"name": name, "namespace": self.namespace}
        meta |= {"uid": child["metadata"]["uid"]} if child["metadata"].get("uid") else {}
        return [Action("delete", {"apiVersion": api_version, "kind": kind, "metadata": meta})]


@dataclass
class Step:
    """A stage's decision: what to create or delete, the status fields it observed, and the phase the
    plan ends with (None: the next stage decides). Conditions go through the shared setters."""

    actions: list[Action] = field(default_factory=list)
    status: Obj = field(default_factory=dict)
    phase: Phase | None = None
    requeue_after: float | None = None  # seconds until something falls due with no event (a timeout)
    confirm: str = ""  # see Plan.confirm


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
    for name in sorted(p["metadata"]["name"] for p in ctx.pods("trainer") if every or not ended(p)):
        actions += ctx.remove("Pod", name, "v1")
    return actions


def ended(pod: Obj) -> bool:
    """A trainer pod that finished, or a worker pod whose trainers all did: the kubelet is stopping its
    shard-server sidecar, and the pod is kept for `kubectl logs` as a finished trainer pod is."""
    if pod_phase(pod) in FINISHED:
        return True
    views = rank_pods(pod)
    return (
        bool(views)
        and LABEL_PARTITION in pod["metadata"].get("labels", {})
        and all(pod_phase(v) in FINISHED for _, v in views)
    )


def stop_all(ctx: Context) -> list[Action]:
    """What a suspension stops: the shard servers, a running partition Job and every trainer pod (the
    trainers of a world restart together), whatever the clean-up policy."""
    actions = ctx.remove("StatefulSet", ctx.names["shards"], "apps/v1") + _partition_if_running(ctx)
    for name in sorted(p["metadata"]["name"] for p in ctx.pods("trainer")):
        actions += ctx.remove("Pod", name, "v1")
    return actions
