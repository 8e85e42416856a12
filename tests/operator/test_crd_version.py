"""The operator over a CRD other than its version's: helm installs a chart's crds/ once and never
upgrades them, so `helm upgrade` ran a newer operator over the older CRD and the API server dropped,
without a word, every field the old schema lacked. The operator now says so at its start, in one
warning line naming the fix and in graphtrain_operator_crd_current (the chart's GraphTrainingCRDOutdated
alert), and runs on. On a private API server: the tests replace its CRD."""

from __future__ import annotations

import copy
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from graphtrain.contract.crd import DIGEST_ANNOTATION, crd, spec_digest
from graphtrain.operator import crd_version
from tests import k8s
from tests.operator.conftest import start_operator

pytestmark = pytest.mark.timeout(180)


def test_the_digest_follows_the_spec_and_the_chart_carries_this_versions() -> None:
    own = crd()
    assert own["metadata"]["annotations"][DIGEST_ANNOTATION] == spec_digest(own["spec"])
    assert crd_version.own_digest() == spec_digest(own["spec"])
    changed = copy.deepcopy(own["spec"])
    changed["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("podMetadata")
    assert spec_digest(changed) != spec_digest(own["spec"])  # an older schema without a field
    chart = yaml.safe_load(k8s.CRD.read_text())  # `make crd` ran (tests/contract holds it whole)
    assert chart["metadata"]["annotations"][DIGEST_ANNOTATION] == crd_version.own_digest()


@pytest.mark.parametrize(
    ("served", "said"),
    [
        ("0" * 64, "schema digest 000000000000"),
        (None, "one without a schema digest (older)"),
    ],
)
def test_a_served_crd_of_another_version_is_named_with_the_fix(served: str | None, said: str) -> None:
    own = "ab" * 32
    line = crd_version.skew(served, own)
    assert line is not None and "\n" not in line
    assert said in line and "this operator's is abababababab" in line
    assert line.endswith("kubectl apply -f charts/graphtrain/crds/")


def test_the_same_crd_or_no_answer_says_nothing() -> None:
    assert crd_version.skew("ab" * 32, "ab" * 32) is None
    assert crd_version.skew(crd_version.UNKNOWN, "ab" * 32) is None


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, k8s.Kubectl]]:
    """Always a private API server, never the user's test cluster: the tests replace its CRD."""
    run = tmp_path_factory.mktemp("crd-version-apiserver")
    try:
        kubeconfig = k8s.start(run, k8s.testenv_bin())
        kube = k8s.kubectl(kubeconfig)
        k8s.install_crd(kube)
        kube("create", "namespace", "quiet")
        yield kubeconfig, kube
    finally:
        k8s.stop(run)


def served_as(kube: k8s.Kubectl, digest: str | None) -> None:
    """Replace the served CRD's digest annotation (None: remove it, as a chart before it)."""
    value = "null" if digest is None else f'"{digest}"'
    patch = f'{{"metadata":{{"annotations":{{"{DIGEST_ANNOTATION}":{value}}}}}}}'
    kube("patch", "crd", "graphtrainings.graphtrain.io", "--type=merge", "-p", patch)


def operator_says(kubeconfig: str, log: Path) -> tuple[str, str]:
    """Start `graphtrain operator` until it serves /metrics: (its crd_current sample, its log)."""
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc, where = start_operator(env, log, "-n", "quiet")
    try:
        with urllib.request.urlopen(f"http://{where}/metrics", timeout=10) as answer:
            body = answer.read().decode()
        (sample,) = [
            line for line in body.splitlines() if line.startswith("graphtrain_operator_crd_current ")
        ]
        return sample, log.read_text(errors="replace")
    finally:
        k8s.terminate(proc)


def test_the_operator_names_an_older_crd_and_runs_on(
    private: tuple[str, k8s.Kubectl], tmp_path: Path
) -> None:
    kubeconfig, kube = private
    served_as(kube, "0" * 64)  # a newer or older chart's CRD
    sample, log = operator_says(kubeconfig, tmp_path / "other.log")
    assert sample == "graphtrain_operator_crd_current 0.0", log[-3000:]
    (line,) = [x for x in log.splitlines() if "is not this operator's" in x]
    assert "schema digest 000000000000" in line and "kubectl apply -f charts/graphtrain/crds/" in line
    served_as(kube, None)  # a chart from before the digest
    sample, log = operator_says(kubeconfig, tmp_path / "none.log")
    assert sample == "graphtrain_operator_crd_current 0.0", log[-3000:]
    assert "one without a schema digest (older)" in log
    served_as(kube, crd_version.own_digest())  # this version's: nothing said
    sample, log = operator_says(kubeconfig, tmp_path / "own.log")
    assert sample == "graphtrain_operator_crd_current 1.0", log[-3000:]
    assert "is not this operator's" not in log
