"""Plan.confirm: a plan made on the watches' cache that ends or restarts work on a child's absence or
age says so, and the reconcile makes it again on children listed from the API server before applying
it (handlers._locked). A lagging watch once failed a healthy training: the cache lacked both trainer
pods of the running attempt and the plan read "the pod of rank 1 deleted while the trainers ran".
Pure: plan() on observations marked as the cache's, or as listed."""

from __future__ import annotations

from graphtrain.contract.children import LABEL_ATTEMPT, trainer_name
from graphtrain.operator.observation import key
from graphtrain.operator.reconcile import plan
from tests.operator.reconcile_cluster import NAME, Cluster, running_cluster

TRAINER_1 = key("Pod", trainer_name(NAME, 1))


def _planned(c: Cluster, cached: bool):
    obs = c.observe()
    obs.cached = cached
    return plan(obs, token="t0k3n")


def test_a_rank_missing_from_the_cache_after_the_trainers_ran_is_confirmed_by_a_list() -> None:
    c = running_cluster()
    c.children.pop(TRAINER_1)
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Restarting"  # what the plan would do, were the cache right
    assert p.confirm == "the pod of rank 1 deleted while the trainers ran"
    listed = _planned(c, cached=False)  # the list agrees: applied as it is
    assert listed.confirm == "" and listed.status["phase"] == "Restarting"


def test_a_leaving_pod_is_confirmed_too() -> None:
    c = running_cluster()
    c.children[TRAINER_1]["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:30Z"
    assert _planned(c, cached=True).confirm == f"pod {trainer_name(NAME, 1)} deleted while the trainers ran"


def test_pods_of_an_earlier_attempt_are_confirmed() -> None:
    """A lagging watch shows attempt 0's pods after attempt 1's were made: Restarting on them."""
    c = running_cluster()
    c.children[TRAINER_1]["metadata"]["labels"][LABEL_ATTEMPT] = "1"  # the status says attempt 0
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Restarting"
    assert p.confirm == f"pod {trainer_name(NAME, 1)} of an earlier attempt"


def test_a_token_missing_from_the_cache_while_roles_run_is_confirmed() -> None:
    c = running_cluster()
    c.children.pop(key("Secret", f"{NAME}-token"))
    assert "was deleted while the training ran" in _planned(c, cached=True).confirm


def test_a_steady_plan_or_one_that_only_creates_needs_no_list() -> None:
    """The cost: a list of every child kind only for the plans that end or restart work."""
    c = running_cluster()
    assert _planned(c, cached=True).confirm == ""
    c.trainers("Failed", r1="Running")  # a rank failed: a pod does not come back from Failed
    assert _planned(c, cached=True).confirm == ""
