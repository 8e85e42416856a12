"""The operator against a real API server: children with ownerReferences, phases, conditions, events,
restarts, and invalid specs refused by the CRD schema or ending with SpecValid False."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import yaml

from tests.operator.conftest import get, wait_for

pytestmark = pytest.mark.timeout(240)

SPEC = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {{name: {name}}}
spec:
  graph: {{dataset: wordnet}}
  partition: {{parts: 2}}
  embeddings: [{{name: node, dim: 16}}]
  model: {{nodeEmbedding: node, featureProjection: 64{extra_model}}}
  training: {{epochs: 2}}
  trainers: {{replicas: 2}}
  runPolicy: {{backoffLimit: 1}}
  placement: {{locality: none}}  # the StatefulSet layout; worker pods: test_workers_apiserver.py
"""


@pytest.fixture
def ns(kube) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name


def phase(kube, name: str, ns: str) -> str:
    return kube("get", "gtr", name, "-n", ns, "-o", "jsonpath={.status.phase}")


def conditions(kube, name: str, ns: str) -> dict[str, dict]:
    st = get(kube, "gtr", name, ns).get("status") or {}
    return {c["type"]: c for c in st.get("conditions") or []}


def status_patch(kube, kind: str, name: str, ns: str, status: dict) -> None:
    kube(
        "patch",
        kind,
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def names_of(kube, kind: str, ns: str, training: str) -> list[str]:
    out = kube("get", kind, "-n", ns, "-l", f"graphtrain.io/training={training}", "-o", "name")
    return sorted(line.split("/", 1)[1] for line in out.split())


def test_a_training_goes_through_every_phase(kube, operator, ns: str) -> None:
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="wn", extra_model=""))
    assert wait_for(lambda: phase(kube, "wn", ns) == "Partitioning", what="Partitioning")
    uid = get(kube, "gtr", "wn", ns)["metadata"]["uid"]
    for kind, expected in [
        ("configmap", ["wn-config", "wn-progress"]),
        ("secret", ["wn-token"]),
        ("job", ["wn-partition"]),
        ("serviceaccount", ["wn-trainer"]),
        ("role", ["wn-trainer"]),
        ("rolebinding", ["wn-trainer"]),
    ]:
        assert names_of(kube, kind, ns, "wn") == expected, kind
        for n in expected:
            refs = get(kube, kind, n, ns)["metadata"]["ownerReferences"]
            assert refs[0]["uid"] == uid and refs[0]["controller"] is True
    assert names_of(kube, "persistentvolumeclaim", ns, "wn") == ["wn-data"]  # retained: owned by nothing

    # the Job controller and the kubelet: the partition pod succeeds with the stats as its message
    stats = {
        "algorithm": "metis",
        "parts": 2,
        "numNodes": 117659,
        "numEdges": 364552,
        "cutEdges": 5300,
        "edgeCutFraction": 0.029,
        "balance": {"nodes": 1.03},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "wn-partition-abcde",
            "labels": {
                "graphtrain.io/training": "wn",
                "graphtrain.io/role": "partition",
                "job-name": "wn-partition",
            },
        },
        "spec": {"containers": [{"name": "partition", "image": "x"}], "restartPolicy": "Never"},
    }
    job_uid = get(kube, "job", "wn-partition", ns)["metadata"]["uid"]
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "wn-partition", "uid": job_uid, "controller": True}
    ]
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(pod))
    status_patch(
        kube,
        "pod",
        "wn-partition-abcde",
        ns,
        {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "partition",
                    "ready": False,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "message": json.dumps(stats)}},
                }
            ],
        },
    )
    status_patch(
        kube,
        "job",
        "wn-partition",
        ns,
        {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    )
    assert wait_for(lambda: phase(kube, "wn", ns) == "Starting", what="Starting")
    st = get(kube, "gtr", "wn", ns)["status"]
    assert (
        st["partition"]["cutEdges"] == 5300
        and conditions(kube, "wn", ns)["PartitionReady"]["status"] == "True"
    )
    sts = get(kube, "statefulset", "wn-shards", ns)
    assert sts["spec"]["replicas"] == 2 and sts["metadata"]["ownerReferences"][0]["uid"] == uid
    assert get(kube, "service", "wn-shards", ns)["spec"]["clusterIP"] == "None"
    # from the operator's configuration file ($GRAPHTRAIN_OPERATOR_CONFIG: conftest.OPERATOR_CONFIG)
    pod = sts["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "memory"} and pod["priorityClassName"] == "graphtrain-shards"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["image"] == "localhost/graphtrain:ci"
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "8Gi"}
    claim = get(kube, "persistentvolumeclaim", "wn-data", ns)["spec"]
    assert claim["storageClassName"] == "nfs" and claim["resources"]["requests"]["storage"] == "20Gi"
    policy = get(kube, "networkpolicy", "wn-shards", ns)
    assert policy["metadata"]["ownerReferences"][0]["uid"] == uid
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "graphtrain.io/training": "wn",
        "graphtrain.io/role": "shards",
    }
    budget = get(kube, "poddisruptionbudget", "wn-shards", ns)
    assert budget["spec"]["maxUnavailable"] == 0 and budget["metadata"]["ownerReferences"][0]["uid"] == uid

    status_patch(kube, "statefulset", "wn-shards", ns, {"replicas": 2, "readyReplicas": 2})
    assert wait_for(lambda: phase(kube, "wn", ns) == "Training", what="Training")
    assert wait_for(
        lambda: names_of(kube, "pod", ns, "wn") == ["wn-partition-abcde", "wn-trainer-0", "wn-trainer-1"]
    )
    for r in range(2):
        status_patch(kube, "pod", f"wn-trainer-{r}", ns, {"phase": "Running"})
    assert wait_for(lambda: conditions(kube, "wn", ns).get("TrainersReady", {}).get("status") == "True")

    # rank 0 reports progress through its ConfigMap
    progress = {"epoch": 1, "epochs": 2, "step": 70, "loss": 0.7, "summary": "epoch 1/2"}
    kube(
        "patch",
        "configmap",
        "wn-progress",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"data": {"progress": json.dumps(progress)}}),
    )
    assert wait_for(lambda: (get(kube, "gtr", "wn", ns)["status"].get("progress") or {}).get("step") == 70)

    # a trainer fails: every rank is recreated (next attempt), counted in status.restarts
    status_patch(
        kube,
        "pod",
        "wn-trainer-1",
        ns,
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "ready": False,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        },
    )
    assert wait_for(lambda: get(kube, "gtr", "wn", ns)["status"].get("restarts") == 1, what="a restart")
    assert wait_for(
        lambda: all(
            get(kube, "pod", f"wn-trainer-{r}", ns)["metadata"]["labels"]["graphtrain.io/attempt"] == "1"
            for r in range(2)
        ),
        what="attempt 1 pods",
    )
    for r in range(2):
        status_patch(kube, "pod", f"wn-trainer-{r}", ns, {"phase": "Succeeded"})
    assert wait_for(lambda: phase(kube, "wn", ns) == "Succeeded", what="Succeeded")
    assert conditions(kube, "wn", ns)["Succeeded"]["status"] == "True"
    assert wait_for(lambda: names_of(kube, "statefulset", ns, "wn") == [], what="shards stopped")

    events = yaml.safe_load(kube("get", "events", "-n", ns, "-o", "yaml"))["items"]
    reasons = [e["reason"] for e in events if e["involvedObject"]["name"] == "wn"]
    for r in (
        "Partitioning",
        "Partitioned",
        "Starting",
        "AllReady",
        "Training",
        "TrainerFailed",
        "Restarting",
        "Succeeded",
    ):
        assert r in reasons, (r, reasons)
    printed = kube("get", "gtr", "wn", "-n", ns)
    assert "Succeeded" in printed.splitlines()[1] and "PHASE" in printed.splitlines()[0].upper()

    kube("delete", "gtr", "wn", "-n", ns, "--wait=true", "--timeout=60s")
    for kind in (
        "configmap",
        "secret",
        "job",
        "serviceaccount",
        "role",
        "rolebinding",
        "service",
        "pod",
        "networkpolicy",
        "poddisruptionbudget",
    ):  # deleted by the operator as the training goes (no finalizer waits for it: handlers.ended)
        assert wait_for(lambda kind=kind: names_of(kube, kind, ns, "wn") == [], what=f"no {kind} left")
    # storage.whenDeleted Retain (the default): the claim with the checkpoints stays, owned by nothing
    assert names_of(kube, "pvc", ns, "wn") == ["wn-data"]
    assert "ownerReferences" not in get(kube, "pvc", "wn-data", ns)["metadata"]


def test_a_training_deleted_mid_timer_reconcile_goes_at_once(kube, operator, ns: str, monkeypatch) -> None:
    """kopf held a deletion until a running timer handler returned and then rechecked only every
    settings.background.cancellation_polling seconds (60 by default): a GraphTraining deleted while
    its timer reconciled it stayed a minute (found by the RBAC test in CI). Now no finalizer holds it
    (no kopf timer, no delete handler): here a reconcile on a queue worker is held until the deletion
    has begun, as a slow API server would hold it; the training goes at once, and the children that
    reconcile may have made are deleted after it (handlers.ended takes the training's lock)."""
    from graphtrain.operator import handlers

    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="held", extra_model=""))
    assert wait_for(lambda: phase(kube, "held", ns) == "Partitioning", what="Partitioning")
    real, entered = handlers.reconcile, threading.Event()

    def deleting() -> bool:
        return kube("get", "gtr", "held", "-n", ns, "-o", "jsonpath={.metadata.deletionTimestamp}") != ""

    def held(namespace: str, name: str) -> None:
        worker = threading.current_thread().name.startswith("reconcile-")
        if name == "held" and worker and not entered.is_set():
            entered.set()
            wait_for(deleting, timeout=30, what="the deletion")
            time.sleep(1.0)  # kopf's deletion cycle has begun and found this timer still running
        real(namespace, name)

    monkeypatch.setattr(handlers, "reconcile", held)
    assert entered.wait(timeout=30), "the work queue never reconciled the training"
    kube("delete", "gtr", "held", "-n", ns, "--wait=false")
    kube("wait", "--for=delete", "gtr/held", "-n", ns, "--timeout=15s")  # 60 s before the fix
    assert wait_for(lambda: names_of(kube, "job", ns, "held") == [], what="the partition Job deleted")


def test_the_deadline_fails_a_training_and_stops_its_children(kube, operator, ns: str) -> None:
    """Nothing happens to the training but time: it fails with DeadlineExceeded, its partition job goes."""
    spec = SPEC.format(name="late", extra_model="").replace("{backoffLimit: 1}", "{activeDeadlineSeconds: 3}")
    kube("apply", "-n", ns, "-f", "-", input=spec)
    assert wait_for(lambda: names_of(kube, "job", ns, "late") == ["late-partition"], what="the partition job")
    assert wait_for(lambda: phase(kube, "late", ns) == "Failed", timeout=60, what="Failed")
    failed = conditions(kube, "late", ns)["Failed"]
    assert failed["reason"] == "DeadlineExceeded" and "activeDeadlineSeconds (3 s" in failed["message"]
    assert wait_for(lambda: names_of(kube, "job", ns, "late") == [], what="the job deleted")
    events = yaml.safe_load(kube("get", "events", "-n", ns, "-o", "yaml"))["items"]
    said = {(e["type"], e["reason"]) for e in events if e["involvedObject"]["name"] == "late"}
    assert {("Warning", "DeadlineExceeded"), ("Warning", "Failed"), ("Normal", "Partitioning")} <= said


def test_the_schema_refuses_a_bad_field_naming_it(kube, ns: str) -> None:
    bad = SPEC.format(name="bad", extra_model="").replace("parts: 2", "parts: 0")
    out = kube("apply", "-n", ns, "-f", "-", input=bad, check=False)
    assert "spec.partition.parts" in out and "greater than or equal to 1" in out
    assert kube("get", "gtr", "-n", ns, "-o", "name") == ""


def test_the_crd_refuses_a_cross_field_problem_before_the_operator_sees_it(kube, ns: str) -> None:
    """A spec breaking a rule (here fan-outs vs layers) is refused by the CRD's CEL rules, with the
    message `graphtrain validate` gives; the operator's SpecValid=False path is covered by
    tests/operator/test_reconcile_stages.py, and every rule by tests/operator/test_crd_validation.py."""
    out = kube(
        "apply", "-n", ns, "-f", "-", input=SPEC.format(name="odd", extra_model=", numLayers: 3"), check=False
    )
    assert "spec.training.fanouts: Invalid value: has 2 entries but model.numLayers is 3" in out
    assert kube("get", "gtr", "-n", ns, "-o", "name") == ""


def test_trainers_report_into_the_progress_config_map(kube, ns: str, monkeypatch) -> None:
    """What `graphtrain train --progress-configmap` does on every rank (rank 0 adds the progress)."""
    from graphtrain.contract import reporting
    from graphtrain.runtime.train.reporter import Reporter
    from graphtrain.runtime.train.sinks import progress_sinks
    from graphtrain.runtime.train.tally import TrainerProgress

    kube("create", "configmap", "p-progress", "-n", ns)
    monkeypatch.setenv("POD_NAMESPACE", ns)
    for rank in (0, 1):
        Reporter(rank, progress_sinks(None, rank, "p-progress"), echo=False).report(
            TrainerProgress(epoch=1, epochs=3, step=7 + rank)
        )
    data = get(kube, "configmap", "p-progress", ns)["data"]
    assert json.loads(data["rank-1"])["step"] == 8 and json.loads(data["rank-0"])["step"] == 7
    assert json.loads(data["progress"])["epochs"] == 3 and "rank-1" not in data["progress"]
    # what the operator reads back: the spec's Progress, the same schema as a local run's progress.json
    progress = reporting.training_progress(data)
    assert progress is not None and (progress.step, progress.summary) == (7, "epoch 1/3")
    assert reporting.rank_report(data, 1).updated_at  # the heartbeat the stall detection reads


def test_a_child_the_api_server_refuses_is_a_warning_event_not_a_traceback(
    kube, kubeconfig: str, ns: str, monkeypatch, caplog
) -> None:
    """k8s.apply: a create refused with 422 (an object made from a spec the CRD accepted but the API
    server does not) becomes one Warning event naming the child and the API's message and one log line;
    the other actions and the status are still written; the same refusal again is not said again."""
    from graphtrain.operator import k8s
    from graphtrain.operator.context import Action, Plan

    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    k8s.load_config()
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name="refused", extra_model=""))
    observed = k8s.observe(ns, "refused")
    assert observed is not None
    uid = observed.training["metadata"]["uid"]

    def cm(name: str, data: dict) -> dict:
        owner = {
            "apiVersion": "graphtrain.io/v1alpha1",
            "kind": "GraphTraining",
            "name": "refused",
            "uid": uid,
        }
        meta = {"name": name, "labels": {"graphtrain.io/training": "refused"}, "ownerReferences": [owner]}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

    plan = Plan(
        [
            Action("create", cm("refused_bad", {"k": "v"})),
            Action("create", cm("refused-ok", {"k": "v"})),
        ],
        {"phase": "Partitioning"},
        [],
    )
    with caplog.at_level("WARNING", logger="graphtrain.operator"):
        k8s.apply(plan, observed)
        k8s.apply(plan, observed)  # the next reconcile: refused alike, not said again
    made = names_of(kube, "configmap", ns, "refused")  # the session's operator may add the training's own
    assert "refused-ok" in made and "refused_bad" not in made, made
    lines = [r.getMessage() for r in caplog.records if "refused by the API server" in r.getMessage()]
    assert len(lines) == 1 and "ConfigMap/refused_bad" in lines[0] and "Invalid value" in lines[0], lines
    assert not any(r.exc_info for r in caplog.records)
    events = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
    warned = [e for e in events if e["reason"] == "ChildRefused"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning", warned
    assert warned[0]["message"].startswith("ConfigMap/refused_bad was refused by the API server: ")
    assert "\n" not in warned[0]["message"]


# ------------------------------------------------------------------------------ lifecycle (issue 17)


def apply_training(kube, ns: str, name: str, run_policy: str) -> None:
    """SPEC named `name` with `run_policy` as its runPolicy's fields."""
    spec = SPEC.format(name=name, extra_model="").replace("{backoffLimit: 1}", "{" + run_policy + "}")
    kube("apply", "-n", ns, "-f", "-", input=spec)


def partition_pod(kube, ns: str, name: str, status: dict) -> None:
    """The Job controller's pod of <name>-partition, with `status` (the kubelet's)."""
    job = f"{name}-partition"
    labels = {"graphtrain.io/training": name, "graphtrain.io/role": "partition", "job-name": job}
    controlled_pod(kube, ns, ("batch/v1", "Job", job), f"{job}-x", labels, "partition", status)


def controlled_pod(
    kube, ns: str, owner: tuple[str, str, str], pod: str, labels: dict, container: str, status: dict
) -> None:
    """Pod `pod` as the controller of `owner` (apiVersion, kind, name) makes it, with `status` (the
    kubelet's): the tests play the Job and StatefulSet controllers."""
    api, kind, name = owner
    ref = {"apiVersion": api, "kind": kind, "name": name, "controller": True}
    ref["uid"] = get(kube, kind.lower(), name, ns)["metadata"]["uid"]
    meta = {"name": pod, "labels": labels, "ownerReferences": [ref]}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": container}]},
    }
    kube("apply", "-n", ns, "-f", "-", input=json.dumps(body))
    status_patch(kube, "pod", pod, ns, status)


def to_training(kube, ns: str, name: str) -> None:
    """Partitioned, shards ready, both trainers running."""
    assert wait_for(lambda: names_of(kube, "job", ns, name) == [f"{name}-partition"], what="the job")
    status_patch(
        kube,
        "job",
        f"{name}-partition",
        ns,
        {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    )
    assert wait_for(lambda: names_of(kube, "statefulset", ns, name) == [f"{name}-shards"], what="the shards")
    status_patch(kube, "statefulset", f"{name}-shards", ns, {"replicas": 2, "readyReplicas": 2})
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]
    assert wait_for(lambda: set(trainers) <= set(names_of(kube, "pod", ns, name)), what="the trainers")
    for pod in trainers:
        status_patch(kube, "pod", pod, ns, {"phase": "Running"})
    assert wait_for(lambda: conditions(kube, name, ns).get("TrainersReady", {}).get("status") == "True")


def container(**state: object) -> list[dict]:
    return [{"name": "c", "ready": False, "restartCount": 0, "image": "x", "imageID": "", "state": state}]


def test_clean_up_ttl_and_a_retained_claim_reused_afresh(kube, operator, ns: str) -> None:
    """c: a failed training stops what still runs (cleanPodPolicy Running) and keeps the finished
    trainer for its logs; its TTL deletes it; its claim stays (whenDeleted Retain) and the training
    re-created with the name uses it without resuming the old one's work (its own directory)."""
    apply_training(kube, ns, "ttl", "backoffLimit: 0, ttlSecondsAfterFinished: 4")
    to_training(kube, ns, "ttl")
    first = get(kube, "gtr", "ttl", ns)["metadata"]["uid"]
    claim = get(kube, "pvc", "ttl-data", ns)["metadata"]
    assert "ownerReferences" not in claim
    killed = container(terminated={"exitCode": 137, "reason": "OOMKilled"})
    status_patch(kube, "pod", "ttl-trainer-1", ns, {"phase": "Failed", "containerStatuses": killed})
    assert wait_for(lambda: phase(kube, "ttl", ns) == "Failed", what="Failed")
    assert wait_for(
        lambda: names_of(kube, "pod", ns, "ttl") == ["ttl-trainer-1"], what="the running rank stopped"
    )
    assert names_of(kube, "statefulset", ns, "ttl") == [] and names_of(kube, "job", ns, "ttl") == [
        "ttl-partition"
    ]
    done = time.monotonic()
    kube("wait", "--for=delete", "gtr/ttl", "-n", ns, "--timeout=30s")  # the TTL, with no other event
    assert time.monotonic() - done >= 1.0  # not at once: completionTime has whole seconds
    assert wait_for(lambda: names_of(kube, "pod", ns, "ttl") == [], what="the children deleted")
    assert names_of(kube, "pvc", ns, "ttl") == ["ttl-data"]

    apply_training(kube, ns, "ttl", "backoffLimit: 0")
    assert wait_for(lambda: names_of(kube, "job", ns, "ttl") == ["ttl-partition"], what="the new job")
    second = get(kube, "gtr", "ttl", ns)["metadata"]["uid"]
    assert second != first
    assert get(kube, "pvc", "ttl-data", ns)["metadata"]["uid"] == claim["uid"]  # the same claim, reused
    args = get(kube, "job", "ttl-partition", ns)["spec"]["template"]["spec"]["containers"][0]["args"]
    out = args[args.index("--out") + 1]
    assert f"/runs/ttl/{second}/" in out and first not in out
    assert "Failed" not in conditions(kube, "ttl", ns)


def test_a_pod_that_cannot_start_is_named_then_fails_the_training(kube, operator, ns: str) -> None:
    """e: the partition pod in ImagePullBackOff: PartitionReady says so (pod, reason, message), not
    "job ... is running"; after startTimeoutSeconds the training fails with StartTimeout and the job goes."""
    apply_training(kube, ns, "stuck", "startTimeoutSeconds: 10")
    assert wait_for(lambda: names_of(kube, "job", ns, "stuck") == ["stuck-partition"], what="the job")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    said = 'Back-off pulling image "localhost/graphtrain:nope"'
    partition_pod(
        kube,
        ns,
        "stuck",
        {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": container(waiting={"reason": "ImagePullBackOff", "message": said}),
        },
    )
    partition = lambda: conditions(kube, "stuck", ns).get("PartitionReady", {})  # noqa: E731
    assert wait_for(lambda: partition().get("reason") == "PodsNotStarting", what="PodsNotStarting")
    assert partition()["message"] == f"job stuck-partition: pod stuck-partition-x: ImagePullBackOff: {said}"
    assert phase(kube, "stuck", ns) == "Partitioning"
    assert wait_for(lambda: phase(kube, "stuck", ns) == "Failed", timeout=30, what="StartTimeout")
    failed = conditions(kube, "stuck", ns)["Failed"]
    assert failed["reason"] == "StartTimeout" and "runPolicy.startTimeoutSeconds 10" in failed["message"]
    assert wait_for(lambda: names_of(kube, "job", ns, "stuck") == [], what="the job stopped")
    events = yaml.safe_load(kube("get", "events", "-n", ns, "-o", "yaml"))["items"]
    warned = {
        e["reason"] for e in events if e["involvedObject"]["name"] == "stuck" and e["type"] == "Warning"
    }
    assert {"PodsNotStarting", "StartTimeout"} <= warned


def test_a_stall_restarts_the_trainers_when_the_policy_says_so(kube, operator, ns: str) -> None:
    """f: stallPolicy Restart: a rank silent for stallTimeoutSeconds restarts every rank (attempt 1, a
    restart counted), the NoProgress event naming the rank."""
    policy = "backoffLimit: 1, stallTimeoutSeconds: 10, stallPolicy: Restart"
    apply_training(kube, ns, "stall", policy)
    to_training(kube, ns, "stall")
    # rank 1 started long ago and never reported (rank 0 has no start time yet: not judged)
    long_ago = {"phase": "Running", "startTime": "2020-01-01T00:00:00Z"}
    status_patch(kube, "pod", "stall-trainer-1", ns, long_ago)
    assert wait_for(lambda: get(kube, "gtr", "stall", ns)["status"].get("restarts") == 1, what="a restart")
    assert wait_for(
        lambda: (
            [
                get(kube, "pod", f"stall-trainer-{r}", ns)["metadata"]["labels"]["graphtrain.io/attempt"]
                for r in range(2)
            ]
            == ["1", "1"]
        ),
        what="attempt 1",
    )
    events = yaml.safe_load(kube("get", "events", "-n", ns, "-o", "yaml"))["items"]
    said = {e["reason"]: e["message"] for e in events if e["involvedObject"]["name"] == "stall"}
    assert "has not reported" in said["NoProgress"]  # the conditions of the moment are the restart's
    assert "runPolicy.stallPolicy is Restart; restart 1/1" in said["TrainerFailed"]
    assert get(kube, "gtr", "stall", ns)["status"]["restarts"] == 1  # once: attempt 1 is not stalled at once


def test_suspend_stops_the_pods_keeps_the_data_and_resumes(kube, operator, ns: str) -> None:
    """g: suspend true mid-training: trainers and shard servers go, claim, token, config and partition
    job stay, phase Suspended, no startTime; false: the shard servers and the same attempt's trainers
    come back."""
    apply_training(kube, ns, "sus", "backoffLimit: 1, activeDeadlineSeconds: 3600")
    to_training(kube, ns, "sus")
    kube("patch", "gtr", "sus", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    assert wait_for(lambda: phase(kube, "sus", ns) == "Suspended", what="Suspended")
    assert wait_for(lambda: names_of(kube, "pod", ns, "sus") == [], what="the trainers stopped")
    assert names_of(kube, "statefulset", ns, "sus") == []
    for kind, kept in [("pvc", ["sus-data"]), ("secret", ["sus-token"]), ("job", ["sus-partition"])]:
        assert names_of(kube, kind, ns, "sus") == kept, kind
    st = get(kube, "gtr", "sus", ns)["status"]
    assert "startTime" not in st and st["restarts"] == 0
    conds = conditions(kube, "sus", ns)
    assert conds["Suspended"]["status"] == "True"
    for kind, what in (("ShardsReady", "shard servers"), ("TrainersReady", "trainers")):  # kept, saying so
        assert (conds[kind]["status"], conds[kind]["reason"]) == ("False", "Stopped"), conds[kind]
        assert conds[kind]["message"] == f"{what} stopped: the training is suspended (spec.suspend)"
    kube("patch", "gtr", "sus", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    assert wait_for(
        lambda: names_of(kube, "statefulset", ns, "sus") == ["sus-shards"], what="the shards back"
    )
    resumed = conditions(kube, "sus", ns)["Suspended"]
    assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")
    assert get(kube, "gtr", "sus", ns)["status"].get("startTime")
    status_patch(kube, "statefulset", "sus-shards", ns, {"replicas": 2, "readyReplicas": 2})
    assert wait_for(
        lambda: names_of(kube, "pod", ns, "sus") == ["sus-trainer-0", "sus-trainer-1"],
        what="the trainers back",
    )
    assert get(kube, "pod", "sus-trainer-0", ns)["metadata"]["labels"]["graphtrain.io/attempt"] == "0"
    assert phase(kube, "sus", ns) == "Training"
