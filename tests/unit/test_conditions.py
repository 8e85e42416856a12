"""The condition vocabulary both executors share: every reason's event severity on every transition,
transition times, and the setters refusing a combination outside the vocabulary."""

from __future__ import annotations

import pytest

from graphtrain.runtime import spec as S
from graphtrain.runtime.spec import conditions as C

R = C.Reason
# Written out by hand, not derived: a new reason fails here until someone decides what its events say.
EXPECTED = {
    R.valid: "Normal",
    R.invalid_spec: "Warning",
    R.update_refused: "Warning",
    R.partitioning: "Normal",
    R.partitioned: "Normal",
    R.partition_failed: "Warning",
    R.all_ready: "Normal",
    R.waiting: "Normal",
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
    R.suspended: "Normal",
    R.resumed: "Normal",
}
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def states() -> list[tuple[S.ConditionType, bool, C.Reason]]:
    return [(kind, ok, reason) for (kind, ok), reasons in C.VOCABULARY.items() for reason in sorted(reasons)]


def test_every_reason_has_a_decided_severity_and_a_condition() -> None:
    assert set(EXPECTED) == set(C.Reason)
    used = {reason for _, _, reason in states()}
    assert used == set(C.Reason), f"reasons no condition may carry: {set(C.Reason) - used}"


@pytest.mark.parametrize(("kind", "ok", "reason"), states(), ids=lambda v: str(v))
def test_every_transition_posts_its_reasons_severity(
    kind: S.ConditionType, ok: bool, reason: C.Reason
) -> None:
    befores: list[S.Condition | None] = [None]  # first set, then from every other state of the same type
    for other_kind, other_ok, other_reason in states():
        if other_kind == kind and (other_ok, other_reason) != (ok, reason):
            befores.append(
                S.Condition(
                    type=kind,
                    status="True" if other_ok else "False",
                    reason=other_reason.value,
                    last_transition_time=T0,
                )
            )
    for before in befores:
        conds = C.Conditions([before] if before else [], T1)
        conds.set(kind, ok, reason, "why")
        (event,) = conds.events()
        assert (event.type, event.reason, event.message) == (EXPECTED[reason], reason.value, "why"), before
    # the same state again: no event
    first = C.Conditions([], T0)
    first.set(kind, ok, reason)
    conds = C.Conditions(first.as_list(), T1)
    conds.set(kind, ok, reason)
    assert conds.events() == []


@pytest.mark.parametrize(
    ("kind", "ok", "severity"),
    [
        (S.ConditionType.failed, True, "Warning"),
        (S.ConditionType.stalled, True, "Warning"),
        (S.ConditionType.succeeded, True, "Normal"),
        (S.ConditionType.spec_valid, True, "Normal"),
        (S.ConditionType.partition_ready, True, "Normal"),
        (S.ConditionType.shards_ready, True, "Normal"),
        (S.ConditionType.trainers_ready, True, "Normal"),
        (S.ConditionType.stalled, False, "Normal"),
    ],
)
def test_failures_warn_and_progress_does_not(kind: S.ConditionType, ok: bool, severity: str) -> None:
    for reason in C.VOCABULARY[(kind, ok)]:
        assert C.severity(reason) == severity, reason


def test_a_finished_training_posts_no_warning() -> None:
    """The bug this vocabulary fixed: TrainersReady False / Completed was posted as a Warning."""
    conds = C.Conditions([], T0)
    C.set_trainers_waiting(conds, R.completed, "every trainer finished")
    C.set_succeeded(conds, "done")
    assert {e.type for e in conds.events()} == {"Normal"}


@pytest.mark.parametrize("phase", list(S.Phase))
def test_a_phase_change_warns_only_when_it_fails(phase: S.Phase) -> None:
    event = C.phase_event("Something", phase)
    assert event is not None and event.reason == phase.value
    assert event.type == ("Warning" if phase == S.Phase.failed else "Normal")
    assert C.phase_event(phase.value, phase) is None


def since(conds: C.Conditions, kind: S.ConditionType) -> str | None:
    found = conds.get(kind)
    assert found is not None
    return found.last_transition_time


def test_a_transition_time_moves_only_when_the_status_changes() -> None:
    first = C.Conditions([], T0)
    C.set_shards_ready(first, 1, 2)
    second = C.Conditions(first.as_list(), T1)
    C.set_shards_ready(second, 1, 2)
    C.set_spec_valid(second)
    assert since(second, S.ConditionType.shards_ready) == T0  # still 1/2: held
    assert since(second, S.ConditionType.spec_valid) == T1  # new
    third = C.Conditions(second.as_list(), "2026-01-01T00:02:00Z")
    C.set_shards_ready(third, 2, 2)
    assert since(third, S.ConditionType.shards_ready) == "2026-01-01T00:02:00Z"  # turned True


def test_a_combination_outside_the_vocabulary_is_refused() -> None:
    conds = C.Conditions([], T0)
    with pytest.raises(ValueError, match="vocabulary"):
        conds.set(S.ConditionType.succeeded, True, R.running)
    with pytest.raises(ValueError, match="vocabulary"):
        conds.set(S.ConditionType.failed, False, R.trainer_failed)


def test_unreadable_conditions_lend_no_time() -> None:
    raw = [
        {"type": "SpecValid", "status": "True", "reason": "Valid", "lastTransitionTime": T0},
        {"type": "x"},
    ]
    assert [c.type for c in C.parse(raw)] == ["SpecValid"]
