"""The REST API's trainers of a training in worker pods (partition locality): each rank from its own
container of its partition's pod, judged as the operator judges it (contract/children.rank_pods)."""

from __future__ import annotations

from graphtrain.api.sources.objects import trainers_of
from graphtrain.contract.children import LABEL_ATTEMPT, LABEL_PARTITION, SHARD_CONTAINER, labels, worker_name
from graphtrain.contract.spec import parse


def worker(partition: int, states: dict[str, dict], attempt: int = 1) -> dict:
    tags = labels("wn", "trainer", **{LABEL_PARTITION: str(partition), LABEL_ATTEMPT: str(attempt)})
    ranks = [f"trainer-{2 * partition + j}" for j in range(2)]
    return {
        "metadata": {"name": worker_name("wn", partition), "labels": tags},
        "spec": {"initContainers": [{"name": SHARD_CONTAINER}], "containers": [{"name": n} for n in ranks]},
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{"name": SHARD_CONTAINER, "restartCount": 3, "state": {"running": {}}}],
            "containerStatuses": [
                {"name": n, "restartCount": 0, "state": states.get(n, {"running": {}})} for n in ranks
            ],
        },
    }


def test_each_rank_of_a_worker_pod_has_its_own_state_and_the_pod_name() -> None:
    spec = parse(
        {
            "apiVersion": "graphtrain.io/v1alpha1",
            "kind": "GraphTraining",
            "metadata": {"name": "wn"},
            "spec": {
                "graph": {"dataset": "wordnet"},
                "partition": {"parts": 2},
                "embeddings": [{"name": "node", "dim": 16}],
                "model": {"kind": "graphsage", "nodeEmbedding": "node"},
                "trainers": {"replicas": 4},
            },
        }
    ).spec
    done = {"terminated": {"exitCode": 0}}
    failed = {"terminated": {"exitCode": 137}}
    pods = [worker(0, {"trainer-1": done}), worker(1, {"trainer-2": failed})]
    got = [(t.rank, t.state, t.pod, t.restarts) for t in trainers_of(spec, {}, pods)]
    # restarts: the operator's attempts (1) plus the rank's own container's, not the sidecar's
    assert got == [
        (0, "Running", "wn-worker-0", 1),
        (1, "Succeeded", "wn-worker-0", 1),
        (2, "Failed", "wn-worker-1", 1),
        (3, "Running", "wn-worker-1", 1),
    ]
