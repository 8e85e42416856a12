"""`graphtrain operator` on an API server that serves no GraphTraining it could handle: the CRD not
installed (helm install --skip-crds, a GitOps tool applying the CRD and the Deployment at once), or
being deleted. It started all the same: kopf warned once ("Unresolved resources cannot be served"),
served nothing, /readyz said "leading", and a CRD installed minutes later was not picked up (a training
created then had no status at all, until someone restarted the operator). Now it stops at once in one
line; the kubelet restarts it, and once the CRD is served it starts. On a private API server: the
session's has the CRD."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import k8s
from tests.operator.conftest import PROBE, wait_for

pytestmark = pytest.mark.timeout(120)
ESTABLISHED = {"conditions": [{"type": "Established", "status": "True"}]}
ABSENT = (
    "the API server serves no graphtrainings.graphtrain.io/v1alpha1: install the GraphTraining CRD first "
    "(helm installs it unless --skip-crds; kubectl apply -f charts/graphtrain/crds/)"
)
DELETING = "the CRD graphtrainings.graphtrain.io is being deleted: GraphTrainings cannot be patched"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Always a private API server, never the user's test cluster ($GRAPHTRAIN_TEST_KUBECONFIG): the
    tests delete its CRD."""
    run = tmp_path_factory.mktemp("crd-absent-apiserver")
    try:
        yield k8s.start(run, k8s.testenv_bin())
    finally:
        k8s.stop(run)


def operator(kubeconfig: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(sys.executable).parent / "graphtrain"), "operator"]
    cmd += ["--health-address=127.0.0.1:0", "--metrics-address=127.0.0.1:0"]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=30, env={"KUBECONFIG": kubeconfig, "PATH": ""}
    )


def test_the_operator_stops_in_one_line_without_the_crd(bare: str) -> None:
    out = operator(bare)
    assert out.returncode == 1, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()  # one line, no traceback
    assert line == (
        "error: the API server serves no graphtrainings.graphtrain.io/v1alpha1: install the GraphTraining "
        "CRD first (helm installs it unless --skip-crds; kubectl apply -f charts/graphtrain/crds/)"
    )


def test_the_operator_stops_in_one_line_while_the_crd_is_deleted(bare: str) -> None:
    """A CRD being deleted is served without patch (its instances wait for their finalizers: here one
    of the test's own, as an operator's would hold them), and kopf serves no resource it cannot patch."""
    kube = k8s.kubectl(bare)
    k8s.install_crd(kube)
    wait_for(  # Established, the group's discovery may lag behind (what kopf's rescan meets)
        lambda: "graphtrainings" in kube("api-resources", "--api-group=graphtrain.io", "-o", "name"),
        timeout=30,
        what="the CRD in discovery",
    )
    kube("create", "namespace", "held")
    held = {**yaml.safe_load(PROBE), "metadata": {"name": "held", "finalizers": ["graphtrain.io/test-hold"]}}
    kube("apply", "-n", "held", "-f", "-", input=yaml.safe_dump(held))
    kube("delete", "crd", "graphtrainings.graphtrain.io", "--wait=false")
    wait_for(
        lambda: "Terminating" in kube("get", "crd", "graphtrainings.graphtrain.io", "-o", "yaml"),
        timeout=30,
        what="the CRD Terminating",
    )
    out = operator(bare)
    assert out.returncode == 1, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert (
        line
        == "error: the CRD graphtrainings.graphtrain.io is being deleted: GraphTrainings cannot be patched"
    )


def test_the_operator_stops_in_the_same_line_when_the_crd_goes_while_it_runs(tmp_path: Path) -> None:
    """Deleted while the operator ran, the CRD left kopf serving nothing: two warnings in its log, then
    silence for good, /readyz still "leading" (seen for 40 s). The tick finds it within a period (1 s
    here) and the operator stops with the line it says at start."""
    run = tmp_path / "apiserver"
    run.mkdir()
    kubeconfig = k8s.start(run, k8s.testenv_bin())
    try:
        kube = k8s.kubectl_for_operator(kubeconfig)
        cmd = [str(Path(sys.executable).parent / "graphtrain"), "operator"]
        cmd += ["--health-address=127.0.0.1:0", "--metrics-address=127.0.0.1:0"]
        env = {"KUBECONFIG": kubeconfig, "PATH": "", "GRAPHTRAIN_OPERATOR_TIMER": "1"}
        log = tmp_path / "operator.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            wait_for(lambda: "leading: the handlers start" in log.read_text(), what="the handlers started")
            kube("delete", "crd", "graphtrainings.graphtrain.io")
            assert proc.wait(timeout=30) == 1, log.read_text()[-3000:]
        finally:
            k8s.terminate(proc)
    finally:
        k8s.stop(run)
    # the CRD is Terminating for a moment (served without patch) before it is gone: a period that falls
    # in that moment says so, one after says it is gone (both the start's lines)
    assert log.read_text().strip().splitlines()[-1] in (f"error: {ABSENT}", f"error: {DELETING}")


def test_a_discovery_lagging_behind_the_crd_stops_nothing(kube, operator, monkeypatch, caplog) -> None:
    """Discovery is rebuilt after the CRD is served (an API server restarted, one of several not synced
    yet): its word alone stopped the operator (exit 1, "install the CRD first"), a restart for nothing.
    Its word here is the stand-in's, the CRD the session API server's (there and Established)."""
    from graphtrain.operator import crd_version, handlers
    from graphtrain.operator import k8s as operator_k8s

    assert crd_version.lagging(operator_k8s.crd_object())  # the session's CRD, read from its API server

    stop, asked, reacted = threading.Event(), [], []

    def lagging_discovery() -> str:
        asked.append(1)
        if len(asked) == 3:
            stop.set()
        return ABSENT

    monkeypatch.setattr(handlers, "TIMER_SECONDS", 0.0)
    monkeypatch.setattr(operator_k8s, "crd_unserved", lagging_discovery)
    monkeypatch.setattr(handlers, "_on_unserved", reacted.append)
    monkeypatch.setattr(
        handlers, "tick", lambda queue, sweep=False: 0
    )  # the session operator's trainings: not here
    with caplog.at_level(logging.WARNING, logger="graphtrain.operator"):
        handlers._ticking(None, stop)  # type: ignore[arg-type]
    assert reacted == [] and len(asked) == 3
    assert caplog.text.count("though the CRD is established: discovery lags") == 3


@pytest.mark.parametrize(
    ("crd", "lags"),
    [
        (None, False),  # not read: discovery's word stands
        ({}, False),  # none
        ({"metadata": {"deletionTimestamp": "2026-12-02T00:00:00Z"}, "status": ESTABLISHED}, False),
        ({"metadata": {}, "status": {"conditions": [{"type": "NamesAccepted", "status": "False"}]}}, False),
        ({"metadata": {}, "status": ESTABLISHED}, True),
    ],
)
def test_discovery_lags_only_behind_an_established_crd_not_being_deleted(crd, lags) -> None:
    from graphtrain.operator import crd_version

    assert crd_version.lagging(crd) is lags
