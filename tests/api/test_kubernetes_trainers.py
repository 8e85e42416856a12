"""The REST API's trainer states from Kubernetes (api/sources/kubernetes.py), on the test API server: a
rank whose pod is being deleted is Terminating (a finalizer holds the pod, as a kubelet's grace period
would), a rank whose pod is gone is Stopped when its training was suspended, failed or is being
deleted, Succeeded when its training succeeded, and Pending while its pod is still to come."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes
import pytest

from graphtrain.api.sources.kubernetes import KubernetesSource
from graphtrain.contract.children import trainer_name
from graphtrain.contract.spec import Phase
from tests.api import cluster
from tests.api.cluster import GROUP, PLURAL, VERSION

NS = "api-states"
HOLD = {"metadata": {"finalizers": ["graphtrain.io/test-hold"]}}
RELEASE = {"metadata": {"finalizers": None}}


@pytest.fixture
def api(kube, kubeconfig: str) -> Iterator[kubernetes.client.ApiClient]:  # kube: the CRD installed
    client = cluster.client(kubeconfig)
    cluster.ensure_namespace(client, NS)
    try:
        yield client
    finally:
        client.close()


def states(source: KubernetesSource, name: str) -> list[tuple[str, str | None]]:
    return [(r.state, r.pod) for r in source.get_training(NS, name).trainers]


@pytest.mark.timeout(120)
def test_terminating_and_deleted_trainer_pods(api: kubernetes.client.ApiClient) -> None:
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    made = {
        "going": cluster.create_training(api, NS, "going", Phase.training),
        "waiting": cluster.create_training(api, NS, "waiting", Phase.training, pods=False),
        "paused": cluster.create_training(api, NS, "paused", Phase.suspended, pods=False),
        "done": cluster.create_training(api, NS, "done", Phase.succeeded, pods=False),
        "broke": cluster.create_training(api, NS, "broke", Phase.failed, pods=False),
        "removed": cluster.create_training(api, NS, "removed", Phase.training, pods=False),
    }
    held = trainer_name("going", 1)
    try:
        core.patch_namespaced_pod(held, NS, HOLD)
        core.delete_namespaced_pod(held, NS)
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "removed", HOLD)
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "removed")
        source = KubernetesSource(cache_ttl=0.0, timeout=5.0, client=api)
        assert states(source, "going") == [("Running", "going-trainer-0"), ("Terminating", held)]
        assert states(source, "waiting") == [("Pending", None)] * 2
        assert states(source, "paused") == [("Stopped", None)] * 2
        assert states(source, "done") == [("Succeeded", None)] * 2
        assert states(source, "broke") == [("Stopped", None)] * 2
        assert states(source, "removed") == [("Stopped", None)] * 2
    finally:
        core.patch_namespaced_pod(held, NS, RELEASE)
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "removed", RELEASE)
        for name in made:
            try:
                custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ttl", [0.0, 30.0], ids=["direct", "snapshot"])
def test_a_refused_change_is_not_reported_as_applied(api: kubernetes.client.ApiClient, ttl: float) -> None:
    """While the operator refuses a change (trainers 2 -> 4 on a running job), the REST API reports the
    spec the job runs (its config ConfigMap's), not the GraphTraining's: no phantom ranks 2 and 3
    Pending, and the summary's trainer count is 2. A spec without a config map yet reads as it is."""
    import yaml

    from graphtrain.contract.children import labels as child_labels
    from graphtrain.contract.children import names, owner_reference

    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    name = f"refused-{int(ttl)}"
    gt = cluster.create_training(api, NS, name, Phase.training)
    applied = {
        "apiVersion": gt["apiVersion"],
        "kind": gt["kind"],
        "metadata": {"name": name},
        "spec": gt["spec"],
    }
    core.create_namespaced_config_map(
        NS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": names(name)["config"],
                "labels": child_labels(name, "config"),
                "ownerReferences": [owner_reference(gt)],
            },
            "data": {"spec.yaml": yaml.safe_dump(applied)},
        },
    )
    # the CRD admits the change once the spec is suspended (it cannot see that the job ran); the operator
    # refuses it
    for change in ({"spec": {"suspend": True}}, {"spec": {"trainers": {"replicas": 4}}}):
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, change)
    source = KubernetesSource(cache_ttl=ttl, timeout=5.0, client=api)
    got = source.get_training(NS, name)
    source.close()
    assert [r.rank for r in got.trainers] == [0, 1]
    assert got.spec is not None and got.spec.trainers == 2 and got.spec.mode == "train"
    assert got.spec.suspend is True  # what a running job takes on: the current spec's
    core.delete_namespaced_config_map(names(name)["config"], NS)
    source = KubernetesSource(cache_ttl=ttl, timeout=5.0, client=api)
    assert source.get_training(NS, name).spec.trainers == 4
    source.close()
    # not left for the session's operator (tests/operator) to suspend
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
