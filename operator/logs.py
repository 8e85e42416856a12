"""The operator's log: kopf's output configured once, and one line per reconcile decision.

A decision is worth a line when it changes something: a phase, a child created or deleted, an event.
Steady reconciles (a child's status update that decides nothing new) stay silent, as do kopf's own
"Handler 'on_child' succeeded" lines (one per child event: a training's pods alone make dozens a minute),
unless --verbose. With --log-format=json every line is one JSON object whose fields (training, phase,
actions, events) a log pipeline can index; never a Secret's content, only its name.

A decision that repeats the training's last one word for word (same phase, same actions, no event) is
logged at DEBUG: that is a create the API server refuses (a quota, a webhook) and the creates waiting
behind it, retried at every reconcile with nothing changed; the refusal itself is said once, by its
Warning event, and in the status.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command imports this module for LogFormat before anything heavy
    from graphtrain.operator.context import Plan

log = logging.getLogger("graphtrain.operator.decisions")

_ROUTINE = ("Handler 'on_event' succeeded.",)  # one a watch event of every GraphTraining
REMEMBERED = 4096  # trainings whose last line is kept (the oldest forgotten first): bounded memory
_last: OrderedDict[str, str] = OrderedDict()
_last_lock = threading.Lock()


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class _DropRoutine(logging.Filter):
    """kopf's per-event success lines, which say nothing the decision lines do not."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in _ROUTINE


def drop_routine(verbose: bool) -> None:
    """After kopf configured the root logger's handler (the command does): unless verbose, drop
    kopf's per-event success lines."""
    if not verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_DropRoutine())


def decision(
    namespace: str, name: str, before: dict[str, Any], plan: Plan
) -> tuple[str, dict[str, Any]] | None:
    """The line (message, structured fields) of a plan, or None when it changes nothing: same phase,
    no action, no event. `before`: the training's status as observed."""
    from graphtrain.contract.conditions import Severity

    old, new = before.get("phase"), plan.status.get("phase")
    if old == new and not plan.actions and not plan.events:
        return None
    actions = [f"{a.verb} {a.key}" for a in plan.actions]
    events = [e.reason for e in plan.events]
    warnings = [f"{e.reason}: {e.message}" for e in plan.events if e.type == Severity.warning]
    fields: dict[str, Any] = {
        "training": f"{namespace}/{name}",
        "phase": new,
        "previous_phase": old,
        "actions": actions,
        "events": events,
    }
    if warnings:
        fields["warnings"] = warnings
    if plan.requeue_after is not None:
        fields["requeue_after_seconds"] = round(plan.requeue_after, 1)
    phase = f"{old or 'new'} -> {new}" if old != new else f"{new}"
    parts = [f"{namespace}/{name}: {phase}"]
    if actions:
        parts.append("; ".join(actions))
    if events:
        parts.append("events " + ", ".join(events))
    parts += warnings
    return " | ".join(parts), fields


def forget(namespace: str, name: str) -> None:
    """Forget the training's last decision (it is gone)."""
    with _last_lock:
        _last.pop(f"{namespace}/{name}", None)


def repeated(training: str, said: str) -> bool:
    """Whether `said` (a decision's phase and actions) is what the training's last decision said."""
    with _last_lock:
        same = _last.get(training) == said
        _last[training] = said
        _last.move_to_end(training)
        while len(_last) > REMEMBERED:
            _last.popitem(last=False)
        return same


def decided(namespace: str, name: str, before: dict[str, Any], plan: Plan) -> None:
    """Log the decision's line (see decision()), if it has one: at DEBUG when it has no event and its
    phase and actions are the last decision's (one that decided nothing breaks the run)."""
    line = decision(namespace, name, before, plan)
    training = f"{namespace}/{name}"
    if line is None:
        forget(namespace, name)
        return
    message, fields = line
    said = repr((fields["previous_phase"], fields["phase"], fields["actions"]))
    again = repeated(training, said) and not plan.events
    log.log(logging.DEBUG if again else logging.INFO, message, extra={"decision": fields})
