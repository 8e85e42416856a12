"""The local executor's status.json at the end (issue 32): once a run succeeded or failed, every process
is stopped (the launcher stops them all, then writes its last status), so no condition or shard state
says a role is ready or running, in the operator's words (contract/conditions.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphtrain.contract.conditions import Reason
from graphtrain.contract.spec import Progress, load_yaml
from graphtrain.runtime.launch import status

EXAMPLE = Path(__file__).parents[3] / "examples" / "nations-transe.yaml"
T1 = "2025-01-01T00:00:01+00:00"
READY = [{"index": 0, "state": "Ready", "restarts": 1}, {"index": 1, "state": "Ready"}]


@pytest.mark.parametrize(
    ("phase", "progress", "expected", "shard_state"),
    [
        (  # still running: as observed
            "Training",
            True,
            {
                "ShardsReady": ("True", "AllReady"),
                "TrainersReady": ("True", "Running"),
                "Stalled": ("False", "Progressing"),
            },
            "Ready",
        ),
        (
            "Succeeded",
            True,
            {
                "ShardsReady": ("False", "Stopped"),
                "TrainersReady": ("False", "Completed"),
                "Succeeded": ("True", "Completed"),
            },
            "Stopped",
        ),
        (  # the case: a failed run's trainers said Running
            "Failed",
            True,
            {
                "ShardsReady": ("False", "Stopped"),
                "TrainersReady": ("False", "Stopped"),
                "Failed": ("True", "ProcessFailed"),
            },
            "Stopped",
        ),
        (  # failed before any trainer reported: no TrainersReady to stop
            "Failed",
            False,
            {"ShardsReady": ("False", "Stopped"), "Failed": ("True", "ProcessFailed")},
            "Stopped",
        ),
    ],
)
def test_an_ended_run_shows_no_running_role(
    phase: str, progress: bool, expected: dict, shard_state: str
) -> None:
    gt = load_yaml(EXAMPLE.read_text())
    obs = status.RunObserved(phase=phase, shards=[dict(s) for s in READY], failure="trainer-1 exited 1")
    obs.progress = Progress(epoch=1, epochs=2) if progress else None
    st = status.build(gt, obs, [], T1)
    said = {str(c.type): (c.status, c.reason) for c in st.conditions}
    assert said == {"SpecValid": ("True", "Valid"), **expected}
    assert [(s.state, s.restarts) for s in st.shards] == [(shard_state, 1), (shard_state, 0)]
    for c in st.conditions:
        if c.reason == Reason.stopped:
            assert c.message.endswith(f"stopped: the run {phase.lower()}"), c.message


def test_a_stopped_condition_keeps_the_time_its_status_last_changed() -> None:
    """Running -> Stopped turns TrainersReady False: a transition, at the time of the ended status."""
    gt = load_yaml(EXAMPLE.read_text())
    obs = status.RunObserved(phase="Training", shards=[dict(s) for s in READY], progress=Progress(epoch=1))
    running = status.build(gt, obs, [], T1).conditions
    obs.phase = "Failed"
    ended = {str(c.type): c for c in status.build(gt, obs, running, "T2").conditions}
    assert (ended["TrainersReady"].status, ended["TrainersReady"].last_transition_time) == ("False", "T2")
    assert ended["SpecValid"].last_transition_time == T1


def test_a_stall_said_while_training_ends_stopped_keeping_what_it_said() -> None:
    gt = load_yaml(EXAMPLE.read_text())
    obs = status.RunObserved(phase="Training", shards=[dict(s) for s in READY])
    obs.progress = Progress(epoch=1, epochs=2)
    obs.stalled = status.stall_note(31, 30)
    training = status.build(gt, obs, [], T1).conditions
    stalled = next(c for c in training if c.type == "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "NoProgress")
    assert stalled.message == "trainer 0 has not reported for 31 s (runPolicy.stallTimeoutSeconds 30)"
    obs.phase = "Failed"
    ended = next(c for c in status.build(gt, obs, training, "T2").conditions if c.type == "Stalled")
    assert (ended.status, ended.reason) == ("False", "Stopped")
    assert "when they stopped: trainer 0 has not reported for 31 s" in ended.message
