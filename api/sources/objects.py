"""The REST API's answers built from the Kubernetes API's objects: pure functions, plain dicts in
(GraphTrainings, their progress and config ConfigMaps' data, trainer pods and events, as the API
server returns them), the API's models out. No API call here (api/sources/kubernetes.py makes them).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from graphtrain.api import models
from graphtrain.contract import reporting
from graphtrain.contract.children import LABEL_ATTEMPT, rank_pods
from graphtrain.contract.spec import KIND, GraphTrainingSpec, GraphTrainingStatus, Phase

Obj = dict[str, Any]


def status_of(obj: Obj) -> GraphTrainingStatus:
    """A GraphTraining's status; one that does not validate keeps only its phase."""
    raw = obj.get("status") or {}
    try:
        return GraphTrainingStatus.model_validate(raw)
    except ValidationError:
        phase = raw.get("phase")
        return GraphTrainingStatus(phase=phase if phase in set(Phase) else Phase.pending)


def metadata_of(obj: Obj) -> models.Metadata:
    meta = obj.get("metadata") or {}
    return models.Metadata(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=meta.get("labels") or {},
        uid=meta.get("uid"),
        generation=meta.get("generation"),
        creation_timestamp=meta.get("creationTimestamp"),
    )


def spec_of(obj: Obj) -> GraphTrainingSpec | None:
    try:
        return GraphTrainingSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        return None


def running_spec(obj: Obj, config: dict[str, str] | None) -> GraphTrainingSpec | None:
    """The spec the training runs with: its config ConfigMap's (the applied spec, `config` its data)
    with the current runPolicy and suspend, which a running job takes on. The GraphTraining's own spec
    may hold a change the operator refused (SpecValid False / UpdateRefused): 4 trainers while the job
    runs 2. No config map yet (or an unreadable one): the GraphTraining's spec."""
    current = spec_of(obj)
    try:
        doc = yaml.safe_load((config or {}).get("spec.yaml") or "null")
        applied = GraphTrainingSpec.model_validate(doc["spec"]) if isinstance(doc, dict) else None
    except (yaml.YAMLError, KeyError, TypeError, ValidationError):
        applied = None
    if applied is None:
        return current
    if current is None:
        return applied
    return applied.model_copy(update={"run_policy": current.run_policy, "suspend": current.suspend})


def _int(text: Any) -> int:
    try:
        return max(0, int(text))
    except (TypeError, ValueError):
        return 0


def pod_state(pod: Obj) -> models.TrainerState:
    """A trainer pod's state: its phase, Terminating while a running or pending one is being deleted."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    finished = phase in (models.TrainerState.succeeded, models.TrainerState.failed)
    if pod["metadata"].get("deletionTimestamp") and not finished:
        return models.TrainerState.terminating
    return models.TrainerState(phase) if phase in set(models.TrainerState) else models.TrainerState.unknown


def podless_state(phase: Phase | str, deleting: bool) -> models.TrainerState:
    """The state of a rank with no pod: its training's succeeded, it was stopped (the training
    suspended, failed or being deleted), or its pod is still to come."""
    if phase == Phase.succeeded:
        return models.TrainerState.succeeded
    if deleting or phase in (Phase.failed, Phase.suspended):
        return models.TrainerState.stopped
    return models.TrainerState.pending


def trainers_of(
    spec: GraphTrainingSpec | None,
    data: dict[str, str],
    pods: list[Obj],
    phase: Phase | str = Phase.pending,
    deleting: bool = False,
) -> list[models.TrainerStatus]:
    """Each rank: its newest attempt's pod (state, restarts: the operator's attempts plus the kubelet's
    container restarts) and its own report in the progress ConfigMap (the heartbeat); a rank without a
    pod, from its training's `phase` and whether the training is being deleted."""
    newest: dict[int, Obj] = {}
    for rank, pod in (rv for p in pods for rv in rank_pods(p)):  # a worker pod's ranks each as its own
        attempt = _int((pod["metadata"].get("labels") or {}).get(LABEL_ATTEMPT))
        held = newest.get(rank)
        if held is None or attempt >= _int(held["metadata"]["labels"].get(LABEL_ATTEMPT)):
            newest[rank] = pod
    world = spec.trainers.replicas if spec else max([*newest, -1]) + 1
    trainers = []
    for rank in range(world):
        report = reporting.rank_report(data, rank)
        found = newest.get(rank)
        if found is None:
            state, restarts, name = podless_state(phase, deleting), 0, None
        else:
            pod = found
            state = pod_state(pod)
            kubelet = sum(
                _int(c.get("restartCount")) for c in (pod.get("status") or {}).get("containerStatuses") or []
            )
            restarts = _int(pod["metadata"]["labels"].get(LABEL_ATTEMPT)) + kubelet
            name = pod["metadata"]["name"]
        trainers.append(
            models.TrainerStatus(
                rank=rank,
                state=state,
                restarts=restarts,
                pod=name,
                last_heartbeat=report.updated_at if report else None,
                progress=report,
            )
        )
    return trainers


def training_of(
    obj: Obj, data: dict[str, str], pods: list[Obj], config: dict[str, str] | None = None
) -> models.TrainingResource:
    """The training's resource; `config`: its config ConfigMap's data (running_spec)."""
    spec, status = running_spec(obj, config), status_of(obj)
    deleting = bool(obj["metadata"].get("deletionTimestamp"))
    return models.TrainingResource(
        metadata=metadata_of(obj),
        spec=models.spec_summary(spec) if spec else None,
        status=status,
        trainers=trainers_of(spec, data, pods, status.phase, deleting),
    )


def owned_by(obj: Obj, uid: str | None) -> bool:
    """A child of this very training (not of an earlier one of the same name)."""
    return uid is None or any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def event_of(ev: Obj) -> models.TrainingEvent:
    source = ev.get("reportingComponent") or (ev.get("source") or {}).get("component")
    first = (
        ev.get("firstTimestamp") or ev.get("eventTime") or (ev.get("metadata") or {}).get("creationTimestamp")
    )
    return models.TrainingEvent(
        type="Warning" if ev.get("type") == "Warning" else "Normal",
        reason=ev.get("reason") or "",
        message=ev.get("message") or "",
        count=max(1, _int(ev.get("count"))),
        first_timestamp=first,
        last_timestamp=ev.get("lastTimestamp") or first,
        source=source or None,
    )


def involves(ev: Obj, namespace: str, name: str, uid: str | None) -> bool:
    inv = ev.get("involvedObject") or {}
    return (
        inv.get("kind") == KIND
        and inv.get("name") == name
        and inv.get("namespace", namespace) == namespace
        and (uid is None or inv.get("uid") in (None, uid))
    )


def sorted_events(events: list[Obj]) -> list[models.TrainingEvent]:
    return sorted((event_of(e) for e in events), key=lambda e: e.last_timestamp or "")
