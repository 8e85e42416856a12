"""A pod's effective requests and limits as Kubernetes counts them (the ResourceQuota plugin and the
scheduler: k8s.io/component-helpers resource.PodRequests / PodLimits): pure, so the gang's one-pod dry
run (gang_admission.as_one) asks the quota for the sum of what each pod really counts.

Kubernetes' formula, per resource: max(the largest init container's, counted with the sidecars started
before it; the containers' sum plus every sidecar's), where a sidecar is an init container with
restartPolicy Always (it runs beside the containers, so it adds to them). A pod's overhead (set by
RuntimeClass admission, never in the operator's manifests) is left out.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from graphtrain.contract.spec.pods import quantity_value

Obj = dict[str, Any]
Amounts = dict[str, Decimal]


def amounts(container: Obj, field: str) -> Amounts:
    """A container's resources.<field> (requests or limits) as numbers; a value that is no quantity
    counts nothing (the API server refuses the pod for it anyway)."""
    stated = ((container.get("resources") or {}).get(field)) or {}
    return {k: v for k, v in ((k, quantity_value(str(q))) for k, q in stated.items()) if v is not None}


def _add(into: Amounts, more: Amounts) -> Amounts:
    return {**into, **{k: into.get(k, Decimal(0)) + v for k, v in more.items()}}


def _max(a: Amounts, b: Amounts) -> Amounts:
    return {**a, **{k: max(a.get(k, Decimal(0)), v) for k, v in b.items()}}


def is_sidecar(container: Obj) -> bool:
    """An init container that keeps running beside the containers (restartPolicy Always)."""
    return container.get("restartPolicy") == "Always"


def effective(spec: Obj, field: str) -> Amounts:
    """The pod's effective `field` (requests or limits) by Kubernetes' formula (the module's)."""
    total: Amounts = {}
    for c in spec.get("containers") or []:
        total = _add(total, amounts(c, field))
    sidecars: Amounts = {}
    init_max: Amounts = {}
    for c in spec.get("initContainers") or []:
        own = amounts(c, field)
        if is_sidecar(c):
            total, sidecars = _add(total, own), _add(sidecars, own)
            init_max = _max(init_max, sidecars)
        else:
            init_max = _max(init_max, _add(own, sidecars))
    return _max(total, init_max)


def running(spec: Obj) -> list[Obj]:
    """The containers that run together: the containers and the sidecars (the init containers that run
    to completion first are not among them)."""
    sidecars = [c for c in spec.get("initContainers") or [] if is_sidecar(c)]
    return [*(spec.get("containers") or []), *sidecars]


def shortfall(spec: Obj, field: str) -> Amounts:
    """What the running containers' sum of `field` lacks of the pod's effective `field` (an init
    container larger than them): only the resources short, each by how much."""
    summed: Amounts = {}
    for c in running(spec):
        summed = _add(summed, amounts(c, field))
    return {
        k: v - summed.get(k, Decimal(0)) for k, v in effective(spec, field).items() if v > summed.get(k, 0)
    }


def quantity(value: Decimal) -> str:
    """A number as a Kubernetes quantity (plain decimal notation: '1.5', '1073741824')."""
    return format(value.normalize(), "f")
