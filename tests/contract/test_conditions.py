"""The condition vocabulary both executors share: every reason's event severity on every transition,
transition times, and the setters refusing a combination outside the vocabulary."""

from __future__ import annotations

import pytest

from graphtrain.contract import conditions
from graphtrain.contract.spec import Condition, ConditionType, Phase

R = conditions.Reason
# Written out by hand, not derived: a new reason fails here until someone decides what its events say.
EXPECTED = {
    R.valid: "Normal",
    R.invalid_spec: "Warning",
    R.update_refused: "Warning",
    R.name_conflict: "Warning",
    R.partitioning: "Normal",
    R.partitioned: "Normal",
    R.partition_failed: "Warning",
    R.all_ready: "Normal",
    R.waiting: "Normal",
    R.waiting_for_group: "Normal",
    R.not_started: "Normal",
    R.starting: "Normal",
    R.running: "Normal",
    R.restarting: "Normal",
    R.trainer_failed: "Warning",
    R.completed: "Normal",
    R.backoff_limit_exceeded: "Warning",
    R.process_failed: "Warning",
    R.deadline_exceeded: "Warning",
    R.no_progress: "Warning",
    R.progressing: "Normal",
    R.pods_not_starting: "Warning",
    R.start_timeout: "Warning",
    R.insufficient_memory: "Warning",
    R.suspended: "Normal",
    R.resumed: "Normal",
    R.stopped: "Normal",
}
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def states() -> list[tuple[ConditionType, bool, conditions.Reason]]:
    return [
        (kind, ok, reason)
        for (kind, ok), reasons in conditions.VOCABULARY.items()
        for reason in sorted(reasons)
    ]


def test_every_reason_has_a_decided_severity_and_a_condition() -> None:
    assert set(EXPECTED) == set(conditions.Reason)
    used = {reason for _, _, reason in states()}
    assert used == set(conditions.Reason), f"reasons no condition may carry: {set(conditions.Reason) - used}"


@pytest.mark.parametrize(("kind", "ok", "reason"), states(), ids=lambda v: str(v))
def test_every_transition_posts_its_reasons_severity(
    kind: ConditionType, ok: bool, reason: conditions.Reason
) -> None:
    befores: list[Condition | None] = [None]  # first set, then from every other state of the same type
    for other_kind, other_ok, other_reason in states():
        if other_kind == kind and (other_ok, other_reason) != (ok, reason):
            befores.append(
                Condition(
                    type=kind,
                    status="True" if other_ok else "False",
                    reason=other_reason.value,
                    last_transition_time=T0,
                )
            )
    for before in befores:
        conds = conditions.Conditions([before] if before else [], T1)
        conds.set(kind, ok, reason, "why")
        (event,) = conds.events()
        assert (event.type, event.reason, event.message) == (EXPECTED[reason], reason.value, "why"), before
    # the same state again: no event
    first = conditions.Conditions([], T0)
    first.set(kind, ok, reason)
    conds = conditions.Conditions(first.as_list(), T1)
    conds.set(kind, ok, reason)
    assert conds.events() == []


@pytest.mark.parametrize(
    ("kind", "ok", "severity"),
    [
        (ConditionType.failed, True, "Warning"),
        (ConditionType.stalled, True, "Warning"),
        (ConditionType.succeeded, True, "Normal"),
        (ConditionType.spec_valid, True, "Normal"),
        (ConditionType.partition_ready, True, "Normal"),
        (ConditionType.shards_ready, True, "Normal"),
        (ConditionType.trainers_ready, True, "Normal"),
        (ConditionType.stalled, False, "Normal"),
    ],
)
def test_failures_warn_and_progress_does_not(kind: ConditionType, ok: bool, severity: str) -> None:
    for reason in conditions.VOCABULARY[(kind, ok)]:
        assert conditions.severity(reason) == severity, reason


def test_a_finished_training_posts_no_warning() -> None:
    """The bug this vocabulary fixed: TrainersReady False / Completed was posted as a Warning."""
    conds = conditions.Conditions([], T0)
    conditions.set_trainers_waiting(conds, R.completed, "every trainer finished")
    conditions.set_succeeded(conds, "done")
    assert {e.type for e in conds.events()} == {"Normal"}


@pytest.mark.parametrize("phase", list(Phase))
def test_a_phase_change_warns_only_when_it_fails(phase: Phase) -> None:
    event = conditions.phase_event("Something", phase)
    assert event is not None and event.reason == phase.value
    assert event.type == ("Warning" if phase == Phase.failed else "Normal")
    assert conditions.phase_event(phase.value, phase) is None


def since(conds: conditions.Conditions, kind: ConditionType) -> str | None:
    found = conds.get(kind)
    assert found is not None
    return found.last_transition_time


def test_a_transition_time_moves_only_when_the_status_changes() -> None:
    first = conditions.Conditions([], T0)
    conditions.set_shards_ready(first, 1, 2)
    second = conditions.Conditions(first.as_list(), T1)
    conditions.set_shards_ready(second, 1, 2)
    conditions.set_spec_valid(second)
    assert since(second, ConditionType.shards_ready) == T0  # still 1/2: held
    assert since(second, ConditionType.spec_valid) == T1  # new
    third = conditions.Conditions(second.as_list(), "2026-01-01T00:02:00Z")
    conditions.set_shards_ready(third, 2, 2)
    assert since(third, ConditionType.shards_ready) == "2026-01-01T00:02:00Z"  # turned True


def test_a_combination_outside_the_vocabulary_is_refused() -> None:
    conds = conditions.Conditions([], T0)
    with pytest.raises(ValueError, match="vocabulary"):
        conds.set(ConditionType.succeeded, True, R.running)
    with pytest.raises(ValueError, match="vocabulary"):
        conds.set(ConditionType.failed, False, R.trainer_failed)


def test_unreadable_conditions_lend_no_time() -> None:
    raw = [
        {"type": "SpecValid", "status": "True", "reason": "Valid", "lastTransitionTime": T0},
        {"type": "x"},
    ]
    assert [c.type for c in conditions.parse(raw)] == ["SpecValid"]


ROLES = {
    ConditionType.partition_ready: "job wn-partition",
    ConditionType.shards_ready: "shard servers",
    ConditionType.trainers_ready: "trainers",
}
T, P, S, K = (
    ConditionType.trainers_ready,
    ConditionType.partition_ready,
    ConditionType.shards_ready,
    "Stalled",
)


def settled(before: list[tuple[ConditionType, bool, conditions.Reason]], failed: conditions.Reason | None):
    """The (type, status, reason) of each condition after set_stopped over `before` (and Failed)."""
    conds = conditions.Conditions([], T0)
    for kind, ok, reason in before:
        conds.set(kind, ok, reason, "as it was")
    if failed is not None:
        conditions.set_failed(conds, failed, "why")
    conditions.set_stopped(conds, ROLES, "the training failed")
    return {str(c.type): (c.status, c.reason) for c in conds.as_list() if c.type != ConditionType.failed}


@pytest.mark.parametrize(
    ("before", "failed", "after"),
    [
        (  # at work: stopped
            [(S, True, R.all_ready), (T, True, R.running), (ConditionType.stalled, False, R.progressing)],
            R.deadline_exceeded,
            {
                "ShardsReady": ("False", "Stopped"),
                "TrainersReady": ("False", "Stopped"),
                K: ("False", "Stopped"),
            },
        ),
        (  # what ended stays as it ended
            [(P, True, R.partitioned), (T, False, R.completed)],
            None,
            {"PartitionReady": ("True", "Partitioned"), "TrainersReady": ("False", "Completed")},
        ),
        (
            [(P, False, R.partition_failed)],
            R.partition_failed,
            {"PartitionReady": ("False", "PartitionFailed")},
        ),
        (  # the trainer failure that failed the training says how they ended
            [(T, False, R.trainer_failed)],
            R.backoff_limit_exceeded,
            {"TrainersReady": ("False", "TrainerFailed")},
        ),
        (  # a restart's failure, then the deadline: the trainers were stopped, not failed for good
            [(T, False, R.trainer_failed)],
            R.deadline_exceeded,
            {"TrainersReady": ("False", "Stopped")},
        ),
        (  # waiting, starting, not starting: stopped
            [(P, False, R.partitioning), (S, False, R.pods_not_starting), (T, False, R.not_started)],
            R.start_timeout,
            {
                "PartitionReady": ("False", "Stopped"),
                "ShardsReady": ("False", "Stopped"),
                "TrainersReady": ("False", "Stopped"),
            },
        ),
        ([], R.invalid_spec, {}),  # a role that never started gets no condition
    ],
)
def test_set_stopped(before: list, failed: conditions.Reason | None, after: dict) -> None:
    assert settled(before, failed) == after


def test_set_stopped_says_what_and_why_and_keeps_what_a_stall_said() -> None:
    conds = conditions.Conditions([], T0)
    conditions.set_shards_ready(conds, 2, 2)
    conditions.set_stalled(conds, "rank 1 has not reported for 90 s")
    conditions.set_stopped(conds, {S: "shard servers", T: "trainers"}, "the GraphTraining is being deleted")
    shards, stalled = conds.get(S), conds.get(ConditionType.stalled)
    assert (
        shards is not None and shards.message == "shard servers stopped: the GraphTraining is being deleted"
    )
    assert stalled is not None and stalled.status == "False"
    assert stalled.message == "the trainers are stopped; when they stopped: rank 1 has not reported for 90 s"
    only_shards = conditions.Conditions([], T0)
    conditions.set_stalled(only_shards, None)
    conditions.set_stopped(only_shards, {S: "shard servers"}, "x")  # trainers kept running: no stall ends
    assert only_shards.get(ConditionType.stalled).reason == "Progressing"
