"""The operator's configuration file: images, per-role pod defaults, GPU pods' scheduling defaults,
storage, NetworkPolicy and PodDisruptionBudget switches, the pods' uid.

The Helm chart renders it from its values into a ConfigMap mounted at
/etc/graphtrain/operator/config.yaml and passes `graphtrain operator --config` to it; without a file
(or $GRAPHTRAIN_OPERATOR_CONFIG) the built-in defaults below apply, which are the chart's defaults too.
A GraphTraining's own fields win over the per-role defaults (placement.py says how), so the file holds
what a cluster's administrator decides for every training: which registry the images come from, how
big a pod is unless its training says otherwise, where pods may run, which storage class the data claim
uses, whether the cluster has egress to download datasets.

The model is camelCase on the wire, strict (`enabled: "yes"` is no boolean) and refuses unknown keys,
like the spec's models, so a typo in the file is an error naming the key, not a silent default. Role
resources must set requests and limits: a pod without them is BestEffort, the first one the kubelet
kills when a node runs short of memory, and a shard server holds a training's embedding tables.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from graphtrain.contract.spec import (
    MAX_TOLERATIONS,
    AccessMode,
    Affinity,
    Quantity,
    Resources,
    Toleration,
    yaml_error_text,
)
from graphtrain.contract.spec.pods import quantity_value
from graphtrain.contract.spec.shown import error_message, name_in_path, with_value

ENV_CONFIG = "GRAPHTRAIN_OPERATOR_CONFIG"
GPU_TAINT = "nvidia.com/gpu"  # the taint key of GPU nodes, as the NVIDIA GPU Operator sets it
IMAGE_REPOSITORY = "ghcr.io/graphtrain/graphtrain"
MAX_CONFIG_BYTES = 1 << 20  # a configuration is a few KB; a ConfigMap holds at most 1 MiB


@functools.cache
def package_version() -> str:
    """The installed graphtrain's version: the images' tag (the chart's appVersion)."""
    return importlib.metadata.version("graphtrain")


class _Config(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )


def _resources(requests: dict[str, str], limits: dict[str, str]) -> Resources:
    return Resources(requests=requests, limits=limits)


class RoleDefaults(_Config):
    """What a role's pods get when their GraphTraining does not say (each field on its own)."""

    resources: Resources = Field(
        default_factory=lambda: _resources({"cpu": "1", "memory": "2Gi"}, {"cpu": "2", "memory": "8Gi"})
    )
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_TOLERATIONS)
    affinity: Affinity = Field(default_factory=Affinity)
    priority_class_name: str = Field(default="", max_length=253)

    @model_validator(mode="after")
    def _not_best_effort(self) -> Self:
        if not self.resources.requests or not self.resources.limits:
            raise ValueError(
                "resources must set requests and limits (a pod without them is BestEffort, the first the "
                "kubelet evicts when a node runs short of memory)"
            )
        # what the API server refuses in every pod of the role: found here, at the operator's start,
        # not at each training's first pod (the spec's own resources get the same check, pods.py)
        for name, request in self.resources.requests.items():
            limit = self.resources.limits.get(name)
            want, cap = quantity_value(request), quantity_value(limit) if limit is not None else None
            if want is not None and cap is not None and want > cap:
                raise ValueError(
                    f"resources.requests.{name}: {request} is above resources.limits.{name} {limit}: "
                    "Kubernetes refuses a pod whose request is above its limit"
                )
        return self


class PartitionDefaults(RoleDefaults):
    resources: Resources = Field(
        default_factory=lambda: _resources({"cpu": "500m", "memory": "1Gi"}, {"cpu": "2", "memory": "4Gi"})
    )


class Defaults(_Config):
    """Per role: the partition Job's pod, each shard server, each trainer."""

    partition: PartitionDefaults = Field(default_factory=PartitionDefaults)
    shard_servers: RoleDefaults = Field(default_factory=RoleDefaults)
    trainers: RoleDefaults = Field(default_factory=RoleDefaults)


def _image(suffix: str = "") -> str:
    return f"{IMAGE_REPOSITORY}:{package_version()}{suffix}"


def _gpu_taint_toleration() -> list[Toleration]:
    return [Toleration(key=GPU_TAINT, operator="Exists", effect="NoSchedule")]


class GpuDefaults(_Config):
    """Where pods that run on a GPU (shardServers.device cuda, trainers.device cuda; never the
    partition Job) may go, merged beneath their role's own fields (placement.py says how): GPU nodes are
    often tainted nvidia.com/gpu (the NVIDIA GPU Operator's are), and a GPU pod that does not tolerate
    it stays Pending, so a training that writes tolerations of its own keeps these."""

    tolerations: list[Toleration] = Field(default_factory=_gpu_taint_toleration, max_length=MAX_TOLERATIONS)
    node_selector: dict[str, str] = Field(default_factory=dict)


class Images(_Config):
    """The runtime images: `runtime` for the partition Job, CPU shard servers and CPU trainers, `cuda`
    for shardServers.device cuda and trainers.device cuda (a GraphTraining's spec.image overrides both)."""

    runtime: str = Field(default_factory=_image, min_length=1)
    cuda: str = Field(default_factory=lambda: _image("-cuda"), min_length=1)
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    pull_secrets: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(default_factory=list)


class ClaimDefaults(_Config):
    """The data claim the operator creates for a training that names none (spec.storage wins)."""

    storage_class_name: str = ""  # "": the cluster's default class
    access_modes: list[Annotated[AccessMode, Field(strict=False)]] = Field(
        default_factory=lambda: [AccessMode.read_write_many], min_length=1
    )
    size: Quantity = "10Gi"
    offline: bool = False  # the pods never download a dataset: it must be pre-seeded on the claim


class NetworkPolicy(_Config):
    enabled: bool = True
    # NetworkPolicyPeer objects (podSelector / namespaceSelector / ipBlock) that may scrape the shard
    # servers' metrics port, besides the training's own pods
    metrics_from: list[dict[str, Any]] = Field(default_factory=list)


class PodDisruptionBudget(_Config):
    enabled: bool = True


class PodSecurity(_Config):
    """Who the trainings' pods run as. The image runs as uid/gid 10001 (its files readable by any uid, its
    home /tmp), so any non-root uid works; OpenShift's restricted SCC refuses a pod stating a uid outside
    its namespace's range and assigns one itself, which `runAsUser: null` leaves it to do."""

    # null: no runAsUser, runAsGroup or fsGroup in the pods (the cluster's admission sets them); the pods
    # still say runAsNonRoot, which the kubelet checks against the image's numeric USER
    run_as_user: int | None = Field(default=10001, ge=1, le=2147483647)


class OperatorConfig(_Config):
    """The whole file; every section is optional."""

    images: Images = Field(default_factory=Images)
    defaults: Defaults = Field(default_factory=Defaults)
    gpu: GpuDefaults = Field(default_factory=GpuDefaults)
    storage: ClaimDefaults = Field(default_factory=ClaimDefaults)
    network_policy: NetworkPolicy = Field(default_factory=NetworkPolicy)
    pod_disruption_budget: PodDisruptionBudget = Field(default_factory=PodDisruptionBudget)
    pod_security: PodSecurity = Field(default_factory=PodSecurity)


@functools.cache
def built_in() -> OperatorConfig:
    """The configuration without a file."""
    return OperatorConfig()


class ConfigError(Exception):
    """The configuration file cannot be used; the message is one line naming the file and the key."""


ENV_TIMER, ENV_WORKERS = "GRAPHTRAIN_OPERATOR_TIMER", "GRAPHTRAIN_OPERATOR_WORKERS"


def env_number(name: str, default: float, least: float, whole: bool = False) -> float:
    """A number from environment variable `name` (`default` when unset or empty), at least `least`.

    Raises:
        ConfigError: one line naming the variable and its value (it was a traceback at import).
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = None
    if value is None or not value >= least or value == float("inf"):
        kind = "a whole number" if whole else "a number of seconds"
        raise ConfigError(f"${name}={raw!r}: must be {kind} of at least {least:g}")
    return value


def loop_settings() -> tuple[float, int]:
    """The operator's timer period (seconds) and reconcile threads, from the environment (README)."""
    return env_number(ENV_TIMER, 15.0, 1.0), int(env_number(ENV_WORKERS, 4, 1, whole=True))


def parse(data: Any, source: str = "the operator configuration") -> OperatorConfig:
    """Validate a configuration document (a dict; None or empty: every default).

    Raises:
        ConfigError: one line naming `source` and each key that is wrong.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return OperatorConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {'; '.join(_problem(e) for e in exc.errors())}") from None


def _problem(error: Any) -> str:
    """One wrong setting as spec problems read (contract/spec/shown.py): its path, why, and the value
    written, shown short and on one line."""
    path = ".".join(name_in_path(str(p)) for p in error["loc"])
    if error["type"] == "rules":  # a spec model's rule (a toleration's): each problem at its own path
        problems = (error.get("ctx") or {}).get("problems") or []
        return "; ".join(f"{'.'.join(filter(None, (path, p['path'])))}: {p['message']}" for p in problems)
    message = error_message(error)
    if error["type"] == "extra_forbidden":
        message = "unknown setting"
    elif error["type"] == "model_type":  # not "a valid dictionary or instance of PodSecurity": as a spec's
        message = with_value("Input should be an object", error["input"], error["loc"])
    return f"{path}: {message}" if path else message


def load(path: str | os.PathLike[str] | None = None) -> OperatorConfig:
    """The configuration in `path`, else in $GRAPHTRAIN_OPERATOR_CONFIG, else the built-in defaults.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or holds a wrong setting (one line).
    """
    chosen = path if path is not None else os.environ.get(ENV_CONFIG) or None
    if chosen is None:
        return built_in()
    where = Path(chosen)
    try:
        text = where.read_text()
    except (OSError, UnicodeDecodeError) as exc:  # the reason alone: an OSError's text repeats the path
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{where}: cannot read the operator configuration: {why}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{where}: {len(text):,} characters; a configuration is at most {MAX_CONFIG_BYTES:,}"
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not YAML: {yaml_error_text(exc)}") from None
    return parse(data, str(where))
