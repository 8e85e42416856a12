"""What the API server's refusals of the operator's creates mean, and how they are said: pure, so
k8s.apply() stays the only caller of the API and these are tested with literal answers.

A refusal that retrying cannot help (a child invalid as made from its spec, a webhook's 400, a kind no
CRD serves) is a Warning event, said once, and in the condition of the stage the training waits at.
A create refused because its namespace is being deleted is no error at all: the namespace's
GraphTrainings go with it. A create an admission plugin forbids (a ResourceQuota exceeded, a
LimitRange's bounds, Pod Security, a webhook's 403) waits for the namespace's policy to change: said
once as a Warning event and in that condition, retried by the next reconciles.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from graphtrain.contract.conditions import Event, Severity
from graphtrain.contract.spec import ConditionType

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


# the authorizer's words (apiserver's responsewriters.forbiddenMessage): the operator lacks a right
_RBAC = re.compile(r'User ".*" cannot \S+ (resource|path) "')


def admission_forbidden(status: int, body: str | None) -> bool:
    """A create answered 403 by an admission plugin, not by the authorizer or NamespaceLifecycle: a
    ResourceQuota exceeded (or asking for limits the child has none of), a LimitRange's min or max,
    Pod Security, a webhook. The namespace's policy refuses it until someone changes the policy or the
    spec, so it is said (not raised: raised, each reconcile was a traceback and the status stayed at
    the last stage written, e.g. "job ... is running" after the job had succeeded)."""
    message = _forbidden(status, body)
    return message is not None and not _RBAC.search(message)


def rights_forbidden(status: int, body: str | None) -> bool:
    """A create answered 403 by the authorizer: the operator's Role or ClusterRole lacks the right. Said
    as an admission refusal is (the training waits, its status and a Warning event name the right) and
    logged as an error: a right the install withholds on purpose (a gang's PodGroup without the chart's
    rbac.podGroups) or forgot is the training's cause to wait, not a traceback at each reconcile."""
    message = _forbidden(status, body)
    return message is not None and bool(_RBAC.search(message))


def _forbidden(status: int, body: str | None) -> str | None:
    """The message of a 403 that is not NamespaceTerminating (None: another answer)."""
    if status != 403 or namespace_terminating(status, body):
        return None
    try:
        message = json.loads(body or "{}").get("message")
    except (ValueError, AttributeError):
        return None
    return message if isinstance(message, str) and message else None


@dataclass(frozen=True)
class Judged:
    """How a refused create is said: the message, whether the plan's later creates wait, the log level."""

    message: str
    waits: bool
    level: int = logging.WARNING


def judge(obj: dict[str, Any], status: int, body: str | None, message: str) -> Judged | None:
    """A create's refusal that is said rather than raised (None: raised, or another path's: 404, 409,
    NamespaceTerminating): invalid as made (400, 422: the other creates go on), forbidden by an
    admission plugin or by the authorizer (403: they wait, a pod made without its refused peer would
    wait for it)."""
    if status in (400, 422):
        return Judged(message, waits=False)
    if admission_forbidden(status, body):
        return Judged(message, waits=True)
    if rights_forbidden(status, body):
        return Judged(rights_message(obj, message), waits=True, level=logging.ERROR)
    return None


def rights_message(obj: dict[str, Any], message: str) -> str:
    """The authorizer's refusal of `obj`'s create, with what grants the right."""
    if obj["kind"] == "PodGroup":
        return (
            f"{message}: the chart grants the PodGroups of the schedulers rbac.podGroups names (helm upgrade "
            "--set rbac.podGroups={volcano} or {coscheduling}); or remove spec.scheduling.gang"
        )
    return f"{message}: the operator's Role or ClusterRole lacks this right (charts/graphtrain: rbac)"


STAGES = (ConditionType.partition_ready, ConditionType.shards_ready, ConditionType.trainers_ready)


def told(status: dict[str, Any], refused: dict[str, str]) -> dict[str, Any]:
    """`status` with each refused create ({"Kind/name": the API server's words}) added to the message of
    the first stage condition that is not True: where the training waits, for `kubectl get gtr -o
    yaml` and the REST API to say why. The condition's status and reason stay the plan's: later plans
    read them (a PartitionReady True keeps the partition)."""
    if not refused:
        return status
    conds = [dict(c) for c in status.get("conditions") or []]
    by_type = {c.get("type"): c for c in conds}
    waiting = next((by_type[t] for t in STAGES if t in by_type and by_type[t].get("status") != "True"), None)
    if waiting is None:
        return status
    said = "; ".join(f"{k} was refused by the API server: {m}" for k, m in sorted(refused.items()))
    said = " ".join(said.split())
    waiting["message"] = f"{waiting['message']}; {said}" if waiting.get("message") else said
    return {**status, "conditions": conds}


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


def refusal(body: dict[str, Any], child: str, message: str, level: int = logging.WARNING) -> Event | None:
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
    log.log(level, "%s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], line)
    return Event(Severity.warning, "ChildRefused", line)
