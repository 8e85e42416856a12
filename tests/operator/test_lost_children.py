"""Base children deleted by hand while a training runs (an attack review's findings).

- The token Secret: the running roles read the token once at their start, so a new token beside them
  would be refused by the old servers at the next trainer restart: every role restarts together with
  the new one instead.
- The config ConfigMap (the applied spec): taken as never started, the operator recreated it from the
  current spec, so a change refused until then (mode, trainers) was applied to the running roles. Now
  status.appliedSpecHash recognises the spec it runs: the same spec brings the ConfigMap back, another
  one waits, touching nothing, until the spec is reverted.
- The partition Job, once it succeeded (by hand, a Job TTL, a cluster policy): made again, it wrote a
  new partition under the running roles and the phase went back to Partitioning while they trained.
  Now the partition stays as made; a Job deleted while it still partitions is made again.
- The trainers' rendezvous Service: made only with a new attempt's pods, so a rank made again beside
  running ones looked rank 0 up through a Service that no longer existed."""

from __future__ import annotations

import pytest

from graphtrain.contract.children import trainer_name
from graphtrain.operator.observation import key
from tests.operator.reconcile_cluster import NAME, Cluster, cond, kinds, running_cluster, training

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
    said = cond(p, "Failed")["message"]
    assert "Secret" in said and "restarts" not in said, said  # no restart was left
    deletes = [a.key for a in p.actions if a.verb == "delete"]
    assert SHARDS in deletes and len(deletes) == len(set(deletes)), deletes  # each delete once


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


CONFIG = f"ConfigMap/{NAME}-config"


def test_the_status_holds_the_applied_specs_hash_and_run_policy_does_not_change_it() -> None:
    c = running_cluster()
    was = c.body["status"]["appliedSpecHash"]
    assert len(was) == 32
    c.body["spec"]["runPolicy"]["backoffLimit"] = 5
    assert c.step().status["appliedSpecHash"] == was


def test_a_config_map_deleted_mid_run_with_the_spec_unchanged_is_made_again() -> None:
    c = running_cluster()
    c.children.pop(CONFIG)
    p = c.step()
    assert kinds(p, "create") == [CONFIG] and kinds(p, "delete") == []
    assert p.status["phase"] == "Training" and cond(p, "SpecValid")["status"] == "True"


@pytest.mark.parametrize(
    "change",
    [
        {"trainers": {"replicas": 3}, "mode": "inference", "inference": {"checkpoint": "runs/x/checkpoints"}},
        {"partition": {"parts": "two"}},  # invalid as well
    ],
    ids=["refused-change", "invalid"],
)
def test_a_config_map_deleted_after_a_refused_change_holds_until_the_spec_is_reverted(change: dict) -> None:
    c = running_cluster()
    before = {k: v for k, v in c.body["spec"].items()}
    c.body["spec"].update(change)
    c.body["metadata"]["generation"] = 2
    assert cond(c.step(), "SpecValid")["reason"] == "UpdateRefused"  # the config map still there
    c.children.pop(CONFIG)
    for _ in range(2):  # nothing made, deleted or restarted, and it stays so
        p = c.step()
        assert p.actions == [] and p.status["phase"] == "Training", p.actions
        said = cond(p, "SpecValid")
        assert (said["status"], said["reason"]) == ("False", "UpdateRefused")
        assert said["message"].startswith(f"ConfigMap {NAME}-config (the applied spec) was deleted")
        assert p.status["observedGeneration"] == 1
    c.body["spec"] = before  # reverted
    c.body["metadata"]["generation"] = 3
    p = c.step()
    assert kinds(p, "create") == [CONFIG] and kinds(p, "delete") == []
    assert cond(p, "SpecValid")["status"] == "True" and p.status["phase"] == "Training"


def test_a_training_that_never_made_children_takes_its_spec_as_new() -> None:
    """Created suspended, nothing is made and its spec may change: no hash stops it."""
    c = Cluster(training(suspend=True))
    c.step()
    c.body["spec"]["trainers"]["replicas"] = 3
    p = c.step()
    assert cond(p, "SpecValid")["status"] == "True"


JOB = f"Job/{NAME}-partition"


@pytest.mark.parametrize("phase", ["Starting", "Training"])
def test_a_partition_job_deleted_after_it_succeeded_is_not_run_again(phase: str) -> None:
    if phase == "Training":
        c = running_cluster()
    else:
        c = Cluster(training())
        c.step()
        c.finish_partition()
        assert c.step().status["phase"] == "Starting"
    c.children.pop(JOB)
    c.children.pop(f"Pod/{NAME}-partition-x1")  # its pods go with it
    for _ in range(2):
        p = c.step()
        assert JOB not in kinds(p, "create") and kinds(p, "delete") == [], p.actions
        assert p.status["phase"] == phase
        assert cond(p, "PartitionReady")["status"] == "True"
        assert p.status["partition"]["parts"] == 2  # what it measured stays


def test_a_partition_job_deleted_while_it_partitions_is_made_again() -> None:
    c = Cluster(training())
    c.step()
    c.children.pop(JOB)
    p = c.step()
    assert kinds(p, "create") == [JOB] and p.status["phase"] == "Partitioning"


SERVICE = f"Service/{NAME}-trainers"


def test_the_trainers_service_deleted_is_made_again_with_a_rank_made_again() -> None:
    c = running_cluster()
    c.children.pop(SERVICE)
    c.children.pop(TRAINERS[1])
    said = next(x for x in c.body["status"]["conditions"] if x["type"] == "TrainersReady")
    said["status"] = "False"  # before every rank ran: a missing rank is made again
    c.body["status"].pop("trainersRanAttempt", None)
    p = c.step()
    assert kinds(p, "create") == sorted([SERVICE, TRAINERS[1]]) and kinds(p, "delete") == [], p.actions
    assert [a.key for a in p.actions][0] == SERVICE  # before the pod that looks rank 0 up through it
