"""GraphTrainings as the operator and the trainers leave them on an API server, made directly with the
Kubernetes client (tests/api and bench/api.py): the GraphTraining with its status, its progress
ConfigMap (each rank's report, rank 0's progress and history), its trainer pods with their state, and
events involving it. Names, labels and owner references come from contract/children.py."""

from __future__ import annotations

from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from graphtrain.contract import reporting
from graphtrain.contract.children import (
    LABEL_ATTEMPT,
    LABEL_RANK,
    names,
    owner_reference,
    trainer_name,
)
from graphtrain.contract.children import (
    labels as child_labels,
)
from graphtrain.contract.conditions import Event, Severity
from graphtrain.contract.spec import (
    API_VERSION,
    KIND,
    PLURAL,
    Condition,
    ConditionType,
    GraphTrainingStatus,
    Phase,
    Progress,
    ShardState,
    ShardStatus,
)
from graphtrain.operator import k8s
from tests.api.fake import SPEC

GROUP, VERSION = API_VERSION.split("/")
AT = "2025-01-02T03:04:05Z"


def client(kubeconfig: str) -> kubernetes.client.ApiClient:
    """A client of the server, which is also the default one (the operator's post_event uses it)."""
    kubernetes.config.load_kube_config(config_file=kubeconfig)
    return kubernetes.client.ApiClient()


def report(epoch: int, rank: int = 0) -> Progress:
    return Progress(
        epoch=epoch,
        epochs=10,
        step=epoch * 10,
        loss=1.0 / (epoch + 1),
        samples_per_second=500.0 * (rank + 1),
        eval_metric="val_accuracy",
        eval_value=0.5 + epoch / 100,
        summary=f"epoch {epoch}/10",
        updated_at=f"2025-01-02T03:0{epoch % 10}:00Z",
    )


def ensure_namespace(api: kubernetes.client.ApiClient, namespace: str) -> None:
    try:
        kubernetes.client.CoreV1Api(api).create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    except ApiException as exc:
        if exc.status != 409:
            raise


def create_training(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    phase: Phase = Phase.training,
    labels: dict[str, str] | None = None,
    epochs_done: int = 3,
    attempt: int = 0,
    pods: bool = True,
) -> dict[str, Any]:
    """The GraphTraining `namespace/name` and what surrounds it; returns the GraphTraining."""
    custom, core = kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api)
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "labels": labels or {}},
        "spec": SPEC,
    }
    gt = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    status = GraphTrainingStatus(
        phase=phase,
        conditions=[
            Condition(type=ConditionType.spec_valid, status="True", reason="Valid", last_transition_time=AT)
        ],
        progress=report(epochs_done),
        shards=[ShardStatus(index=i, state=ShardState.ready, address=f"tcp://s{i}:7000") for i in range(2)],
        restarts=attempt,
        start_time=AT,
    )
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": status.model_dump(by_alias=True, exclude_none=True, mode="json")},
    )
    owner = [owner_reference(gt)]
    data = {
        **reporting.configmap_data(report(epochs_done, 0), 0),
        **reporting.configmap_data(report(epochs_done, 1), 1),
        reporting.HISTORY_KEY: reporting.encode_history([report(e) for e in range(1, epochs_done + 1)]),
    }
    core.create_namespaced_config_map(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": names(name)["progress"],
                "labels": child_labels(name, "progress"),
                "ownerReferences": owner,
            },
            "data": data,
        },
        _preload_content=False,
    )
    for rank in range(2) if pods else ():
        pod_name = trainer_name(name, rank)
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "labels": child_labels(
                        name,
                        "trainer",
                        **{LABEL_RANK: str(rank), LABEL_ATTEMPT: str(attempt)},
                    ),
                    "ownerReferences": owner,
                },
                "spec": {"containers": [{"name": "trainer", "image": "localhost/graphtrain:ci"}]},
            },
            _preload_content=False,
        )
        pod_status = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "image": "localhost/graphtrain:ci",
                    "imageID": "",
                    "ready": True,
                    "restartCount": rank,
                }
            ],
        }
        core.patch_namespaced_pod_status(
            pod_name,
            namespace,
            {"status": pod_status},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    post_event(gt, Severity.normal, "Started", "the trainers started")
    return gt  # type: ignore[no-any-return]


def post_event(gt: dict[str, Any], severity: Severity, reason: str, message: str) -> None:
    """An event about `gt`, posted as the operator posts them (through the client that client() set up)."""
    k8s.post_event(gt, Event(severity, reason, message))
