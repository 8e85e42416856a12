"""A partition Job or shard-server StatefulSet whose controller cannot make its pods: a ResourceQuota too
small for them, a LimitRange whose max is below the spec's requests, Pod Security (for a Job or a
StatefulSet the API server only warns about the template; the pods its controller makes are refused).
Only the workload's events said so (FailedCreate), so the training read "job ... is running" or "0/2
shard servers ready" for ever. Now the stage's condition names the workload (PodsNotStarting); a Job
that never made a pod fails the training after runPolicy.startTimeoutSeconds (StartTimeout), as a pod
that cannot start does."""

from __future__ import annotations

import datetime as dt

from graphtrain.operator.observation import UNMADE_GRACE, iso, key
from tests.operator.reconcile_cluster import NAME, NOW, Cluster, cond, training


def created(c: Cluster, kind: str, name: str, at: dt.datetime = NOW) -> None:
    c.children[key(kind, name)]["metadata"]["creationTimestamp"] = iso(at)


def after(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


def test_a_partition_job_that_makes_no_pod_is_named_then_times_out() -> None:
    c = Cluster(training(**{"runPolicy.startTimeoutSeconds": 300}))
    c.step()
    created(c, "Job", f"{NAME}-partition")
    c.now = after(UNMADE_GRACE - 1)  # a Job's controller has a moment to make its pod
    assert cond(c.step(), "PartitionReady")["message"] == f"job {NAME}-partition is running"
    c.now = after(UNMADE_GRACE + 1)
    p = c.step()
    said = cond(p, "PartitionReady")
    assert (said["status"], said["reason"], p.status["phase"]) == ("False", "PodsNotStarting", "Partitioning")
    assert said["message"] == (
        f"job {NAME}-partition: job {NAME}-partition: NoPod: has made no pod (a quota, LimitRange or Pod "
        f"Security refusal is in `kubectl describe job {NAME}-partition`)"
    )
    assert any(e.reason == "PodsNotStarting" and e.type.value == "Warning" for e in p.events)
    c.now = after(300)
    p = c.step()
    assert p.status["phase"] == "Failed"
    failed = cond(p, "Failed")
    assert failed["reason"] == "StartTimeout"
    assert failed["message"].startswith(f"job {NAME}-partition could not start for 300 s ")


def test_a_job_counts_from_its_start_not_from_a_suspension() -> None:
    """Held suspended (Kueue) past the start timeout and resumed: its controller sets startTime anew,
    and its pod, a moment away, must not find the training failed."""
    c = Cluster(training(**{"runPolicy.startTimeoutSeconds": 300}))
    c.step()
    created(c, "Job", f"{NAME}-partition")
    c.children[key("Job", f"{NAME}-partition")]["status"] = {"startTime": iso(after(3600))}
    c.now = after(3601)
    p = c.step()
    assert p.status["phase"] == "Partitioning"
    assert cond(p, "PartitionReady")["message"] == f"job {NAME}-partition is running"


def test_a_job_with_a_pod_or_suspended_or_that_had_one_is_not_named() -> None:
    for status, suspend, pod in [({}, False, True), ({}, True, False), ({"failed": 1}, False, False)]:
        c = Cluster(training())
        c.step()
        created(c, "Job", f"{NAME}-partition")
        job = c.children[key("Job", f"{NAME}-partition")]
        job["status"], job["spec"]["suspend"] = status, suspend
        if pod:
            c.pod(f"{NAME}-partition-x1", "partition", "Running")
        c.now = after(3600)
        said = cond(c.step(), "PartitionReady")
        assert said["message"] == f"job {NAME}-partition is running", (status, suspend, pod)


def test_a_statefulset_missing_pods_is_named_with_no_timeout() -> None:
    c = Cluster(training())
    c.step()
    c.finish_partition()
    c.step()  # the shard servers' StatefulSet
    created(c, "StatefulSet", f"{NAME}-shards")
    c.pod(f"{NAME}-shards-0", "shards", "Running", conditions=[{"type": "Ready", "status": "True"}])
    c.now = after(UNMADE_GRACE - 1)
    assert cond(c.step(), "ShardsReady")["reason"] == "Waiting"
    c.now = after(86400)  # a day: still named, never failed (when a pod went missing is unknown)
    p = c.step()
    said = cond(p, "ShardsReady")
    assert said["reason"] == "PodsNotStarting" and p.status["phase"] != "Failed"
    assert f"statefulset {NAME}-shards: PodsMissing: has made 1 of its 2 pods" in said["message"]
    assert f"kubectl describe statefulset {NAME}-shards" in said["message"]
    c.ready_shards()  # the quota raised: both made and ready
    assert cond(c.step(), "ShardsReady")["status"] == "True"
