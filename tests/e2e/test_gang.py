"""Gang scheduling end to end (issue 46): two Nations trainings through the operator against a pod runner
whose scheduler has room for 5 running pods, where each training needs 4 at once (2 shard servers, 2
trainers). With `scheduling.gang` (the coscheduling plugin's PodGroup, its published schema installed)
they run one after the other and both succeed; without it, the same setup ends half-started: each
training holds pods while a trainer it needs waits for a place the other holds, the state gang
scheduling prevents."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests import k8s
from tests.e2e.cluster import seed_claim
from tests.e2e.conftest import Cluster, nations_spec
from tests.podrunner import PodRunner

pytestmark = pytest.mark.timeout(600)
CAPACITY = 5  # running pods the runner's scheduler binds at once: one training's 4, not two
CRDS = Path(__file__).resolve().parents[1] / "operator" / "crds"
GANG = {"gang": True, "schedulerName": "scheduler-plugins-scheduler"}


def apply_two(cluster: Cluster, runner: PodRunner, ns: str, tmp: Path, scheduling: dict | None) -> list[str]:
    """Nations trainings a and b (3 epochs, 2 shard servers x 2 trainers) applied at once."""
    kube = cluster.kube
    kube("create", "namespace", ns)
    names = ["nations-a", "nations-b"]
    for name in names:
        seed_claim(runner.root, ns, f"{name}-data", "nations")
        doc = yaml.safe_load(nations_spec(tmp / f"{name}.yaml", epochs=3, locality="none").read_text())
        doc["metadata"]["name"] = name
        if scheduling is not None:
            doc["spec"]["scheduling"] = scheduling
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        kube("apply", "-n", ns, "-f", str(tmp / f"{name}.yaml"))
    return names


def pods_of(kube: k8s.Kubectl, ns: str, name: str) -> list[dict]:
    items = json.loads(kube("get", "pods", "-n", ns, "-l", f"graphtrain.io/training={name}", "-o", "json"))
    return [p for p in items["items"] if p["metadata"]["labels"].get("graphtrain.io/role") != "partition"]


def bound(pod: dict) -> bool:
    conds = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("PodScheduled", {}).get("status") == "True"


def test_two_gangs_beyond_capacity_run_one_after_the_other(cluster: Cluster, tmp_path: Path) -> None:
    kube, ns = cluster.kube, "gang"
    for crd in sorted(CRDS.glob("*.yaml")):
        kube("apply", "-f", str(crd))
    kube("wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io", "--timeout=60s")
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner", capacity=CAPACITY) as runner:
        names = apply_two(cluster, runner, ns, tmp_path, GANG)
        first_bound: dict[str, float] = {}
        succeeded: dict[str, float] = {}
        deadline = time.monotonic() + 540
        while len(succeeded) < 2 and time.monotonic() < deadline:
            assert not runner.errors, runner.errors[-3:]
            for name in names:
                if name not in first_bound and any(bound(p) for p in pods_of(kube, ns, name)):
                    first_bound[name] = time.monotonic()
                phase = (
                    json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json")).get("status") or {}
                ).get("phase")
                assert phase != "Failed", f"{name} failed"
                if phase == "Succeeded" and name not in succeeded:
                    succeeded[name] = time.monotonic()
            time.sleep(0.5)
        assert set(succeeded) == set(names), (succeeded, first_bound)
        one, two = sorted(names, key=lambda n: first_bound[n])
        # no pod of the second was bound before the first had ended (its servers gone with its success)
        assert first_bound[two] >= succeeded[one], (first_bound, succeeded)
        for name in names:  # every pod joined its training's PodGroup
            groups = {
                p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in pods_of(kube, ns, name)
            }
            assert groups == {f"{name}-gang"}, groups


def test_without_gang_the_same_two_end_half_started(cluster: Cluster, tmp_path: Path) -> None:
    """What gang scheduling prevents, documented: pods bound one by one fill the 5 places with both
    trainings' shard servers and one trainer, and each training waits for a place the other holds."""
    kube, ns = cluster.kube, "no-gang"
    with PodRunner(cluster.kubeconfig, mode="process", root=tmp_path / "runner", capacity=CAPACITY) as runner:
        names = apply_two(cluster, runner, ns, tmp_path, None)

        def half_started() -> bool:
            pods = [p for n in names for p in pods_of(kube, ns, n)]
            trainers = [p for p in pods if p["metadata"]["labels"].get("graphtrain.io/role") == "trainer"]
            waiting = [p for p in trainers if not bound(p)]
            return sum(bound(p) for p in pods) == CAPACITY and len(trainers) == 4 and len(waiting) >= 2

        deadline = time.monotonic() + 300
        while not half_started():
            assert time.monotonic() < deadline, "never reached the half-started state"
            assert not runner.errors, runner.errors[-3:]
            time.sleep(0.5)
        time.sleep(10)  # and it stays so: neither training can go on
        assert half_started()
        for name in names:
            body = json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))
            conds = {c["type"]: c for c in body["status"]["conditions"]}
            assert conds["TrainersReady"]["status"] == "False", conds["TrainersReady"]
            assert body["status"]["phase"] not in ("Succeeded", "Failed")
        for name in names:
            kube("delete", "gtr", name, "-n", ns, "--wait=false")
