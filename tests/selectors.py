"""A Kubernetes label selector's verdict, as the API server gives it: what the tests check the chart's
and the docs' selectors (PodMonitors, NetworkPolicies) against the labels the operator sets."""

from __future__ import annotations

from typing import Any


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether `selector` (matchLabels; matchExpressions In, NotIn, Exists, DoesNotExist) picks `labels`."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True
