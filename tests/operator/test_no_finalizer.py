"""No GraphTraining waits for the operator to go: with the operator down, deleting a training, and
deleting the CRD with trainings left, complete. A finalizer of kopf's (added for its timer and its
delete handler) held each one until the operator let go: a namespace deleted with the operator down
stayed Terminating, and `kubectl delete crd` never completed (kopf serves no resource it cannot patch)
until each finalizer was patched away by hand. The children go through their ownerReferences (the
cluster's garbage collector; the test API server has none, so the test reads the references), a claim
kept by storage.whenDeleted Retain has none and stays. An older operator's finalizer is removed.

On an API server of its own: the test deletes the CRD. (The test API server runs no namespace
controller, which deletes a namespace's GraphTrainings as `kubectl delete` does here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import k8s
from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import SPEC

pytestmark = pytest.mark.timeout(180)

KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"  # what the operator added before


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Always a private API server, never the user's test cluster: the test deletes its CRD."""
    run = tmp_path_factory.mktemp("no-finalizer-apiserver")
    try:
        yield k8s.start(run, k8s.testenv_bin())
    finally:
        k8s.stop(run)


def test_trainings_and_the_crd_go_with_the_operator_down(private: str, tmp_path: Path) -> None:
    kube = k8s.kubectl_for_operator(private)
    kube("create", "namespace", "nf")
    for name in ("a", "b", "old"):
        doc = yaml.safe_load(SPEC.format(name=name, extra_model=""))
        if name == "old":
            doc["metadata"]["finalizers"] = [KOPF_FINALIZER]
        kube("apply", "-n", "nf", "-f", "-", input=yaml.safe_dump(doc))
    cmd = [str(Path(sys.executable).parent / "graphtrain"), "operator", "--namespace=nf"]
    cmd += ["--health-address=127.0.0.1:0", "--metrics-address=127.0.0.1:0"]
    env = {**os.environ, "KUBECONFIG": private, "GRAPHTRAIN_OPERATOR_TIMER": "1"}
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:

        def handled() -> bool:
            trainings = [get(kube, "gtr", n, "nf") for n in ("a", "b", "old")]
            made = kube("get", "job", "-n", "nf", "-o", "name").split()
            return (
                all((t.get("status") or {}).get("phase") == "Partitioning" for t in trainings)
                and len(made) == 3
                and not any(t["metadata"].get("finalizers") for t in trainings)
            )

        assert wait_for(handled, timeout=60, what="three trainings partitioning, no finalizer left")
    finally:
        k8s.terminate(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]
    uid = get(kube, "gtr", "a", "nf")["metadata"]["uid"]

    # the operator is down: a deleted training goes at once, and so does the CRD with trainings left
    kube("delete", "gtr", "a", "-n", "nf", "--wait=true", "--timeout=20s")
    kube("delete", "crd", "graphtrainings.graphtrain.io", "--wait=true", "--timeout=60s")
    assert "graphtrainings.graphtrain.io" not in kube("get", "crd", "-o", "name")
    job = get(kube, "job", "a-partition", "nf")  # the garbage collector's to delete: owned by a
    assert [r["uid"] for r in job["metadata"]["ownerReferences"]] == [uid]
    claims = sorted(kube("get", "pvc", "-n", "nf", "-o", "name").split())
    assert claims == [f"persistentvolumeclaim/{n}-data" for n in ("a", "b", "old")]  # Retain: kept
    assert not any(get(kube, "pvc", f"{n}-data", "nf")["metadata"].get("ownerReferences") for n in "ab")
