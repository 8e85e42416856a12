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
import urllib3
import yaml
from kubernetes.client.rest import ApiException

from graphtrain.contract.crd import DIGEST_ANNOTATION, crd, spec_digest
from graphtrain.operator import crd_version
from graphtrain.operator import k8s as k8s_operator
from tests import k8s
from tests.operator.conftest import start_operator, wait_for

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


def test_an_edited_annotation_is_named_as_such_never_echoed() -> None:
    line = crd_version.skew("0123\n[2026-01-01] forged: all is well", "ab" * 32)
    assert line is not None and "\n" not in line and "forged" not in line
    assert "a schema digest not of this project's form (edited?)" in line


def test_a_refusal_is_said_once_and_leaves_the_gauge_unknown() -> None:
    outcome = crd_version.decide(403, "ab" * 32, attempt=0)
    assert outcome.gauge is None and not outcome.again  # not 0: unknown is not outdated
    assert outcome.line is not None and "answered 403" in outcome.line
    assert "customresourcedefinitions" in outcome.line and "stays NaN" in outcome.line


@pytest.mark.parametrize(
    ("raised", "read"),
    [
        (ApiException(status=403, reason="Forbidden"), 403),  # a ClusterRole without CRDs
        (ApiException(status=401, reason="Unauthorized"), 401),
        (ApiException(status=500, reason="Internal Server Error"), None),  # no answer: asked again
        (urllib3.exceptions.ReadTimeoutError(None, "/apis", "read timed out"), None),
    ],
)
def test_the_crd_read_tells_a_refusal_from_no_answer(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, read: int | None
) -> None:
    """The test API server authorises everything: the refusal is the client's exception here."""

    class Refusing:
        def get(self, **_: object) -> None:
            raise raised

    monkeypatch.setattr(k8s_operator, "_res", lambda *_: Refusing())
    assert k8s_operator.crd_object() == read
    assert crd_version.served_digest() == (crd_version.UNKNOWN if read is None else read)


class Attempts:
    """A served_digest that answers from a list, and a wait that records its delays."""

    def __init__(self, *answers: object) -> None:
        self.answers, self.waits = list(answers), []

    def read(self) -> object:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return False


def test_no_answer_is_said_once_and_asked_again_until_answered(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger=crd_version.__name__)
    attempts, gauge = Attempts(*[crd_version.UNKNOWN] * 5, "0" * 64), []
    crd_version.report(gauge.append, attempts.wait, attempts.read)
    assert gauge == [0.0]  # never 0 before the answer, then once
    assert attempts.waits == [5.0, 15.0, 60.0, 300.0, 300.0]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "no answer about the CRD" in lines[0] and "is not this operator's" in lines[1]


def test_the_check_stops_with_the_operator_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    attempts, gauge = Attempts(crd_version.UNKNOWN, crd_version.UNKNOWN), []
    crd_version.report(gauge.append, lambda _: True, attempts.read)  # stopping: no second attempt
    assert gauge == [] and attempts.answers == [crd_version.UNKNOWN]
    crd_version.report(gauge.append, attempts.wait, Attempts(KeyError("items")).read)
    assert gauge == [] and "cannot check the CRD" in caplog.text and "Traceback" not in caplog.text


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
    """Start `graphtrain operator` until it serves /metrics and its check (beside the operator) has an
    answer: (its crd_current sample, its log)."""
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc, where = start_operator(env, log, "-n", "quiet")

    def sample() -> str:
        with urllib.request.urlopen(f"http://{where}/metrics", timeout=10) as answer:
            body = answer.read().decode()
        (found,) = [line for line in body.splitlines() if line.startswith("graphtrain_operator_crd_current ")]
        return found

    try:
        wait_for(lambda: not sample().endswith(" NaN"), timeout=30, what="the CRD version's check")
        return sample(), log.read_text(errors="replace")
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
