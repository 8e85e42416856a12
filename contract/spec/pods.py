"""Spec problems with what the pods would be given, checked in Python only (`check()`: `graphtrain
validate` and the operator, before it creates any child).

- A request above its limit (any resource, any role), or, for a resource Kubernetes cannot overcommit
  (extended resources such as nvidia.com/gpu, hugepages), a request unequal to its limit or without one,
  and an extended resource that is no whole number: Kubernetes refuses such a pod when it is created,
  after the operator has made the other children. Not a CEL rule of the CRD: comparing quantities needs
  CEL's quantity library, which an API server takes in a new CRD's rules only from Kubernetes 1.30 (the
  chart installs on 1.29), and the CRD's structural schema does not check a quantity's text.
- A dynamic vocabulary too large for any pod, on a role that states no memory: the operator would request
  its need and the pods would stay Pending forever. Not a CEL rule either: the need is arithmetic on the
  optimizer and device, best kept beside the other memory estimates in one language.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from graphtrain.contract.spec.base import SpecModel
from graphtrain.contract.spec.enums import Device, Sharding, VocabularyKind
from graphtrain.contract.spec.placement import Placement, Resources
from graphtrain.contract.spec.rules import Problem, decided

GiB: Final = 2**30
TiB: Final = 2**40
POD_MEMORY_CEILING: Final = 4 * TiB
"""The most memory the operator requests for a pod on its own (a role that states no memory). The largest
memory-optimised machines a Kubernetes node pool is commonly made of top out near 4 TiB (AWS x2iedn and
x2idn.32xlarge 4 TiB, GCP m1-ultramem-160 3.75 TiB, Azure M128ms 3.8 TiB); the larger ones (6 to 32
TiB) are bare-metal hosts seldom in a cluster. A need above it is a typo in a capacity far more often than
a plan: refused, it names the table; a user who has such nodes states resources.limits.memory, and the
stated limit is then checked against the need as any other (InsufficientMemory)."""

GPU_RESOURCE: Final = "nvidia.com/gpu"
"""The GPU a GPU pod (shardServers or trainers with device cuda) is given: the operator sets its limit to
the spec's request, else 1, unless the spec sets one (operator/placement.py)."""

KEY_BYTES: Final = 16
"""Host memory per row of a dynamic vocabulary's key map: its key and its tick (runtime/native/keymap.py;
its slots come on top)."""

_SUFFIX: Final = {
    **{s: Decimal(2) ** (10 * i) for i, s in enumerate(("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")) if s},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6))},
    **{s: Decimal(10) ** e for s, e in (("G", 9), ("T", 12), ("P", 15), ("E", 18))},
}
_NUMBER = re.compile(r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")


def quantity_value(text: str) -> Decimal | None:
    """A Kubernetes quantity's value, exactly ('500m' 0.5, '4Gi' 4294967296, '1e3' 1000); None when the
    text is not a quantity (the schema reports it)."""
    match = _NUMBER.match(str(text).strip())
    if not match:
        return None
    number, suffix = match.groups()
    try:
        if suffix and suffix[0] in "eE":
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIX[suffix or ""]
    except InvalidOperation:
        return None


def roles(spec: Any) -> Iterator[tuple[str, Placement]]:
    """The spec's fields that place pods (shardServers, trainers, partition), by their camelCase name."""
    for name, field in type(spec).model_fields.items():
        value = spec.__dict__.get(name)
        if isinstance(value, Placement):
            yield field.alias or name, value


def overcommitable(name: str) -> bool:
    """Whether Kubernetes lets a request of resource `name` sit below its limit: native resources (no
    domain, or a kubernetes.io one) but hugepages. Extended resources (nvidia.com/gpu,
    amd.com/gpu, example.com/foo) and hugepages cannot be overcommitted (the API server's
    helper.IsOvercommitAllowed)."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def requests_above_limits(spec: Any) -> list[Problem]:
    """What the API server refuses in a role's resources (ValidateResourceRequirements), naming the
    field: a request above its limit; for a resource that cannot be overcommitted, a request without a
    limit or unequal to it; an extended resource that is not a whole number. The operator checks these
    before it creates any child: the API server would refuse the pod after the others were made."""
    found = []
    for role, placement in roles(spec):
        resources = placement.resources
        if resources is None:
            continue
        where = f"spec.{role}.resources"
        for kind, quantities in (("limits", resources.limits), ("requests", resources.requests)):
            for name, text in quantities.items():
                value = quantity_value(text)
                if value is not None and "/" in name and not overcommitable(name) and value % 1:
                    found.append(
                        Problem(
                            path=f"{where}.{kind}.{name}",
                            message=f"{text} is not a whole number: an extended resource is counted in "
                            "whole devices",
                        )
                    )
        for name, request in resources.requests.items():
            limit = resources.limits.get(name)
            want, cap = quantity_value(request), quantity_value(limit) if limit is not None else None
            if want is None:
                continue
            filled = name == GPU_RESOURCE and getattr(placement, "device", None) == Device.cuda
            if cap is None and limit is None and not overcommitable(name) and not filled:
                message = (
                    f"{request} has no {where}.limits.{name}: Kubernetes needs the limit of a resource "
                    "it cannot overcommit, equal to the request"
                )
            elif cap is None or want == cap or (want < cap and overcommitable(name)):
                continue
            elif want > cap:
                message = (
                    f"{request} is above {where}.limits.{name} {limit}: Kubernetes refuses a pod whose "
                    "request is above its limit"
                )
            else:
                message = (
                    f"{request} is below {where}.limits.{name} {limit}: Kubernetes cannot overcommit "
                    f"{name}, its request must equal its limit"
                )
            found.append(Problem(path=f"{where}.requests.{name}", message=message))
    return found


def size(n: int) -> str:
    """Bytes as Ti from 1 TiB on, else Gi, one decimal ('3.6Ti', '512.0Gi')."""
    return f"{n / TiB:,.1f}Ti" if n >= TiB else f"{n / GiB:,.1f}Gi"


def dynamic_need(spec: Any, table: Any) -> int:
    """Host memory one holder (a shard server, or a trainer for a collective table) needs for its share
    of a dynamic vocabulary: its rows (in their dtype, unless they live on the role's GPU) and their keys. It
    errs low: the optimizer's state, the key map's slots, the graph and the process come on top."""
    collective = table.sharding == Sharding.collective
    holders = spec.trainers.replicas if collective else spec.num_shards
    role = spec.trainers if collective else spec.shard_servers
    rows = -(-int(table.vocabulary.capacity) // holders)
    element = 4 if str(table.dtype) == "float32" else 2  # float16, bfloat16
    row = KEY_BYTES if role.device == Device.cuda else KEY_BYTES + table.dim * element
    return int(rows * row)


def states_memory(resources: Resources | None) -> bool:
    """Whether a role's spec states its memory (a request or a limit): then it is the user's to keep."""
    return resources is not None and ("memory" in resources.requests or "memory" in resources.limits)


def oversized_vocabularies(spec: Any, ceiling: int = POD_MEMORY_CEILING) -> list[Problem]:
    """Roles stating no memory whose dynamic vocabularies alone need more than `ceiling` bytes per pod,
    one problem per role at the capacity of its largest table."""
    found = []
    for role, name, collective in (("shardServers", "shard server", False), ("trainers", "trainer", True)):
        placement = spec.trainers if collective else spec.shard_servers
        if states_memory(placement.resources):
            continue
        tables = [
            (i, t)
            for i, t in enumerate(spec.embeddings)
            if (t.sharding == Sharding.collective) == collective
            and t.vocabulary.kind == VocabularyKind.dynamic
            and t.vocabulary.capacity
        ]
        needs = {i: dynamic_need(spec, t) for i, t in tables}
        total = sum(needs.values())
        if total <= ceiling:
            continue
        big = max(needs, key=lambda i: needs[i])
        named = ", ".join(t.name for _, t in tables)
        found.append(
            Problem(
                path=f"spec.embeddings[{big}].vocabulary.capacity",
                message=f"dynamic vocabulary of {named} needs at least {size(total)} per {name} (its "
                f"rows and keys alone), above the {size(ceiling)} the operator requests for a pod on its "
                f"own; state spec.{role}.resources.limits.memory or lower the capacity",
            )
        )
    return found


POD_CHECKS: Final[tuple[Callable[[Any], list[Problem]], ...]] = (
    requests_above_limits,
    oversized_vocabularies,
)


def pod_problems(spec: SpecModel | Any) -> list[Problem]:
    """The problems of every pod check on a (partially valid) spec; a check that reads a value which
    failed the schema is skipped, and so is a spec that is no model at all."""
    if not isinstance(spec, SpecModel):
        return []
    return [p for check in POD_CHECKS for p in decided(check, spec)]
