"""End to end through the operator: a private API server, `graphtrain operator` as a process, and the
pod runner (tests/podrunner) running the pods it makes.

A private server per module, as tests/chart/test_rbac.py has: the session's in-process operator
(tests/operator) watches every namespace of the shared server and would reconcile these trainings too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import k8s
from tests.images import test_images as images_test

ROOT = Path(__file__).resolve().parents[2]
IMAGE = images_test.IMAGES["runtime"]  # localhost/graphtrain:ci, built by tests/images' recipe
OPERATOR_CONFIG = f"""
images: {{runtime: "{IMAGE}", cuda: "{IMAGE}", pullPolicy: Never}}
"""


@dataclass
class Cluster:
    kubeconfig: str
    kube: k8s.Kubectl
    operator_log: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request) -> Iterator[Cluster]:
    """A private API server with the CRD, and the operator running against it as the chart runs it (a
    process with a config file, the test module's OPERATOR_CONFIG if it has one; health and metrics on
    free loopback ports)."""
    bin_dir = k8s.testenv_bin()
    tmp = tmp_path_factory.mktemp("e2e")
    run = tmp / "apiserver"
    proc = None
    try:
        kubeconfig = k8s.start(run, bin_dir)
        kube = k8s.kubectl(kubeconfig)
        k8s.install_crd(kube)
        k8s.serve_stand_ins(kube, k8s.NETWORK_POLICY)
        config = tmp / "operator.yaml"
        config.write_text(getattr(request.module, "OPERATOR_CONFIG", OPERATOR_CONFIG))
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        env.update(KUBECONFIG=kubeconfig, GRAPHTRAIN_OPERATOR_TIMER="1", POD_NAMESPACE="default")
        log = tmp / "operator.log"
        cmd = [
            str(Path(sys.executable).parent / "graphtrain"),
            "operator",
            "--config",
            str(config),
            "--health-address=127.0.0.1:0",
            "--metrics-address=127.0.0.1:0",
        ]
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        yield Cluster(kubeconfig, kube, log)
    finally:
        if proc is not None and proc.poll() is None:  # only the operator this fixture started
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        k8s.stop(run)


@pytest.fixture(scope="session")
def runtime_image() -> str:
    """The runtime image built from this checkout by tests/images' recipe (podman's layer cache makes
    it seconds when tests/images built it already in this session)."""
    images_test.build_base()
    images_test.build("runtime", IMAGE)
    return IMAGE


def gtr(kube: k8s.Kubectl, ns: str, name: str) -> dict:
    return json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))


def events(kube: k8s.Kubectl, ns: str, name: str) -> list[dict]:
    items = json.loads(kube("get", "events", "-n", ns, "-o", "json"))["items"]
    mine = [e for e in items if (e.get("involvedObject") or {}).get("name") == name]
    return sorted(
        mine, key=lambda e: (e.get("firstTimestamp") or e.get("eventTime") or "", e["metadata"]["name"])
    )


def wait_phase(
    kube: k8s.Kubectl,
    ns: str,
    name: str,
    until: set[str],
    timeout: float,
    seen: list[str],
    on_poll: Callable[[dict], None] = lambda body: None,
) -> dict:
    """Poll the training every half second until its phase is in `until`; every phase seen, in order,
    is appended to `seen`. Raises with the last status on timeout."""
    deadline = time.monotonic() + timeout
    body: dict = {}
    while time.monotonic() < deadline:
        body = gtr(kube, ns, name)
        phase = (body.get("status") or {}).get("phase")
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
        on_poll(body)
        if phase in until:
            return body
        time.sleep(0.5)
    raise AssertionError(
        f"{ns}/{name} not {until} after {timeout:.0f} s: {json.dumps(body.get('status'))[:3000]}"
    )


def fail_fast(runner: Any) -> Callable[[dict], None]:
    """wait_phase's on_poll: a runner that failed to run a pod fails the test now, not at its timeout."""

    def check(body: dict) -> None:
        assert not runner.errors, runner.errors[-3:]

    return check
