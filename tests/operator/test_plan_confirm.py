"""Plan.confirm: a plan made on the watches' cache that ends or restarts work on a child's absence or
age says so, and the reconcile makes it again on children listed from the API server before applying
it (handlers._locked). A lagging watch once failed a healthy training: the cache lacked both trainer
pods of the running attempt and the plan read "the pod of rank 1 deleted while the trainers ran".
Pure: plan() on observations marked as the cache's, or as listed."""

from __future__ import annotations

import datetime as dt

from graphtrain.contract.children import LABEL_ATTEMPT, trainer_name
from graphtrain.operator.observation import key
from graphtrain.operator.reconcile import plan
from tests.operator.reconcile_cluster import NAME, Cluster, cond, running_cluster, to_training, training
from tests.operator.test_reconcile_cleanup import UNSCHEDULED

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


def test_a_stall_restart_on_the_cached_heartbeats_is_confirmed() -> None:
    """runPolicy.stallPolicy Restart judges the progress ConfigMap as the cache holds it: a ConfigMap
    watch behind by stallTimeoutSeconds shows every rank silent while they report."""
    c = running_cluster(**{"runPolicy.stallPolicy": "Restart"})
    c.now += dt.timedelta(minutes=10)  # no heartbeat since the pods started (stallTimeoutSeconds 60)
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Restarting" and "has not reported" in p.confirm


def test_a_start_timeout_on_a_cached_pod_status_is_confirmed() -> None:
    """A pod shown Unschedulable since long ago may be running now, its events not yet in the cache."""
    c = Cluster(training())
    to_training(c)
    for rank in (0, 1):
        c.children[key("Pod", trainer_name(NAME, rank))]["status"] = {
            "phase": "Pending",
            "conditions": [{**UNSCHEDULED, "lastTransitionTime": "2026-11-22T11:00:00Z"}],
        }
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Failed" and cond(p, "Failed")["reason"] == "StartTimeout"
    assert p.confirm.startswith(f"pod {trainer_name(NAME, 0)} could not start; ")  # and its clean-up


def test_an_inference_without_its_claim_and_config_in_the_cache_is_confirmed() -> None:
    """Failed for good (a terminal phase) on two children the cache does not show."""
    c = Cluster(training(mode="inference", inference={"checkpoint": "runs/wn/uid-0/checkpoints/BEST"}))
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Failed" and f"no claim {NAME}-data" in p.confirm


def test_a_gang_made_in_part_is_confirmed() -> None:
    """A rank missing from the cache before the trainers ran: its create makes the gang's rest, and
    k8s.apply deletes the pods made before (running peers, were the rank there) when a quota that the
    rank's own pod fills refuses it."""
    c = Cluster(training())
    to_training(c)
    c.children.pop(TRAINER_1)
    p = _planned(c, cached=True)
    assert [pod["metadata"]["name"] for pod in p.gang] == [trainer_name(NAME, 0)]
    assert p.confirm == f"the gang made in part ({trainer_name(NAME, 0)})"


def test_pods_of_an_earlier_attempt_all_stopping_need_no_list_each_time() -> None:
    """The restart decided, an earlier attempt's pod stays Terminating (its node lost: for good): the
    plan deletes nothing and changes neither phase nor restarts, so it is written as it is, not
    confirmed by a list of every child kind at every reconcile."""
    c = running_cluster()
    c.trainers("Failed", r1="Running")
    assert c.step().status["phase"] == "Restarting"  # the pods' deletes applied: both gone
    c.pod(trainer_name(NAME, 1), "trainer", "Running", labels={LABEL_ATTEMPT: "0"})
    c.children[TRAINER_1]["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:30Z"
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Restarting" and p.actions == [] and p.confirm == ""


def test_a_listed_plan_disagrees_with_the_cached_one_by_phase_restarts_or_deletes() -> None:
    """handlers.disagree: what the operator counts and warns of (graphtrain_operator_cache_behind_total)."""
    from graphtrain.operator.handlers import disagree

    c = running_cluster()
    steady = _planned(c, cached=False)
    c.children.pop(TRAINER_1)
    lost = _planned(c, cached=True)
    assert disagree(lost, steady) and not disagree(lost, lost) and not disagree(steady, steady)


def test_a_stall_reported_on_the_cached_heartbeats_is_confirmed_once() -> None:
    """runPolicy.stallPolicy Report: the Stalled condition and its NoProgress Warning, when new, on a
    ConfigMap as the cache holds it; once said, the same plan is not listed again at every reconcile."""
    c = running_cluster(**{"runPolicy.stallPolicy": "Report"})
    c.now += dt.timedelta(minutes=10)
    first = _planned(c, cached=True)
    assert "Stalled" in {x["type"] for x in first.status["conditions"] if x["status"] == "True"}
    assert first.confirm and "NoProgress" in {e.reason for e in first.events}
    c.step()  # written (as the listed plan would be)
    assert _planned(c, cached=True).confirm == ""


def test_an_end_stopping_trainer_pods_the_cache_shows_running_is_confirmed() -> None:
    """runPolicy.cleanPodPolicy Running stops the trainer pods not finished when a training ends: one the
    cache shows running may have finished since, and deleting it would lose its `kubectl logs`."""
    c = running_cluster(**{"runPolicy.backoffLimit": 0})
    c.trainers("Failed", r1="Running")
    p = _planned(c, cached=True)
    assert p.status["phase"] == "Failed"
    assert [a.key for a in p.actions if a.verb == "delete" and a.obj["kind"] == "Pod"] == [TRAINER_1]
    assert p.confirm == f"trainer pods {trainer_name(NAME, 1)} stopped as not finished"
    c.trainers("Failed", r1="Succeeded")  # what the list shows: the finished pod is kept
    listed = _planned(c, cached=False)
    assert listed.confirm == "" and listed.status["phase"] == "Failed"
    assert not [a for a in listed.actions if a.verb == "delete" and a.obj["kind"] == "Pod"]


def test_an_end_keeping_finished_pods_or_a_restart_needs_no_list_for_them() -> None:
    """Every rank of a restart stops whatever it shows; an end that deletes no unfinished pod (they all
    finished, or cleanPodPolicy None) has nothing of theirs to confirm."""
    c = running_cluster(**{"runPolicy.backoffLimit": 0})
    c.trainers("Failed", r1="Succeeded")
    assert _planned(c, cached=True).confirm == ""
    c = running_cluster(**{"runPolicy.backoffLimit": 0, "runPolicy.cleanPodPolicy": "None"})
    c.trainers("Failed", r1="Running")
    assert _planned(c, cached=True).confirm == ""
