"""What a GraphTraining's pods and data claim get from its spec and the operator's configuration: pure
merge rules, one function each, tested as tables.

- Resources: the spec's, as a whole, when it sets any request or limit; else the role's default. A
  whole, not merged key by key: a training that sets only memory limits should not inherit a default
  CPU limit it did not ask for. A shard server's or trainer's memory the spec does not state is sized
  to the need the partition measured (contract/memory.py: request raised to it, default limit by as
  much). GPU pods (shardServers.device cuda, trainers.device cuda) get a
  `nvidia.com/gpu` limit of their request, else 1, unless they set one.
- nodeSelector, tolerations, affinity, priorityClassName: each on its own, the spec's when set (an
  empty value too: `nodeSelector: {}` clears the default), else the role's default.
- GPU pods also get the configuration's `gpu` defaults merged beneath those: the GPU tolerations the
  pod lacks, the GPU nodeSelector keys it does not set. A training's own fields (`[]` and `{}` too)
  never drop them; the administrator, who knows the cluster's GPU nodes, does (`gpu: {tolerations: []}`).
- Image: spec.image for every pod; else the CUDA image for GPU pods, the runtime image for the rest.
- Data claim: storageClassName, accessModes and size, each the spec's when set, else the
  configuration's; an empty class name means the cluster's default class (the field is left out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from graphtrain.contract import memory
from graphtrain.contract.spec import (
    Affinity,
    Device,
    GraphTrainingSpec,
    Placement,
    Resources,
    Storage,
    Toleration,
)
from graphtrain.contract.spec.pods import GPU_RESOURCE, quantity_value
from graphtrain.operator.config import GpuDefaults, OperatorConfig, RoleDefaults

Role = Literal["partition", "shards", "trainer"]  # the graphtrain.io/role label of the role's pods
GPU = GPU_RESOURCE


@dataclass(frozen=True)
class PodSettings:
    """The role-specific parts of a pod: its container's image and resources, and its pod spec's
    scheduling fields (each left out of the pod when empty)."""

    image: str
    pull_policy: str
    resources: dict[str, dict[str, str]]
    pod_spec: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimSettings:
    storage_class_name: str | None  # None: the cluster's default class
    access_modes: list[str]
    size: str


def role_spec(spec: GraphTrainingSpec, role: Role) -> Placement:
    return {"partition": spec.partition, "shards": spec.shard_servers, "trainer": spec.trainers}[role]


def role_defaults(config: OperatorConfig, role: Role) -> RoleDefaults:
    d = config.defaults
    return {"partition": d.partition, "shards": d.shard_servers, "trainer": d.trainers}[role]


def uses_gpu(spec: GraphTrainingSpec, role: Role) -> bool:
    """Shard servers and trainers with device cuda run on GPUs; the partition Job never does."""
    if role == "shards":
        return spec.shard_servers.device == Device.cuda
    if role == "trainer":
        return spec.trainers.device == Device.cuda
    return False


def resources(own: Resources | None, default: Resources, gpu: bool) -> dict[str, dict[str, str]]:
    """The container's resources: `own` as a whole if it sets anything, else `default`; a GPU pod gets
    a GPU limit (its GPU request, else 1) unless it sets one."""
    chosen = own if own is not None and (own.requests or own.limits) else default
    requests = {k: str(v) for k, v in chosen.requests.items()}
    limits = {k: str(v) for k, v in chosen.limits.items()}
    if gpu:
        limits.setdefault(GPU, requests.get(GPU, "1"))
    out = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def image(spec: GraphTrainingSpec, config: OperatorConfig, gpu: bool) -> str:
    if spec.image:
        return spec.image
    return config.images.cuda if gpu else config.images.runtime


def _dump(value: Any) -> Any:
    """A scheduling field as the pod spec writes it (camelCase, unset keys left out)."""
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, Toleration | Affinity):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    return value


def scheduling(own: Placement, default: RoleDefaults) -> dict[str, Any]:
    """nodeSelector, tolerations, affinity and priorityClassName of the pod spec, each the spec's when
    set, else the default; empty ones are left out."""
    chosen = {
        "nodeSelector": own.node_selector if own.node_selector is not None else default.node_selector,
        "tolerations": own.tolerations if own.tolerations is not None else default.tolerations,
        "affinity": own.affinity if own.affinity is not None else default.affinity,
        "priorityClassName": (
            own.priority_class_name if own.priority_class_name is not None else default.priority_class_name
        ),
    }
    return {k: _dump(v) for k, v in chosen.items() if _dump(v)}


def with_gpu_defaults(pod_scheduling: dict[str, Any], gpu: GpuDefaults) -> dict[str, Any]:
    """A GPU pod's scheduling fields (scheduling()'s) with the GPU defaults merged beneath: its
    tolerations, then each GPU toleration it lacks (equal ones once); the GPU nodeSelector overlaid by
    its own keys (its value wins). Merged, not replaced, so that a training that sets tolerations or a
    nodeSelector for other reasons still reaches the tainted GPU nodes."""
    tolerations = list(pod_scheduling.get("tolerations", []))
    for toleration in _dump(gpu.tolerations):
        if toleration not in tolerations:
            tolerations.append(toleration)
    merged = {
        **pod_scheduling,
        "nodeSelector": {**gpu.node_selector, **pod_scheduling.get("nodeSelector", {})},
        "tolerations": tolerations,
    }
    return {k: v for k, v in merged.items() if v}


def requested_threads(resources: dict[str, dict[str, str]]) -> int | None:
    """A trainer's torch threads where its pod requests CPU without a limit: its request, whole cores,
    at least 1 (its node's cores are shared with other pods; runtime/cpus.py reads a limit itself,
    as the cgroup's quota). None: a limit, or no request (the trainer takes the cores it may use)."""
    if "cpu" in resources.get("limits", {}):
        return None
    request = resources.get("requests", {}).get("cpu")
    value = quantity_value(request) if request is not None else None
    return max(1, int(value)) if value is not None else None


def pod_settings(
    spec: GraphTrainingSpec, config: OperatorConfig, role: Role, need: int | None = None
) -> PodSettings:
    """The role's pod settings; `need`: the bytes one of its pods needs (None: not known), which the
    memory request is raised to unless the spec states the role's memory."""
    own, default, gpu = role_spec(spec, role), role_defaults(config, role), uses_gpu(spec, role)
    sized = resources(own.resources, default.resources, gpu)
    if need is not None and not memory.states_memory(own.resources):
        sized = memory.sized(sized, need)
    pod_spec = scheduling(own, default)
    if gpu:
        pod_spec = with_gpu_defaults(pod_spec, config.gpu)
    if config.images.pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in config.images.pull_secrets]
    return PodSettings(
        image=image(spec, config, gpu),
        pull_policy=config.images.pull_policy,
        resources=sized,
        pod_spec=pod_spec,
    )


def claim_settings(storage: Storage, config: OperatorConfig) -> ClaimSettings:
    default = config.storage
    name = (
        storage.storage_class_name if storage.storage_class_name is not None else default.storage_class_name
    )
    modes = storage.access_modes if storage.access_modes is not None else default.access_modes
    return ClaimSettings(
        storage_class_name=name or None,
        access_modes=[str(m) for m in modes],
        size=str(storage.size if storage.size is not None else default.size),
    )
