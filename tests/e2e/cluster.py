"""A private API server with the CRD and `graphtrain operator` running against it as the chart runs it:
what tests/e2e's `cluster` fixture and bench/operator_wordnet.py start (a private server, since the
session's in-process operator of tests/operator watches every namespace of the shared one)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from graphtrain.runtime.data.cache import data_dir
from tests import k8s


@dataclass
class Cluster:
    kubeconfig: str
    kube: k8s.Kubectl
    operator_log: Path


@contextlib.contextmanager
def operator_cluster(tmp: Path, config: str, timer: float = 1) -> Iterator[Cluster]:
    """Start etcd and the API server under `tmp`, install the CRD and the stand-ins, and run the
    operator as a process with `config` (its YAML; health and metrics on free loopback ports, a reconcile
    timer of `timer` seconds: 1 for tests, whose waits it shortens; the operator's own default is 15);
    stop the operator (SIGTERM, then SIGKILL after 30 s) and the server on leaving."""
    bin_dir = k8s.testenv_bin()
    run = tmp / "apiserver"
    proc = None
    try:
        kubeconfig = k8s.start(run, bin_dir)
        kube = k8s.kubectl(kubeconfig)
        k8s.install_crd(kube)
        k8s.serve_stand_ins(kube, k8s.NETWORK_POLICY)
        config_file = tmp / "operator.yaml"
        config_file.write_text(config)
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        env.update(KUBECONFIG=kubeconfig, GRAPHTRAIN_OPERATOR_TIMER=str(timer), POD_NAMESPACE="default")
        log = tmp / "operator.log"
        cmd = [
            str(Path(sys.executable).parent / "graphtrain"),
            "operator",
            "--config",
            str(config_file),
            "--health-address=127.0.0.1:0",
            "--metrics-address=127.0.0.1:0",
        ]
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        yield Cluster(kubeconfig, kube, log)
    finally:
        if proc is not None:  # only the operator started here
            k8s.terminate(proc, grace=30)
        k8s.stop(run)


def seed_claim(runner_root: Path, ns: str, claim: str, dataset: str) -> None:
    """A dataset from this machine's cache on a claim before the pod runner binds it (it keeps a claim
    directory that exists): what `graphtrain data fetch NAME --data-dir <claim>/data` pre-seeds for an
    offline operator (`storage.offline`). Fetched into the cache first (at once when it is there): on a
    fresh machine no earlier test may have fetched it."""
    fetched = subprocess.run(
        [str(Path(sys.executable).parent / "graphtrain"), "data", "fetch", dataset],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fetched.returncode == 0, fetched.stderr
    target = runner_root / "claims" / ns / claim
    shutil.copytree(data_dir() / "datasets" / dataset, target / "data" / "datasets" / dataset)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)  # any pod's uid reads and writes there


def final_progress(kube: k8s.Kubectl, ns: str, name: str, metric: str, timeout: float = 60) -> dict:
    """status.progress once it carries the final `metric` (e.g. test_mrr): rank 0's last report can reach
    the operator after the trainers' end made the training Succeeded (the operator takes it then)."""
    deadline = time.monotonic() + timeout
    progress: dict = {}
    while time.monotonic() < deadline:
        progress = (json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json")).get("status") or {}).get(
            "progress"
        ) or {}
        if progress.get("evalMetric") == metric:
            return progress
        time.sleep(0.5)
    raise AssertionError(
        f"{ns}/{name}: no final {metric} in status.progress after {timeout:.0f} s: {progress}"
    )
