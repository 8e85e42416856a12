"""Where and with what a role's pods run on Kubernetes (resources, node selector, tolerations,
affinity, priority), and spec.partition, the partitioning settings with the partition Job's placement."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    Field,
    WithJsonSchema,
)

from graphtrain.contract.spec.base import MemoryQuantity, Quantity, SpecModel
from graphtrain.contract.spec.enums import BalanceConstraint, PartitionAlgorithm
from graphtrain.contract.spec.graph import KG_DATASETS, cel_list
from graphtrain.contract.spec.rules import (
    Rule,
    add_rules,
)
from graphtrain.contract.spec.shown import shown

# ------------------------------------------------------------------------------------------ pods

# Kubernetes field bounds (so the CRD's CEL rules on tolerations stay within the API server's cost budget).
MAX_TOLERATIONS = 32
DNS1123_SUBDOMAIN_OR_EMPTY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(
    rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}$"
)


def _label_key(key: str) -> str:
    """A Kubernetes label key: an optional DNS-subdomain prefix (at most 253) and '/', then a name of
    at most 63 characters. Checked here, not by the CRD (a structural schema cannot constrain keys):
    a wrong key makes the operator say SpecValid False instead of the API server refusing the pods."""
    prefix, _, _name = key.rpartition("/")
    if len(prefix) > 253 or not _LABEL_KEY.fullmatch(key):  # match: its `$` passed "zone\n"
        raise ValueError(
            f"{shown(key)} is not a label key (an optional DNS prefix and '/', then 1-63 of A-Z a-z 0-9 "
            "- _ .)"
        )
    return key


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, Field(max_length=63, pattern=rf"^({_LABEL_NAME})?$")]
# An object passed to Kubernetes as it is (its own API validates it when the pod is created).
KubernetesObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
# What a GraphTraining may say about where and how its pods run, per role; the local executor ignores
# all of it (as it ignores resources), and its partition cache does not depend on it.
PLACEMENT_FIELDS: Final = frozenset(
    {"resources", "node_selector", "tolerations", "affinity", "priority_class_name"}
)


class AccessMode(StrEnum):
    """How a volume may be mounted (PersistentVolumeClaim accessModes)."""

    read_write_once = "ReadWriteOnce"  # read-write by the pods of one node
    read_only_many = "ReadOnlyMany"  # read-only by many nodes
    read_write_many = "ReadWriteMany"  # read-write by many nodes
    read_write_once_pod = "ReadWriteOncePod"  # read-write by one pod


class Resources(SpecModel):
    """Kubernetes resource requests and limits of one container (ignored by the local executor)."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Resources the scheduler reserves, by name (cpu, memory, nvidia.com/gpu, ...): "
        "quantities such as 2, 500m, 4Gi; each at most its limit when both are given (Kubernetes refuses "
        "the pod otherwise).",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Most the container may use, by resource name: quantities such as 2, 500m, 4Gi.",
    )


class Toleration(SpecModel):
    """A Kubernetes toleration (core/v1): lets the pods onto nodes whose taint it matches."""

    key: str | None = Field(
        default=None,
        max_length=316,
        description="The taint key matched. Unset with operator Exists: every taint.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None,
        description="Equal: the taint's value must be value; Exists: any value. Unset: Equal.",
    )
    value: str | None = Field(
        default=None, max_length=63, description="The taint value matched (operator Equal only)."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None,
        description="The taint effect matched: NoSchedule, PreferNoSchedule or NoExecute. Unset: all.",
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        description="effect NoExecute only: how long the pod stays bound once the taint appears. "
        "Unset: forever.",
    )


add_rules(
    Toleration,
    Rule(
        "toleration-exists-without-value",
        "value",
        lambda t: t.operator != "Exists" or not t.value,
        cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        message="must be empty with operator Exists",
    ),
    Rule(
        "toleration-key-or-exists",
        "key",
        lambda t: bool(t.key) or t.operator == "Exists",
        cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        message="is required unless operator is Exists (which tolerates every taint)",
    ),
    Rule(
        "toleration-seconds-no-execute",
        "tolerationSeconds",
        lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
        cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        message="applies only to effect NoExecute",
    ),
)


class Affinity(SpecModel):
    """Kubernetes pod affinity rules (core/v1 Affinity), passed to the pods as written."""

    node_affinity: KubernetesObject | None = Field(
        default=None, description="Which nodes the pods may (or prefer to) run on (core/v1 NodeAffinity)."
    )
    pod_affinity: KubernetesObject | None = Field(
        default=None, description="Pods to run beside (core/v1 PodAffinity)."
    )
    pod_anti_affinity: KubernetesObject | None = Field(
        default=None, description="Pods to keep away from (core/v1 PodAntiAffinity)."
    )


class Placement(SpecModel):
    """Where and with what a role's pods run on Kubernetes (ignored by the local executor). Each field
    left unset takes the operator's default for the role (its configuration file)."""

    resources: Resources | None = Field(
        default=None,
        description="Requests and limits of each pod's container, taken as a whole. Unset or empty: "
        "the operator's default for this role. Shard servers and trainers that state no memory get the "
        "memory request the partition measured (status.partition.memory; the default limit raised by "
        "as much); a memory limit stated below it fails the training (InsufficientMemory). A role that "
        "states no memory and whose dynamic vocabularies alone need more than 4Ti per pod is refused: "
        "state its memory to go beyond.",
    )
    node_selector: dict[LabelKey, LabelValue] | None = Field(
        default=None,
        description="Node labels the pods require (e.g. node.kubernetes.io/instance-type). Unset: the "
        "operator's default; {} none. Pods on a GPU also require the operator's GPU node labels whose "
        "keys this does not set.",
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        max_length=MAX_TOLERATIONS,
        description="Taints the pods tolerate. Unset: the operator's default; [] none. Pods on a GPU "
        "also tolerate the operator's GPU tolerations (by default the nvidia.com/gpu taint).",
    )
    affinity: Affinity | None = Field(
        default=None,
        description="Node and pod affinity of the pods, each of the three kinds on its own. Unset: the "
        "operator's default; {} none.",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN_OR_EMPTY,
        description="PriorityClass of the pods. Unset: the operator's default; '' none.",
    )


class PartitionSpec(Placement):
    """How the graph is cut into one partition per shard server, and where the partition Job runs."""

    algorithm: PartitionAlgorithm = Field(
        default=PartitionAlgorithm.metis,
        description="metis: multi-constraint METIS k-way (pymetis), minimises the edge cut; random: seeded "
        "random balanced assignment, the baseline for the edge cut; fennel: streaming partitioning (Fennel, "
        "restreamed, then refined) of a bundled graph dataset's stored edge files read in chunks, memory "
        "O(nodes x parts) (8 bytes a node and part at the peak: at many parts more than metis), for graphs "
        "larger than the partition step's memory: keeps every part's node count within "
        "maxImbalance and reports the other constraints; auto: metis when its memory estimate fits the "
        "limit (memoryLimit, else resources.limits.memory, else the pod's or process's own limit, else the "
        "memory available), else whichever of metis and fennel is estimated to need less. Your own files "
        "(graph.path, graph.nodes, graph.triples) are loaded "
        "whole, so fennel refuses them and auto runs metis.",
    )
    parts: int = Field(default=1, ge=1, le=4096, description="Number of partitions, one per shard server.")
    balance: list[BalanceConstraint] = Field(
        default_factory=lambda: [
            BalanceConstraint.nodes,
            BalanceConstraint.degree,
            BalanceConstraint.train,
            BalanceConstraint.val,
            BalanceConstraint.test,
        ],
        min_length=1,
        max_length=len(BalanceConstraint),
        description="What every partition holds about the same amount of, one METIS vertex weight each: "
        "nodes (node count), degree (edges held), train, val, test (nodes of each split). Constraints "
        "the graph has no data for (e.g. no masks) are skipped.",
    )
    max_imbalance: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="Allowed max/mean - 1 of every balance constraint (0.05: no partition holds more than "
        "5 % above the mean).",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the partitioner, so a partition is reproducible.")
    memory_limit: MemoryQuantity | None = Field(
        default=None,
        description="Refuse to partition when the estimated memory exceeds this quantity of bytes "
        "(e.g. 4Gi); with algorithm auto, the limit METIS must fit, else the smaller estimate runs. "
        "Unset: no limit.",
    )


def _streams(s: Any) -> bool:
    """partition.algorithm fennel is asked of a graph that can stream: a bundled graph dataset (not a
    knowledge graph, split at load time) without reverse edges, which are not stored. The partition
    step refuses the rest (runtime/launch/streaming_step.py); refused here, a spec that can never
    partition is refused at `kubectl apply` and `graphtrain validate`, not by a failed Job."""
    if s.partition.algorithm != PartitionAlgorithm.fennel:
        return True
    return s.graph.dataset is not None and s.graph.dataset not in KG_DATASETS and not s.graph.reverse_edges


# The spec's rules tying spec.partition to spec.graph (a GraphTrainingSpec: document.py adds them).
PARTITION_RULES = (
    Rule(
        "fennel-streams-a-graph-dataset",
        "partition.algorithm",
        _streams,
        cel="!has(self.partition) || !has(self.partition.algorithm) || "
        "self.partition.algorithm != 'fennel' || "
        f"(has(self.graph.dataset) && !(self.graph.dataset in {cel_list(KG_DATASETS)}) && "
        "!(has(self.graph.reverseEdges) && self.graph.reverseEdges))",
        message="fennel streams a bundled graph dataset's stored edge files; your own files (graph.path, "
        "graph.nodes, graph.triples), a knowledge graph and graph.reverseEdges are loaded whole: use metis "
        "or auto",
    ),
)
