"""End to end through the operator: a private API server, `graphtrain operator` as a process
(tests/e2e/cluster.py), and the pod runner (tests/podrunner) running the pods it makes.

A private server per module, as tests/chart/test_rbac.py has: the session's in-process operator
(tests/operator) watches every namespace of the shared server and would reconcile these trainings too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import k8s
from tests.e2e.cluster import Cluster, operator_cluster
from tests.images import test_images as images_test

ROOT = Path(__file__).resolve().parents[2]
IMAGE = images_test.IMAGES["runtime"]  # localhost/graphtrain:ci, built by tests/images' recipe
OPERATOR_CONFIG = f"""
images: {{runtime: "{IMAGE}", cuda: "{IMAGE}", pullPolicy: Never}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request) -> Iterator[Cluster]:
    """A private API server with the CRD, and the operator running against it as the chart runs it (a
    process with a config file, the test module's OPERATOR_CONFIG if it has one; health and metrics on
    free loopback ports)."""
    config = getattr(request.module, "OPERATOR_CONFIG", OPERATOR_CONFIG)
    with operator_cluster(tmp_path_factory.mktemp("e2e"), config) as running:
        yield running


@pytest.fixture(scope="session")
def runtime_image() -> str:
    """The runtime image built from this checkout by tests/images' recipe (podman's layer cache makes
    it seconds when tests/images built it already in this session)."""
    images_test.build_base()
    images_test.build("runtime", IMAGE)
    return IMAGE


@pytest.fixture(scope="session")
def nations_reference(tmp_path_factory) -> float:
    """The test MRR of an undisturbed `graphtrain run` of examples/nations-transe.yaml (about 45 s here),
    run once for every test that compares a training through the operator with it: checkpoints and
    runPolicy, which those tests change, do not enter the computation."""
    return graphtrain_run_mrr(
        ROOT / "examples" / "nations-transe.yaml", tmp_path_factory.mktemp("ref") / "run"
    )


def graphtrain_run_mrr(spec: Path, run_dir: Path) -> float:
    """The test MRR of `graphtrain run` of a KGE spec (about 30 to 60 s for Nations TransE here)."""
    graphtrain = str(Path(sys.executable).parent / "graphtrain")
    res = subprocess.run(
        [graphtrain, "run", str(spec), "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stderr[-3000:]
    progress = json.loads((run_dir / "status.json").read_text())["progress"]
    assert progress["evalMetric"] == "test_mrr"
    return float(progress["evalValue"])


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


def no_errors(runner: Any) -> None:
    """A runner that failed to run a pod fails the test now, not at its timeout."""
    assert not runner.errors, runner.errors[-3:]


def fail_fast(runner: Any) -> Callable[[dict], None]:
    """wait_phase's on_poll: no_errors on every poll."""
    return lambda _body: no_errors(runner)
