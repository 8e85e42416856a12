"""Operator benchmark against a real API server (../shared/k8s-testenv, or $GRAPHTRAIN_TEST_KUBECONFIG).

1. Latency: GraphTrainings created one at a time; time from the create call until every child of the
   Partitioning phase exists (ConfigMaps, Secret, RBAC, claim, partition Job): p50 / p99.
2. Burst: 100 GraphTrainings created at once; this script plays the Job controller (marks every
   partition Job complete as soon as it appears) and waits until all 100 reach Starting (shard
   StatefulSet created). Reports the time and any training that never got there.
3. Deletion: all 100 deleted at once (the API server has no garbage collector: the operator's
   finalizer deletes the children); the time until every GraphTraining is gone, and every child of
   every kind left behind (none but the data claims, kept by storage.whenDeleted: Retain).

The operator runs as `graphtrain operator` in its own process, as in a pod.

    python bench/operator_scale.py [--latency 30] [--burst 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kubernetes
from kubernetes.dynamic import DynamicClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests import k8s  # noqa: E402 - the test server and its stand-ins, as the tests start them

CHILDREN = [
    ("v1", "ConfigMap", "config"),
    ("v1", "ConfigMap", "progress"),
    ("v1", "Secret", "token"),
    ("v1", "ServiceAccount", "trainer"),
    ("rbac.authorization.k8s.io/v1", "Role", "trainer"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "trainer"),
    ("v1", "PersistentVolumeClaim", "data"),
    ("batch/v1", "Job", "partition"),
]


def body(name: str) -> dict:
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": name},
        "spec": {
            "graph": {"dataset": "wordnet"},
            "partition": {"parts": 2},
            "embeddings": [{"name": "node", "dim": 16}],
            "model": {"nodeEmbedding": "node", "featureProjection": 64},
            "trainers": {"replicas": 2},
        },
    }


def counts(dyn: DynamicClient, ns: str) -> dict[str, set[str]]:
    """Names of every child kind present, by kind/suffix."""
    out: dict[str, set[str]] = {}
    for api, kind, _ in CHILDREN + [("apps/v1", "StatefulSet", "shards")]:
        items = dyn.resources.get(api_version=api, kind=kind).get(namespace=ns).items
        out[kind] = {i.metadata.name for i in items}
    return out


ALL_KINDS = (
    CHILDREN[:1]
    + CHILDREN[2:]
    + [
        ("v1", "Service", ""),
        ("networking.k8s.io/v1", "NetworkPolicy", ""),
        ("policy/v1", "PodDisruptionBudget", ""),
        ("apps/v1", "StatefulSet", ""),
        ("v1", "Pod", ""),
    ]
)


def leftovers(dyn: DynamicClient, ns: str) -> list[str]:
    """Every object of a child kind labelled as some training's child."""
    out = []
    for api, kind, _ in ALL_KINDS:
        res = dyn.resources.get(api_version=api, kind=kind)
        out += [
            f"{kind}/{i.metadata.name}"
            for i in res.get(namespace=ns, label_selector="graphtrain.io/training").items
        ]
    return out


def complete(dyn: DynamicClient, ns: str, names: set[str], now: dict[str, float]) -> dict[str, float]:
    """Names whose every base child exists, with the time first seen so."""
    c = counts(dyn, ns)
    for n in names - now.keys():
        if all(f"{n}-{suffix}" in c[kind] for _, kind, suffix in CHILDREN):
            now[n] = time.perf_counter()
    return now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=int, default=30)
    ap.add_argument("--burst", type=int, default=100)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gt-opbench-"))
    kubeconfig = os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG")
    started = not kubeconfig
    if not kubeconfig:  # the test server, started as the tests start it
        kubeconfig = k8s.start(tmp, k8s.testenv_bin())
    env = {**os.environ, "KUBECONFIG": kubeconfig, "GRAPHTRAIN_OPERATOR_TIMER": "5"}
    kube = k8s.kubectl(kubeconfig)
    k8s.install_crd(kube)
    k8s.serve_stand_ins(kube, k8s.NETWORK_POLICY)  # the operator makes NetworkPolicies for shard servers
    op = subprocess.Popen(
        [sys.executable, "-m", "graphtrain.cli", "operator"]
        + ["--health-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"],
        env=env,
        stdout=open(tmp / "operator.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    try:
        kubernetes.config.load_kube_config(config_file=kubeconfig)
        dyn = DynamicClient(kubernetes.client.ApiClient())
        gtr = dyn.resources.get(api_version="graphtrain.io/v1alpha1", kind="GraphTraining")
        core = kubernetes.client.CoreV1Api()
        for ns in ("lat", "burst"):
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        time.sleep(3)  # the operator's watches start

        lat = []
        for i in range(a.latency):
            name = f"l{i}"
            t0 = time.perf_counter()
            gtr.create(body=body(name), namespace="lat")
            seen: dict[str, float] = {}
            while name not in complete(dyn, "lat", {name}, seen):
                time.sleep(0.01)
            lat.append(seen[name] - t0)
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
        print(
            f"create -> all {len(CHILDREN)} children, {a.latency} trainings one at a time: "
            f"p50 {statistics.median(lat) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"max {lat[-1] * 1000:.0f} ms"
        )

        names = {f"b{i}" for i in range(a.burst)}
        t0 = time.perf_counter()
        for n in sorted(names):
            gtr.create(body=body(n), namespace="burst")
        created = time.perf_counter() - t0
        jobs = dyn.resources.get(api_version="batch/v1", kind="Job")
        done: set[str] = set()
        starting: set[str] = set()
        deadline = time.perf_counter() + 600
        children_at: dict[str, float] = {}
        while len(starting) < len(names) and time.perf_counter() < deadline:
            complete(dyn, "burst", names, children_at)
            for j in jobs.get(namespace="burst").items:
                if j.metadata.name not in done:
                    jobs.status.patch(
                        body={
                            "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
                        },
                        name=j.metadata.name,
                        namespace="burst",
                        content_type="application/merge-patch+json",
                    )
                    done.add(j.metadata.name)
            for item in gtr.get(namespace="burst").items:
                if (item.get("status") or {}).get("phase") == "Starting":
                    starting.add(item.metadata.name)
            time.sleep(0.2)
        total = time.perf_counter() - t0
        missed = sorted(names - starting)
        spans = sorted(children_at[n] - t0 for n in children_at)
        print(
            f"burst: {a.burst} created in {created:.1f} s; all children present for {len(children_at)} "
            f"after {spans[-1]:.1f} s; Starting: {len(starting)}/{a.burst} after {total:.1f} s; "
            f"missed: {missed or 'none'}"
        )

        t0 = time.perf_counter()
        kube("delete", "gtr", "--all", "-n", "burst", "--wait=false")  # one deletecollection request
        deadline = time.perf_counter() + 600
        while gtr.get(namespace="burst").items and time.perf_counter() < deadline:
            time.sleep(0.2)
        gone = time.perf_counter() - t0
        left_gtr = len(gtr.get(namespace="burst").items)
        time.sleep(10)  # two operator timer periods: a child made again after deletion would show
        left = leftovers(dyn, "burst")
        kept = [c for c in left if c.startswith("PersistentVolumeClaim/") and c.endswith("-data")]
        left = [c for c in left if c not in kept]
        print(
            f"delete all {a.burst} at once: GraphTrainings gone after {gone:.1f} s ({left_gtr} left); "
            f"10 s later: {len(kept)} data claims kept (storage.whenDeleted: Retain, the default), "
            f"other children left: {len(left)}{' ' + str(left[:10]) if left else ''}"
        )
    finally:
        op.terminate()
        op.wait(timeout=30)
        if started:
            k8s.stop(tmp)


if __name__ == "__main__":
    main()
