"""One condition vocabulary for both executors: which reasons each condition type may carry with which
status, the severity of the event each reason posts, and the small setters that write conditions.

Kubeflow Trainer's pattern: a status is built from what was observed by small setters, each mapping one
outcome to Type/Status/Reason/Message, over a helper that keeps a condition's lastTransitionTime while
its status holds (apimachinery's meta.SetStatusCondition). The local launcher (runtime/launch/status.py)
and the operator (operator/reconcile.py) both build their status with these, so a reason means the same
in a run directory's status.json and in a GraphTraining's status, and its event severity is decided
once: Normal for progress and success, Warning for failures. A combination outside the vocabulary
raises at once, in the unit tests of either builder, instead of reaching a cluster as a mislabelled
event (as a successful training's Warning event `Completed` once did).

Each status is built afresh from what is observed: the conditions it holds are the ones set for it
(plus those a terminal status keeps); the previous status lends only the transition times.

At the end (Succeeded, Failed for any cause, or the training being deleted) a status must not describe
stopped pods as at work: set_stopped() turns every role condition still saying ready, running,
starting or waiting into False / Stopped, and keeps what ended as it ended (Partitioned,
PartitionFailed, Completed, the TrainerFailed that failed the training).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import ValidationError

from graphtrain.contract.spec import Condition, ConditionType, Phase
from graphtrain.contract.spec.status import MAX_CONDITION_MESSAGE


class Severity(StrEnum):
    """The type of a Kubernetes Event."""

    normal = "Normal"  # progress or success
    warning = "Warning"  # a failure, or a problem someone must act on


class Reason(StrEnum):
    """Why a condition has its status (one line of meaning each)."""

    valid = "Valid"  # the spec passed every check
    invalid_spec = "InvalidSpec"  # the spec breaks a rule; the message names every field
    update_refused = "UpdateRefused"  # a spec change a running job cannot take; it goes on with the old
    name_conflict = "NameConflict"  # a child's name holds an object that is not this training's
    partitioning = "Partitioning"  # the partition job runs
    partitioned = "Partitioned"  # the partition is written
    partition_failed = "PartitionFailed"  # the partition job failed
    all_ready = "AllReady"  # every shard server answers
    waiting = "Waiting"  # some shard servers do not answer yet (starting, or restarting)
    not_started = "NotStarted"  # the trainers wait for the shard servers
    starting = "Starting"  # trainer processes or pods are being started
    running = "Running"  # every trainer runs
    restarting = "Restarting"  # the trainers are recreated from the last checkpoint
    trainer_failed = "TrainerFailed"  # a trainer failed
    completed = "Completed"  # every trainer finished its epochs
    backoff_limit_exceeded = "BackoffLimitExceeded"  # a trainer failed with runPolicy.backoffLimit used up
    process_failed = "ProcessFailed"  # a local run's process failed or stalled, or the run was stopped
    deadline_exceeded = "DeadlineExceeded"  # the training ran past runPolicy.activeDeadlineSeconds
    no_progress = "NoProgress"  # a trainer has not reported for runPolicy.stallTimeoutSeconds
    progressing = "Progressing"  # every trainer reports
    pods_not_starting = "PodsNotStarting"  # a pod cannot start (image pull, crash loop, unschedulable)
    start_timeout = "StartTimeout"  # a pod could not start for runPolicy.startTimeoutSeconds
    insufficient_memory = "InsufficientMemory"  # a role's memory limit is below what its pods need
    suspended = "Suspended"  # spec.suspend is true: every pod is stopped, the data kept
    resumed = "Resumed"  # spec.suspend went back to false: the training resumes from its checkpoint
    stopped = "Stopped"  # the role's pods (processes) are stopped: the training ended or is being deleted
    waiting_for_group = "WaitingForGroup"  # pods gated or pending until their pod group is admitted whole


_T, _R = ConditionType, Reason  # short names for the tables
VOCABULARY: dict[tuple[ConditionType, bool], frozenset[Reason]] = {
    (_T.spec_valid, True): frozenset({_R.valid}),
    (_T.spec_valid, False): frozenset({_R.invalid_spec, _R.update_refused, _R.name_conflict}),
    (_T.partition_ready, True): frozenset({_R.partitioned}),
    (_T.partition_ready, False): frozenset(
        {_R.partitioning, _R.partition_failed, _R.pods_not_starting, _R.stopped}
    ),
    (_T.shards_ready, True): frozenset({_R.all_ready}),
    (_T.shards_ready, False): frozenset({_R.waiting, _R.pods_not_starting, _R.stopped, _R.waiting_for_group}),
    (_T.trainers_ready, True): frozenset({_R.running}),
    (_T.trainers_ready, False): frozenset(
        {
            _R.not_started,
            _R.starting,
            _R.restarting,
            _R.trainer_failed,
            _R.completed,
            _R.pods_not_starting,
            _R.stopped,
            _R.waiting_for_group,
        }
    ),
    (_T.stalled, True): frozenset({_R.no_progress}),
    (_T.stalled, False): frozenset({_R.progressing, _R.stopped}),
    (_T.suspended, True): frozenset({_R.suspended}),
    (_T.suspended, False): frozenset({_R.resumed}),
    (_T.succeeded, True): frozenset({_R.completed}),
    (_T.failed, True): frozenset(
        {
            _R.invalid_spec,
            _R.partition_failed,
            _R.trainer_failed,
            _R.backoff_limit_exceeded,
            _R.process_failed,
            _R.deadline_exceeded,
            _R.start_timeout,
            _R.insufficient_memory,
        }
    ),
}
"""(condition type, status True?) -> the reasons it may carry: what either executor may write."""

FAILURES = frozenset(
    {
        _R.invalid_spec,
        _R.update_refused,
        _R.name_conflict,
        _R.partition_failed,
        _R.trainer_failed,
        _R.backoff_limit_exceeded,
        _R.process_failed,
        _R.deadline_exceeded,
        _R.no_progress,
        _R.pods_not_starting,
        _R.start_timeout,
        _R.insufficient_memory,
    }
)
"""The reasons that say something went wrong: their events are Warnings, every other reason's Normal."""


def severity(reason: Reason) -> Severity:
    """The type of the event a condition taking `reason` posts."""
    return Severity.warning if reason in FAILURES else Severity.normal


def phase_severity(phase: Phase) -> Severity:
    """The type of the event a phase change posts: Warning for Failed only (a restart is recovery; the
    failure that caused it posts its own Warning)."""
    return Severity.warning if phase == Phase.failed else Severity.normal


@dataclass(frozen=True)
class Event:
    """What a transition says as a Kubernetes Event (the operator posts them; the launcher prints)."""

    type: Severity
    reason: str
    message: str


def phase_event(before: str | None, after: Phase) -> Event | None:
    """The event of a phase change from `before` (None: no phase yet), or None if it did not change."""
    if before == after.value:
        return None
    return Event(phase_severity(after), after.value, f"phase {after.value}")


def parse(raw: Iterable[Any]) -> list[Condition]:
    """The conditions of a status read back as data (a GraphTraining's status, a status.json); an entry
    that is not a condition (hand-edited) is dropped: it lends no transition time."""
    out = []
    for item in raw:
        try:
            out.append(Condition.model_validate(item))
        except ValidationError:
            continue
    return out


# A condition's message is at most this long (Condition's schema, as metav1.Condition's): an invalid spec's
# problems, one per wrong field, can be more (a document of a thousand unknown keys).
MAX_MESSAGE = MAX_CONDITION_MESSAGE


def clipped(message: str) -> str:
    """`message` cut to MAX_MESSAGE characters, saying how much was cut, instead of a Condition that
    refuses it (a status the executor could not write at all)."""
    if len(message) <= MAX_MESSAGE:
        return message
    tail = f"… ({len(message):,} characters in all)"
    return message[: MAX_MESSAGE - len(tail)] + tail


class Conditions:
    """The conditions of one status being built. A condition keeps the previous status' transition time
    while its status holds, else takes `at` (Kubernetes semantics: lastTransitionTime is when the
    status last changed, not when it was last written)."""

    def __init__(self, previous: Iterable[Condition], at: str, generation: int | None = None):
        self.previous = {str(c.type): c for c in previous}
        self.at, self.generation = at, generation
        self.current: dict[str, Condition] = {}

    def set(self, kind: ConditionType, ok: bool, reason: Reason, message: str = "") -> None:
        """Set condition `kind` (again: the last setting wins).

        Raises:
            ValueError: `reason` is not in the vocabulary of `kind` with this status.
        """
        if reason not in VOCABULARY.get((kind, ok), frozenset()):
            raise ValueError(f"{kind} {ok} cannot have reason {reason}: not in the condition vocabulary")
        status: Literal["True", "False"] = "True" if ok else "False"
        prev = self.previous.get(str(kind))
        held = prev is not None and prev.status == status and prev.last_transition_time is not None
        self.current[str(kind)] = Condition(
            type=kind,
            status=status,
            reason=reason.value,
            message=clipped(message),
            last_transition_time=prev.last_transition_time if held and prev else self.at,
            observed_generation=self.generation,
        )

    def keep(self, condition: Condition) -> None:
        """Carry a previous condition over as it was, unless this status set its type."""
        self.current.setdefault(str(condition.type), condition)

    def get(self, kind: ConditionType) -> Condition | None:
        return self.current.get(str(kind))

    def events(self) -> list[Event]:
        """One event per condition whose status or reason changed since the previous status."""
        out = []
        for c in self.current.values():
            prev = self.previous.get(str(c.type))
            if prev is None or prev.status != c.status or prev.reason != c.reason:
                out.append(
                    Event(severity(Reason(c.reason)), c.reason, c.message or f"{c.type} is {c.status}")
                )
        return out

    def as_list(self) -> list[Condition]:
        return list(self.current.values())


# ------------------------------------------------------------------------------------------- setters
# One per observed outcome: both executors call these; an outcome that sets two conditions sets both.


def set_spec_valid(c: Conditions, message: str = "") -> None:
    c.set(ConditionType.spec_valid, True, Reason.valid, message)


def set_spec_invalid(c: Conditions, problems: str) -> None:
    """A spec that never ran is invalid: the training fails with the problems."""
    c.set(ConditionType.spec_valid, False, Reason.invalid_spec, problems)
    c.set(ConditionType.failed, True, Reason.invalid_spec, problems)


def set_update_refused(c: Conditions, message: str) -> None:
    """A change to a running training that it cannot take; it goes on with the applied spec."""
    c.set(ConditionType.spec_valid, False, Reason.update_refused, message)


def set_name_conflict(c: Conditions, message: str) -> None:
    """A child the training would make has its name held by an object that is not the training's: it
    waits, making nothing that would use that object."""
    c.set(ConditionType.spec_valid, False, Reason.name_conflict, message)


def set_partitioning(c: Conditions, message: str = "") -> None:
    c.set(ConditionType.partition_ready, False, Reason.partitioning, message)


def set_partitioned(c: Conditions, message: str = "") -> None:
    c.set(ConditionType.partition_ready, True, Reason.partitioned, message)


def set_partition_failed(c: Conditions, message: str) -> None:
    c.set(ConditionType.partition_ready, False, Reason.partition_failed, message)
    c.set(ConditionType.failed, True, Reason.partition_failed, message)


def set_waiting_for_group(c: Conditions, kind: ConditionType, message: str) -> None:
    """A stage's pods wait, gated or pending, until their pod group is admitted or scheduled whole (a
    Kueue queue, a gang): no failure, and no start timeout runs."""
    c.set(kind, False, Reason.waiting_for_group, message)


def set_pods_not_starting(c: Conditions, kind: ConditionType, message: str) -> None:
    """The condition of a stage (PartitionReady, ShardsReady, TrainersReady) whose pods cannot start:
    the message names each pod, its reason and its message."""
    c.set(kind, False, Reason.pods_not_starting, message)


def set_suspended(c: Conditions, message: str) -> None:
    c.set(ConditionType.suspended, True, Reason.suspended, message)


def set_resumed(c: Conditions, message: str) -> None:
    c.set(ConditionType.suspended, False, Reason.resumed, message)


def set_shards_ready(c: Conditions, ready: int, total: int) -> None:
    """ShardsReady from how many of the `total` shard servers answer."""
    ready = min(ready, total)
    ok = ready >= total
    c.set(
        ConditionType.shards_ready,
        ok,
        Reason.all_ready if ok else Reason.waiting,
        f"{ready}/{total} shard servers ready",
    )


def set_trainers_waiting(c: Conditions, reason: Reason, message: str) -> None:
    """TrainersReady False for a reason that is not a failure: not started, starting, restarting, done."""
    c.set(ConditionType.trainers_ready, False, reason, message)


def set_trainers_running(c: Conditions, message: str = "") -> None:
    c.set(ConditionType.trainers_ready, True, Reason.running, message)


def set_trainer_failed(c: Conditions, message: str) -> None:
    """A trainer failed (the training restarts it or fails: set_failed says which)."""
    c.set(ConditionType.trainers_ready, False, Reason.trainer_failed, message)


def set_stalled(c: Conditions, silent: str | None) -> None:
    """Stalled from the silent trainer's description, None when every trainer reports."""
    if silent is None:
        c.set(ConditionType.stalled, False, Reason.progressing, "every rank reports")
    else:
        c.set(ConditionType.stalled, True, Reason.no_progress, silent)


def set_succeeded(c: Conditions, message: str = "") -> None:
    c.set(ConditionType.succeeded, True, Reason.completed, message)


def set_failed(c: Conditions, reason: Reason, message: str) -> None:
    c.set(ConditionType.failed, True, reason, message)


ENDED = frozenset({_R.partitioned, _R.partition_failed, _R.completed, _R.stopped})
"""Reasons that say how a role ended: set_stopped() keeps them."""
TRAINER_FAILURES = frozenset({_R.trainer_failed, _R.backoff_limit_exceeded})
"""The Failed reasons whose cause TrainersReady TrainerFailed names: that one ended the trainers too."""


def set_stopped(c: Conditions, roles: Mapping[ConditionType, str], why: str) -> None:
    """The roles in `roles` (condition type -> what its pods are, e.g. "shard servers") are stopped
    because the training ended or is being deleted (`why`). Each of their conditions in `c` that does
    not already say how the role ended (ENDED, or the TrainerFailed that failed the training) becomes
    False / Stopped, "<what> stopped: <why>"; a role with no condition (it never started) gets none.
    Stopped trainers cannot stall: Stalled becomes False / Stopped too, keeping what a True one said."""
    failed = c.get(ConditionType.failed)
    cause = failed.reason if failed is not None and failed.status == "True" else ""
    for kind, what in roles.items():
        now = c.get(kind)
        if now is None or now.reason in ENDED:
            continue
        if now.reason == Reason.trainer_failed and cause in TRAINER_FAILURES:
            continue
        c.set(kind, False, Reason.stopped, f"{what} stopped: {why}")
    stalled = c.get(ConditionType.stalled)
    if ConditionType.trainers_ready in roles and stalled is not None and stalled.reason != Reason.stopped:
        said = f"; when they stopped: {stalled.message}" if stalled.status == "True" else ""
        c.set(ConditionType.stalled, False, Reason.stopped, f"the trainers are stopped{said}")
