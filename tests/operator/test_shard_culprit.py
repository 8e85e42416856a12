"""A trainer that failed because a shard server went away (killed, OOM-killed: its StatefulSet pod
restarted in place by the kubelet) is a consequence: the condition and its event name the shard server's
pod, from its container's last end, as the local launcher names the server process. The restart is one
of runPolicy.backoffLimit's, as the launcher counts a dead server's; the server's own restart stays the
kubelet's count (status.shards[].restarts), never counted twice."""

from __future__ import annotations

import datetime as dt

import pytest

from graphtrain.contract import failures
from graphtrain.contract.roles import PEER_LOST
from graphtrain.operator import observation
from graphtrain.operator.endpoints import restarts
from graphtrain.operator.observation import culprit_due, shard_cause
from tests.operator.reconcile_cluster import NAME, Cluster, cond, kinds, to_training, training

START = "2026-11-22T11:59:00Z"  # the failed trainers' start (this attempt)
LOST_1 = "error: " + failures.shard_gone(1, "tcp://wn-shards-1.wn-shards:7000", failures.NO_ANSWER, "pull")
LOST_PEER = f"error: trainer 1: {PEER_LOST} (Connection closed by peer)"


def trainer_pod(rank: int, message: str, finished: str = "2026-11-22T11:59:40Z") -> dict:
    ended = {"exitCode": 1, "reason": "Error", "message": f"epoch 1\n{message}\n", "finishedAt": finished}
    status = {"phase": "Failed", "startTime": START, "containerStatuses": [{"state": {"terminated": ended}}]}
    return {"metadata": {"name": f"wn-trainer-{rank}"}, "status": status}


def server(restarts: int = 1, reason: str = "OOMKilled", at: str = "2026-11-22T11:59:38Z", now: bool = False):
    """Shard 1's pod and its container's status: ended at `at` (`now`: its current state, a failed pod;
    else its last state, restarted by the kubelet)."""
    end = {"exitCode": 137, "reason": reason, "finishedAt": at}
    status = {"restartCount": restarts, "state": {"running": {}}, "lastState": {"terminated": end}}
    if now:
        status = {"restartCount": restarts, "state": {"terminated": end}}
    return ("wn-shards-1", OLD, status)


OLD = {"name": "wn-shards-1", "creationTimestamp": "2026-11-22T11:00:00Z"}  # made before the attempt
UP = {"restartCount": 0, "state": {"running": {}}}


NAMED = "shard server 1 (pod wn-shards-1) ended (OOMKilled, exit code 137) at 2026-11-22T11:59:38Z and "


@pytest.mark.parametrize(
    ("failed", "servers", "said"),
    [
        pytest.param([LOST_1, LOST_1], {1: server()}, NAMED + "was restarted", id="restarted-both-lost"),
        pytest.param([LOST_1, LOST_PEER], {1: server()}, NAMED + "was restarted", id="one-lost-one-peer"),
        pytest.param([LOST_1], {1: server(now=True)}, NAMED + "failed", id="failed-pod"),
        pytest.param([LOST_1], {1: server(at="2026-11-22T11:00:00Z")}, None, id="restart-before-attempt"),
        pytest.param([LOST_1], {0: server()}, None, id="another-shard-restarted"),
        pytest.param([LOST_1], {1: ("wn-shards-1", OLD, UP)}, None, id="no-end"),
        pytest.param(
            [LOST_1],
            {1: ("wn-shards-1", {**OLD, "creationTimestamp": "2026-11-22T11:59:45Z"}, UP)},
            "shard server 1 (pod wn-shards-1) was replaced (the pod made again at 2026-11-22T11:59:45Z)",
            id="pod-deleted-and-made-again",
        ),
        pytest.param(
            [LOST_1],
            {1: ("wn-shards-1", {**OLD, "deletionTimestamp": "2026-11-22T11:59:39Z"}, UP)},
            "shard server 1 (pod wn-shards-1) is being deleted (since 2026-11-22T11:59:39Z)",
            id="pod-being-deleted",
        ),
        pytest.param(
            [LOST_1], {1: ("wn-shards-1", {}, {})}, "shard server 1 (pod wn-shards-1) has no pod", id="no-pod"
        ),
        pytest.param([LOST_1, "error: out of memory"], {1: server()}, None, id="one-failure-its-own"),
        pytest.param([LOST_PEER], {1: server()}, None, id="peer-loss-only"),
    ],
)
def test_the_shard_server_named_is_the_one_whose_end_the_trainers_lost(
    failed: list[str], servers: dict, said: str | None
) -> None:
    pods = [trainer_pod(r, m) for r, m in enumerate(failed)]
    got = shard_cause(pods, servers)
    if said is None:
        assert got is None
    else:
        assert got is not None and got.startswith(said)
        assert "the trainers lost it: wn-trainer-0 failed (Error, exit code 1): error: shard 1" in got


@pytest.mark.parametrize(
    "how", [failures.NO_ANSWER, failures.CLOSED, failures.CLOSED_ITS, failures.LANE_FAILED]
)
def test_every_wording_of_the_kvstore_client_reads_as_a_lost_shard(how: str) -> None:
    said = failures.ERROR + failures.shard_gone(3, "ipc:///run/gt/s3", how, "push_grad of 'emb'")
    assert failures.lost_shard(f"loss 5.1\n{said}\n") == 3
    assert observation.lost_shard(trainer_pod(0, said)) == 3
    assert failures.lost_shard("error: shard 3 refused the token") is None


def test_a_lost_shard_waits_for_its_servers_end_even_with_every_trainer_failed() -> None:
    """The kubelet reports the server's restart seconds after the trainers' ends: judged at once, the
    trainer was named. Bounded by PEER_LOSS_GRACE (a hung server never ends)."""
    now = dt.datetime(2026, 11, 22, 11, 59, 45, tzinfo=dt.UTC)
    pods = [trainer_pod(0, LOST_1), trainer_pod(1, LOST_1)]
    quiet = {1: ("wn-shards-1", OLD, UP)}
    assert culprit_due(pods, pods, now, quiet) == observation.PEER_LOSS_GRACE - 5
    assert culprit_due(pods, pods, now, {1: server()}) is None  # seen: judged now
    later = now + dt.timedelta(seconds=observation.PEER_LOSS_GRACE)
    assert culprit_due(pods, pods, later, quiet) is None


def shard_restarted(c: Cluster, restarts: int = 1) -> None:
    """Shard 1's pod restarted by the kubelet (OOM-killed), both trainers failed on its loss."""
    c.ready_shards(ready=1, restarts=restarts)
    status = c.children[f"Pod/{NAME}-shards-1"]["status"]
    end = {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-11-22T11:59:50Z"}
    status["containerStatuses"][0]["lastState"] = {"terminated": end}
    c.trainers("Failed")
    for r in range(2):
        said = c.children[f"Pod/{NAME}-trainer-{r}"]["status"]["containerStatuses"][0]["state"]["terminated"]
        said.update(message=LOST_1, finishedAt="2026-11-22T11:59:52Z")


def test_the_stage_names_the_shard_pod_and_counts_one_restart_of_the_backoff_limit() -> None:
    """backoffLimit 1: the first loss restarts the trainers (status.restarts 1, as the launcher counts a
    dead server's restart), the second fails the training; both times the shard pod is named, and its
    own restarts are the kubelet's (shards[].restarts), counted once by role."""
    c = Cluster(training())
    to_training(c)
    before = dict(c.body["status"])
    shard_restarted(c)
    p = c.step()
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert kinds(p, "delete") == [f"Pod/{NAME}-trainer-0", f"Pod/{NAME}-trainer-1"]
    said = cond(p, "TrainersReady")["message"]
    assert said.startswith(f"shard server 1 (pod {NAME}-shards-1) ended (OOMKilled, exit code 137)")
    assert said.endswith("restart 1/1 from the last checkpoint")
    event = next(e for e in p.events if e.reason == "TrainerFailed")
    assert event.message.startswith("shard server 1 (pod wn-shards-1)")
    assert p.status["shards"][1]["restarts"] == 1
    assert restarts(before, p.status) == {"trainer": 1, "shard": 1}
    c.ready_shards(ready=2, restarts=1)  # the server restored the checkpoint
    p = c.step()  # the old attempt's pods gone: the next made
    assert sorted(
        o.obj["metadata"]["labels"]["graphtrain.io/attempt"]
        for o in p.actions
        if o.verb == "create" and o.obj["kind"] == "Pod"
    ) == ["1", "1"]
    c.trainers("Running", attempt=1)
    assert c.step().status["phase"] == "Training"
    shard_restarted(c, restarts=2)
    p = c.step()
    assert p.status["phase"] == "Failed" and p.status["restarts"] == 1
    assert cond(p, "Failed")["reason"] == "BackoffLimitExceeded"
    assert cond(p, "Failed")["message"].startswith(f"shard server 1 (pod {NAME}-shards-1)")


def test_a_worker_pods_restarted_sidecar_is_named() -> None:
    """Partition locality: the server is a worker pod's sidecar, restarted in place by the kubelet; the
    trainer containers that lost it fail, and the worker pod's sidecar is named."""
    from tests.operator.test_workers import WORKERS, body, container_state, to_workers

    c = Cluster(body())
    to_workers(c)
    container_state(c, 0, {})
    container_state(c, 1, {})
    assert c.step().status["phase"] == "Training"
    end = {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-11-22T11:59:50Z"}
    ended = {"exitCode": 1, "reason": "Error", "message": LOST_1, "finishedAt": "2026-11-22T11:59:52Z"}
    container_state(c, 0, {"trainer-0": {"terminated": ended}})
    container_state(c, 1, {}, sidecar={"restartCount": 1, "lastState": {"terminated": end}})
    p = c.step()
    assert p.status["phase"] == "Restarting" and kinds(p, "delete") == WORKERS
    said = cond(p, "TrainersReady")["message"]
    assert said.startswith(f"shard server 1 (pod {WORKERS[1].removeprefix('Pod/')}) ended (OOMKilled"), said
