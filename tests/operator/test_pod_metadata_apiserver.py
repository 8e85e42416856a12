"""spec.podMetadata against a real API server and the operator: the pods it creates and the templates
of the pods the Job and StatefulSet controllers create carry the spec's labels and annotations beside the
operator's own, and the CRD refuses one of the operator's keys before the operator sees it."""

from __future__ import annotations

import pytest

from tests.operator.conftest import get, wait_for
from tests.operator.test_operator_apiserver import SPEC, names_of, status_patch

pytestmark = pytest.mark.timeout(240)

META = """  podMetadata:
    labels: {team: graph, cost-center: c-42}
    annotations: {sidecar.istio.io/inject: "false"}
"""


def test_the_pods_carry_the_spec_labels_and_annotations(kube, operator, ns: str) -> None:
    name = "meta"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model="") + META)
    wait_for(lambda: names_of(kube, "job", ns, name) == [f"{name}-partition"], what="the partition job")
    job = get(kube, "job", f"{name}-partition", ns)["spec"]["template"]["metadata"]
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status_patch(kube, "job", f"{name}-partition", ns, done)
    wait_for(lambda: names_of(kube, "statefulset", ns, name) == [f"{name}-shards"], what="the shards")
    shards = get(kube, "statefulset", f"{name}-shards", ns)["spec"]["template"]["metadata"]
    status_patch(kube, "statefulset", f"{name}-shards", ns, {"replicas": 2, "readyReplicas": 2})
    trainers = [f"{name}-trainer-0", f"{name}-trainer-1"]
    wait_for(lambda: set(trainers) <= set(names_of(kube, "pod", ns, name)), what="the trainer pods")
    pods = [get(kube, "pod", t, ns)["metadata"] for t in trainers]
    for role, meta in zip(("partition", "shards", "trainer", "trainer"), (job, shards, *pods), strict=True):
        labels = meta["labels"]
        assert labels["team"] == "graph" and labels["cost-center"] == "c-42", (role, labels)
        assert labels["graphtrain.io/training"] == name and labels["graphtrain.io/role"] == role
        assert meta["annotations"]["sidecar.istio.io/inject"] == "false", (role, meta)
    # the trainer pods are selected by the operator's labels as before (the REST API, the Services)
    assert names_of(kube, "pod", ns, name) == trainers


def test_the_crd_refuses_an_operator_key_naming_it(kube, ns: str) -> None:
    bad = SPEC.format(name="meta-bad", extra_model="") + "  podMetadata: {labels: {graphtrain.io/role: x}}\n"
    said = kube("apply", "-n", ns, "-f", "-", input=bad, check=False)
    assert (
        "spec.podMetadata.labels: Invalid value: label key 'graphtrain.io/role' is the operator's own" in said
    )


def test_an_empty_pod_metadata_added_to_a_started_training_is_taken(kube, operator, ns: str) -> None:
    """`podMetadata: {}` reaches the operator as `{labels: {}, annotations: {}}` (the CRD's defaults):
    no label and no annotation, as before, so not refused as a change once the training started."""
    name = "meta-empty"
    kube("apply", "-n", ns, "-f", "-", input=SPEC.format(name=name, extra_model=""))
    wait_for(lambda: names_of(kube, "job", ns, name) == [f"{name}-partition"], what="the partition job")
    kube("patch", "gtr", name, "-n", ns, "--type=merge", "-p", '{"spec": {"podMetadata": {}}}')
    training = get(kube, "gtr", name, ns)
    assert training["spec"]["podMetadata"] == {"labels": {}, "annotations": {}}

    def observed() -> dict:
        st = get(kube, "gtr", name, ns).get("status") or {}
        return st if st.get("observedGeneration") == training["metadata"]["generation"] else {}

    st = wait_for(observed, what="the new generation observed")
    said = {c["type"]: c for c in st["conditions"]}["SpecValid"]
    assert said["status"] == "True", said
    # a real change after the empty one is refused at admission (the CRD's transition rule, from the
    # table the operator's UpdateRefused reads); podMetadata null (removed) is taken, and empty again
    real = '{"spec": {"podMetadata": {"labels": {"team": "a"}}}}'
    said = kube("patch", "gtr", name, "-n", ns, "--type=merge", "-p", real, check=False)
    assert "spec.podMetadata: Invalid value: podMetadata is immutable once the training runs" in said, said
    for patch in ("null", '{"annotations": {}}'):
        kube("patch", "gtr", name, "-n", ns, "--type=merge", "-p", f'{{"spec": {{"podMetadata": {patch}}}}}')
        generation = get(kube, "gtr", name, ns)["metadata"]["generation"]

        def spec_valid(generation: int = generation) -> dict:
            st = get(kube, "gtr", name, ns).get("status") or {}
            said = {c["type"]: c for c in st.get("conditions") or []}.get("SpecValid") or {}
            return said if st.get("observedGeneration") == generation and said.get("status") == "True" else {}

        wait_for(spec_valid, what=f"podMetadata {patch} taken")
