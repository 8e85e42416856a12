"""The memory a training's pods are given against what they need (issues 31 and 33): the pure rules the
operator sizes its pods by, and the words in which it and `graphtrain validate` refuse a memory limit
too small. The need is measured by the partition step (status.partition.memory, contract/spec/status.py)
or estimated from the data before any partition exists (runtime/capacity.py); it errs low.

- A role whose spec states its memory (resources.requests.memory or resources.limits.memory) keeps
  what it states: the operator never lowers nor raises a user's own value. A stated limit below the
  need is refused: a pod with it would be OOM-killed for sure.
- A role that states none gets the operator's default resources with the memory request raised to the
  need when below it, and the default memory limit raised by as much (the default's headroom above its
  request kept): the need is measured, the default a guess. No limit is ever derived from the need
  alone: it leaves out a batch's working set, so a limit at the need would kill the pod at its first
  batch. (KubeRay and Kubeflow Trainer likewise use the resources a user writes as written; what is
  derived here only fills in what the user left to the defaults.)
"""

from __future__ import annotations

from graphtrain.contract.spec import MemoryNeed, Problem, quantity_to_bytes
from graphtrain.contract.spec.pods import states_memory

__all__ = ["limit_problems", "memory_bytes", "quantity", "sized", "states_memory"]

MiB = 2**20
Pod = dict[str, dict[str, str]]  # a container's resources: {"requests": {...}, "limits": {...}}


def quantity(n: int) -> str:
    """Bytes as a memory quantity a user can paste into a spec, rounded up to a MiB ('1643Mi'), or to a
    GiB from 64 GiB on ('1024Gi', not '1048576Mi')."""
    if n >= 64 * 1024 * MiB:
        return f"{-(-n // (1024 * MiB))}Gi"
    return f"{-(-n // MiB)}Mi"


def memory_bytes(text: str | None) -> int | None:
    """A memory quantity's bytes; None when unset or not in bytes ('500m' is a quantity, not of memory)."""
    if text is None:
        return None
    try:
        return quantity_to_bytes(str(text))
    except ValueError:
        return None


def sized(resources: Pod, need: int) -> Pod:
    """A pod's resources with the memory request raised to `need` and the memory limit by as much (a
    new dict); unchanged when its request already covers the need."""
    requests, limits = dict(resources.get("requests", {})), dict(resources.get("limits", {}))
    short = need - (memory_bytes(requests.get("memory")) or 0)
    if short <= 0:
        return resources
    requests["memory"] = quantity(need)
    limit = memory_bytes(limits.get("memory"))
    if limit is not None:
        limits["memory"] = quantity(limit + short)
    return {**resources, "requests": requests, **({"limits": limits} if limits else {})}


HOLDS = {
    "shardServers": (
        "a shard server",
        "its process, its partition's graph and node data, its rows of the server tables and their "
        "optimizer state",
        "add shards (partition.parts)",
    ),
    "trainers": (
        "a trainer",
        "its process, and its share of any collective tables with their optimizer state",
        "add trainers (trainers.replicas) when collective tables are the most of it",
    ),
}
"""Per role: who, what the need holds, the other way to make it fit."""


def limit_problems(need: MemoryNeed, limits: dict[str, str | None]) -> list[Problem]:
    """The memory limits (`limits`: by role, shardServers and trainers, the pods' memory limit or None)
    below what each role needs, each a problem naming the field, the limit and the need."""
    found = []
    for role, limit in limits.items():
        have, want = memory_bytes(limit), need.shard_server if role == "shardServers" else need.trainer
        if have is None or have >= want:
            continue
        who, holds, other = HOLDS[role]
        found.append(
            Problem(
                path=f"spec.{role}.resources.limits.memory",
                message=f"{limit} is below the {quantity(want)} {who} needs ({holds}); raise the limit, "
                f"{other}, or state no memory and the operator requests what it needs",
            )
        )
    return found
