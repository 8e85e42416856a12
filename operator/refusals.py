"""What the API server's refusals of the operator's creates mean, and how they are said: pure, so
k8s.apply() stays the only caller of the API and these are tested with literal answers.

A refusal that retrying cannot help (a child invalid as made from its spec, a kind no CRD serves) is
a Warning event, said once; a create refused because its namespace is being deleted is no error at
all: the namespace's GraphTrainings go with it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from graphtrain.contract.conditions import Event, Severity

log = logging.getLogger("graphtrain.operator")


def namespace_terminating(status: int, body: str | None) -> bool:
    """A create answered 403 because its namespace is being deleted (the API server's
    NamespaceLifecycle: cause NamespaceTerminating). Its trainings are being deleted with it while their
    children go, so a reconcile that sees a child gone makes nothing more; raised, each such create was
    a traceback in the operator's log and a retry, until the training's own deletion came."""
    if status != 403:
        return False
    try:
        causes = (json.loads(body or "{}").get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def unserved_message(obj: dict[str, Any]) -> str:
    """Why a child of a kind the API server does not serve cannot be made."""
    said = f"the API server serves no {obj['kind']} of {obj['apiVersion']} (its CRD is not installed)"
    if obj["kind"] == "PodGroup":
        said += (
            "; spec.scheduling.gang needs the scheduler that owns it (Volcano, or the scheduler-plugins "
            "coscheduling plugin) installed, or remove spec.scheduling.gang"
        )
    return said


_reported: set[tuple[str, str, str]] = set()  # (training uid, child, message): each refusal said once
_REPORTED_MAX = 10_000


def refusal(body: dict[str, Any], child: str, message: str) -> Event | None:
    """A create the API server refused (400/422: the child as made from this spec is invalid, so every
    retry is refused alike): a Warning event naming the child and the API's words, the status written
    and the other actions done all the same. Retrying cannot help, so it is logged (no traceback) and
    posted once per training, child and message in this process, not at every reconcile."""
    line = " ".join(f"{child} was refused by the API server: {message}".split())
    seen = (str(body["metadata"].get("uid")), child, message)
    if seen in _reported:
        log.debug("%s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], line)
        return None
    if len(_reported) >= _REPORTED_MAX:
        _reported.clear()
    _reported.add(seen)
    log.warning("%s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], line)
    return Event(Severity.warning, "ChildRefused", line)
