"""spec.placement.locality: whether each partition's trainers run beside its shard server on Kubernetes.

DGL's distributed training rests on locality: one machine serves one partition and runs the trainers
that own its seeds, which read that partition's rows through shared memory. `graphtrain run` does the
same on one machine. On Kubernetes, `partition` makes it so: partition i's shard server and its
trainers are one pod (the server a native sidecar, the trainers its containers, /dev/shm an emptyDir
of medium Memory they share), so a trainer maps its own partition's tables and graph and sends only
its gradients' ids over the socket. `none`: a StatefulSet of shard servers and a pod per trainer,
each request over TCP.

Why one pod and not pod affinity: pods on one node share no memory under the restricted Pod Security
Standard (no hostIPC, no hostPath), so affinity would only shorten the network path. The price of one
pod: the pod is the unit of scheduling and restart, so a trainer's failure restarts its shard server
too (it restores its checkpoint, as a restarted StatefulSet pod does), and the pod's resources are the
sum of its roles'.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from graphtrain.contract.spec.base import SpecModel
from graphtrain.contract.spec.rules import Rule


class Locality(StrEnum):
    by_partition = "partition"  # not `partition`: str.partition
    none = "none"


class PodPlacement(SpecModel):
    """How the roles' pods are laid out on Kubernetes. `graphtrain run` ignores it (its trainers read
    every shard of its host through shared memory), but refuses a spec that breaks its rule, as
    `graphtrain validate` and the API server do: one spec, one validation."""

    locality: Locality | None = Field(
        default=None,
        description="partition: partition i's shard server and its trainers share one pod (the server a "
        "sidecar, /dev/shm an emptyDir of medium Memory), so a trainer reads its own partition's rows and "
        "graph through shared memory as `graphtrain run` does; needs trainers.replicas to be a multiple "
        "of the shard servers. none: shard servers in a StatefulSet and one pod per trainer, every "
        "request over TCP. Unset: partition when the trainers divide evenly among the shard servers, "
        "else none.",
    )


def trainers_per_shard(spec: Any) -> int | None:
    """How many trainers each partition gets, or None when the trainers do not divide evenly."""
    shards, world = spec.num_shards, spec.trainers.replicas
    return world // shards if world >= shards and world % shards == 0 else None


def colocated(spec: Any) -> bool:
    """Each partition's trainers share a pod with its shard server (the locality in effect)."""
    said = spec.placement.locality
    if said is None:
        return trainers_per_shard(spec) is not None
    return said == Locality.by_partition


def resolved(spec: Any) -> Any:
    """The spec with its locality stated (the default decided): what the operator applies, so an
    applied spec means the same pods whatever a later default says."""
    if spec.placement.locality is not None:
        return spec
    locality = Locality.by_partition if colocated(spec) else Locality.none
    return spec.model_copy(update={"placement": spec.placement.model_copy(update={"locality": locality})})


_CEL_SHARDS = "(has(self.shardServers.replicas) ? self.shardServers.replicas : self.partition.parts)"

# A document-level rule (contract/spec/document.py lists it).
LOCALITY_EVEN_TRAINERS = Rule(
    "locality-even-trainers",
    "placement.locality",
    lambda s: s.placement.locality != Locality.by_partition or trainers_per_shard(s) is not None,
    cel="!has(self.placement) || !has(self.placement.locality) || self.placement.locality != 'partition' "
    f"|| (self.trainers.replicas >= {_CEL_SHARDS} && self.trainers.replicas % {_CEL_SHARDS} == 0)",
    message="partition needs trainers.replicas (%d) to be a multiple of the shard servers (%d): every "
    "partition runs the same number of trainers beside its server; set locality: none, or change "
    "trainers.replicas",
    args=(
        ("self.trainers.replicas", lambda s: s.trainers.replicas),
        (_CEL_SHARDS, lambda s: s.num_shards),
    ),
)
