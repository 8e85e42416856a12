"""A failed role's own words reach the conditions: every container falls back to its log's tail as its
termination message (the kubelet keeps at most 80 lines), and the operator names that tail's last line."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pytest

from graphtrain.contract.conditions import Conditions
from graphtrain.contract.spec import Phase, parse
from graphtrain.operator import manifests, observation, stages
from graphtrain.operator.config import built_in
from graphtrain.operator.observation import iso
from tests.operator.reconcile_cluster import NOW, context, observed, sts, trainer, training


def containers() -> dict[str, dict]:
    owner, config = training(), built_in()
    gt = parse(owner)
    pods = {
        "partition": manifests.partition_job(owner, gt, config)["spec"]["template"]["spec"],
        "shards": manifests.shard_statefulset(owner, gt, config)["spec"]["template"]["spec"],
        "trainer": manifests.trainer_pod(owner, gt, config, 0, 0)["spec"],
    }
    return {role: spec["containers"][0] for role, spec in pods.items()}


@pytest.mark.parametrize("role", ["partition", "shards", "trainer"])
def test_every_role_falls_back_to_its_log_on_error(role: str) -> None:
    assert containers()[role]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_failed_pod_is_named_with_the_last_line_of_its_log_tail() -> None:
    tail = (
        "2026-12-02 epoch 1/2  loss 5.24\n[trainer] checkpoint written\nerror: shard 0 refused the token\n\n"
    )
    pod = {
        "metadata": {"name": "wn-trainer-1"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": tail}}}
            ],
        },
    }
    assert observation.pod_failure(pod) == (
        "wn-trainer-1 failed (Error, exit code 1): error: shard 0 refused the token"
    )


def test_a_pod_without_a_message_falls_back_to_the_pods_status() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"reason": "Evicted", "message": "node low on memory"}}
    assert observation.pod_failure(pod) == "p failed (Evicted): node low on memory"


def failed_pod(name: str, finished: str | None, message: str, reason: str = "Error") -> dict:
    terminated = {"exitCode": 1, "reason": reason, "message": message}
    if finished is not None:
        terminated["finishedAt"] = finished
    return {
        "metadata": {"name": name},
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]},
    }


def test_the_trainer_named_is_the_one_whose_failure_was_its_own() -> None:
    """Rank 1 OOM-killed, rank 0 then lost its peer: named by rank alone, the condition blamed rank 0."""
    lost = "error: trainer 0: another trainer went away (Connection closed by peer): its own log says why"
    r0 = failed_pod("wn-trainer-0", "2026-12-02T01:00:05Z", lost)
    r1 = failed_pod("wn-trainer-1", "2026-12-02T01:00:05Z", "", reason="OOMKilled")
    assert observation.first_failure([r0, r1]) is r1
    # neither a peer loss: the one that ended first, then the lowest rank
    r0 = failed_pod("wn-trainer-0", "2026-12-02T01:00:09Z", "error: shard 0 refused the token")
    r1 = failed_pod("wn-trainer-1", "2026-12-02T01:00:05Z", "error: out of memory")
    assert observation.first_failure([r0, r1]) is r1
    r1 = failed_pod("wn-trainer-1", None, "error: out of memory")
    assert observation.first_failure([r0, r1]) is r0
    r1 = failed_pod("wn-trainer-1", "2026-12-02T01:00:09Z", "error: out of memory")
    assert observation.first_failure([r0, r1]) is r0


LOST = "error: trainer 0: another trainer went away (Connection closed by peer): its own log says why"


def test_a_peer_loss_waits_a_bounded_moment_for_its_cause() -> None:
    """Rank 0 lost its peer and failed within a second, before the kubelet reported rank 1's pod (the
    process killed): judged at once, rank 0 was named, and never the rank that caused it."""
    now = dt.datetime(2026, 12, 2, 1, 0, 10, tzinfo=dt.UTC)
    r0 = failed_pod("wn-trainer-0", "2026-12-02T01:00:05Z", LOST)
    running = {"metadata": {"name": "wn-trainer-1"}, "status": {"phase": "Running"}}
    assert observation.culprit_due([r0], [r0, running], now) == observation.PEER_LOSS_GRACE - 5
    # past the grace (a hung peer whose pod never fails): judged
    later = now + dt.timedelta(seconds=observation.PEER_LOSS_GRACE)
    assert observation.culprit_due([r0], [r0, running], later) is None
    # every rank finished, or one failure is its own: judged now
    r1 = failed_pod("wn-trainer-1", "2026-12-02T01:00:06Z", "", reason="OOMKilled")
    assert observation.culprit_due([r0, r1], [r0, r1], now) is None
    other = failed_pod("wn-trainer-0", "2026-12-02T01:00:05Z", "error: shard 0 refused the token")
    assert observation.culprit_due([other], [other, running], now) is None
    # no finishedAt reported yet: the wait counts from now
    r0 = failed_pod("wn-trainer-0", None, LOST)
    assert observation.culprit_due([r0], [r0, running], now) == observation.PEER_LOSS_GRACE


def test_the_trainers_stage_names_the_cause_once_its_pod_is_seen() -> None:
    def peer_lost(rank: int) -> dict:
        pod = trainer(rank, "Failed")
        said = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        said.update(message=LOST, finishedAt=iso(NOW - dt.timedelta(seconds=3)))
        return pod

    o = observed(sts(2), peer_lost(0), trainer(1, "Running"))
    step = stages.trainers_stage(context(o), Conditions([], "T"))
    assert (step.actions, step.phase, step.requeue_after) == ([], Phase.training, 27.0)
    conds = Conditions([], "T")
    o = observed(sts(2), peer_lost(0), trainer(1, "Failed"))
    step = stages.trainers_stage(context(o), conds)
    assert step.phase == Phase.restarting
    said = next(c for c in conds.as_list() if c.type == "TrainersReady").message
    assert "wn-trainer-1 failed" in said and "wn-trainer-0" not in said


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("GRAPHTRAIN_OPERATOR_TIMER", "abc", "a number of seconds of at least 1"),
        ("GRAPHTRAIN_OPERATOR_TIMER", "0", "a number of seconds of at least 1"),
        ("GRAPHTRAIN_OPERATOR_TIMER", "nan", "a number of seconds of at least 1"),
        ("GRAPHTRAIN_OPERATOR_WORKERS", "2.5", "a whole number of at least 1"),
        ("GRAPHTRAIN_OPERATOR_WORKERS", "0", "a whole number of at least 1"),
    ],
)
def test_a_bad_loop_setting_is_one_line_naming_the_variable(name: str, value: str, said: str) -> None:
    """A bad value was a ValueError traceback from the handlers' import, after the operator had started."""
    env = {**os.environ, name: value, "KUBECONFIG": "/nonexistent"}
    out = subprocess.run(
        [sys.executable, "-m", "graphtrain.cli", "operator"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == f"error: ${name}={value!r}: must be {said}"
