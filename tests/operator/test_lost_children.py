"""Base children deleted by hand while a training runs (issue 47's attack review): the token Secret. The
running roles read the token once at their start, so a new token beside them would be refused by the
old servers at the next trainer restart: every role restarts together with the new one instead."""

from __future__ import annotations

import pytest

from graphtrain.contract.children import trainer_name
from graphtrain.operator.observation import key
from tests.operator.test_reconcile import NAME, Cluster, cond, kinds, running_cluster, training

TOKEN = f"Secret/{NAME}-token"
SHARDS = f"StatefulSet/{NAME}-shards"
TRAINERS = [f"Pod/{trainer_name(NAME, r)}" for r in range(2)]


def test_a_token_deleted_mid_run_restarts_every_role_with_the_new_one() -> None:
    c = running_cluster(**{"runPolicy.backoffLimit": 1})
    c.children.pop(TOKEN)
    p = c.step()
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert kinds(p, "create") == [TOKEN]
    assert kinds(p, "delete") == sorted([SHARDS, *TRAINERS])
    said = cond(p, "TrainersReady")["message"]
    assert said.startswith(
        f"Secret {NAME}-token (the shard servers' token) was deleted while the training ran"
    )
    assert "restart 1/1" in said
    # the next attempt: the servers' StatefulSet is made again, then its trainers once the servers are ready
    p = c.step()
    assert SHARDS in kinds(p, "create") and TOKEN not in kinds(p, "create")
    c.ready_shards()
    p = c.step()
    assert sorted(set(TRAINERS) & set(kinds(p, "create"))) == TRAINERS
    assert p.status["restarts"] == 1


def test_a_token_deleted_past_the_backoff_limit_fails_the_training() -> None:
    c = running_cluster(**{"runPolicy.backoffLimit": 0})
    c.children.pop(TOKEN)
    p = c.step()
    assert p.status["phase"] == "Failed"
    assert "Secret" in cond(p, "Failed")["message"]


@pytest.mark.parametrize("running", ["nothing", "partition"])
def test_a_token_missing_before_any_role_ran_is_made_without_a_restart(running: str) -> None:

    c = Cluster(training())
    c.step()
    if running == "partition":
        c.finish_partition()
    c.children.pop(TOKEN)
    p = c.step()
    assert TOKEN in kinds(p, "create") and kinds(p, "delete") == []
    assert p.status.get("restarts", 0) == 0
    assert key("Secret", f"{NAME}-token") in c.children
