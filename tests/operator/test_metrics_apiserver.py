"""The operator's /metrics against the test API server: its reconciles are counted, and every
GraphTraining it reconciles is exported with its phase until it is deleted."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.operator import endpoints, handlers
from tests.operator.conftest import wait_for

pytestmark = pytest.mark.timeout(180)

SPEC = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {name: mx}
spec:
  graph: {dataset: wordnet}
  embeddings: [{name: node, dim: 8}]
  model: {nodeEmbedding: node}
"""


@pytest.fixture
def ns(kube) -> str:
    name = f"m-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name


@pytest.fixture
def scrape(operator) -> Iterator[Callable[[], dict[str, dict[tuple[tuple[str, str], ...], float]]]]:
    """The in-process operator's metrics, served as `graphtrain operator` serves them; a scrape of them
    as {name: {labels: value}}."""
    server = endpoints.serve("metrics", ("127.0.0.1", 0), {"/metrics": handlers.metrics().route})

    def get() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return out

    try:
        yield get
    finally:
        server.close()


def test_reconciles_and_the_trainings_phase_are_exported_until_it_is_deleted(kube, ns: str, scrape) -> None:
    kube("apply", "-n", ns, "-f", "-", input=SPEC)
    phase = wait_for(
        lambda: kube("get", "gtr", "mx", "-n", ns, "-o", "jsonpath={.status.phase}"),
        timeout=60,
        what="the operator to give mx a phase",
    )

    def phases() -> dict[str, float]:
        samples = scrape().get("graphtrain_training_phase", {})  # no training: no sample
        return {
            labels["phase"]: v
            for key, v in samples.items()
            if (labels := dict(key))["namespace"] == ns and labels["training"] == "mx"
        }

    got = wait_for(lambda: phases() or None, timeout=30, what="mx on /metrics")
    assert sum(got.values()) == 1 and len(got) == 8, got  # every phase, one of them current
    assert max(got, key=lambda p: got[p]) in (phase, "Partitioning", "Starting", "Pending"), got
    m = scrape()
    assert m["graphtrain_operator_reconciles_total"][(("result", "ok"),)] > 0
    assert m["graphtrain_operator_reconcile_seconds_count"][()] > 0
    assert set(m["graphtrain_operator_api_errors_total"]) == {
        (("verb", v),) for v in ("get", "list", "create", "patch", "replace", "delete")
    }
    key = (("namespace", ns), ("training", "mx"))
    assert m["graphtrain_training_restarts"][key] == 0 and m["graphtrain_training_epoch"][key] == 0

    kube("delete", "gtr", "mx", "-n", ns, "--wait=false")
    wait_for(lambda: not phases(), timeout=60, what="mx's metrics to go with it")
