"""A status written by someone else (`kubectl patch --subresource=status`, a script, a backup restored):
status.phase alone never ends or revives a training. Taken at its word, a phase patched to Succeeded
stopped a running training's pods and reported a success with nothing finished (and the periodic timer,
which skips finished trainings, left that lie standing until a child changed); one patched back to
Training made a finished training's shard servers, and with runPolicy.cleanPodPolicy All its trainers,
again. The Succeeded or Failed condition, which the operator sets with the phase, says it ended."""

from __future__ import annotations

import pytest

from graphtrain.operator import handlers
from tests.operator.reconcile_cluster import NAME, cond, kinds, running_cluster


@pytest.mark.parametrize("forged", ["Succeeded", "Failed"])
def test_a_running_training_whose_phase_is_patched_to_an_end_runs_on(forged: str) -> None:
    c = running_cluster()
    c.body["status"]["phase"] = forged
    p = c.step()
    assert p.actions == [] and p.status["phase"] == "Training", p.actions
    assert cond(p, "TrainersReady")["status"] == "True"
    assert "completionTime" not in p.status


@pytest.mark.parametrize("policy", ["Running", "All"])
def test_a_finished_training_whose_phase_is_patched_back_stays_finished(policy: str) -> None:
    c = running_cluster(**{"runPolicy.cleanPodPolicy": policy})
    c.trainers("Succeeded")
    assert c.step().status["phase"] == "Succeeded"
    c.body["status"]["phase"] = "Training"
    for _ in range(2):
        p = c.step()
        assert kinds(p, "create") == [] and p.status["phase"] == "Succeeded", p.actions
    assert f"StatefulSet/{NAME}-shards" not in c.children


def test_the_tick_reconciles_a_training_whose_phase_and_conditions_disagree() -> None:
    ended = {"type": "Succeeded", "status": "True", "reason": "Completed"}
    assert handlers.due({"phase": "Succeeded"})
    assert not handlers.due({"phase": "Succeeded", "conditions": [ended]})
    assert handlers.due({"phase": "Training", "conditions": [ended]})
    assert handlers.due({})  # new: no status yet
