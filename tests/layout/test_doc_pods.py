"""The pods the user's docs send `kubectl logs` to exist: README's and the chart's NOTES name the pods and
containers the operator makes for examples/nations-transe.yaml (its trainers divide evenly among its
partitions, so partition locality puts them in worker pods, not `<name>-trainer-<i>`); the alerts'
runbooks that name a trainer or shard pod name the worker pod's container too; and no line asks for
`--previous`: every training pod has restartPolicy Never, so there is no earlier container to read."""

from __future__ import annotations

import re

from graphtrain.contract.children import SHARD_CONTAINER, names, trainer_container, trainer_name, worker_name
from graphtrain.contract.spec import load_yaml
from graphtrain.contract.spec.locality import colocated, trainers_per_shard
from tests.tree import ROOT

DOCS = ("README.md", "charts/graphtrain/templates/NOTES.txt")
MONITORING = "charts/graphtrain/templates/monitoring/prometheusrule.yaml"
EXAMPLE = "examples/nations-transe.yaml"


def pods_of(path: str) -> dict[str, set[str]]:
    """{pod name: its container names} the operator makes for the example spec at `path`."""
    gt = load_yaml((ROOT / path).read_text())
    name, spec = gt.metadata.name, gt.spec
    if colocated(spec):
        k = trainers_per_shard(spec) or 1
        return {
            worker_name(name, p): {SHARD_CONTAINER, *(trainer_container(r) for r in range(p * k, p * k + k))}
            for p in range(spec.num_shards)
        }
    shards = {f"{names(name)['shards']}-{i}": {SHARD_CONTAINER} for i in range(spec.num_shards)}
    return shards | {trainer_name(name, r): {"trainer"} for r in range(spec.trainers.replicas)}


def logs_lines(path: str) -> list[str]:
    return [line for line in (ROOT / path).read_text().splitlines() if "kubectl logs" in line]


def test_the_docs_logs_name_pods_and_containers_the_operator_makes() -> None:
    pods = pods_of(EXAMPLE)
    wrong = []
    for doc in DOCS:
        for line in logs_lines(doc):
            for pod in re.findall(r"\bnations-transe-(?:trainer|shards|worker)-\d+\b", line):
                containers = re.findall(r"-c ([\w-]+)", line)
                if pod not in pods or not set(containers) <= pods[pod]:
                    wrong.append(f"{doc}: {line.strip()}")
    assert not wrong, (sorted(pods.items()), wrong)


def test_no_logs_line_asks_for_a_previous_container() -> None:
    said = [
        f"{doc}: {line.strip()}"
        for doc in (*DOCS, MONITORING)
        for line in logs_lines(doc)
        if "--previous" in line
    ]
    assert not said, said


def test_the_runbooks_naming_a_role_pod_name_the_worker_layout_too() -> None:
    runbooks = (ROOT / MONITORING).read_text().split("runbook: >-")[1:]
    one_layout = [
        r.split("{{-")[0].strip()
        for r in runbooks
        if ("-trainer-{{" in r or "role=shards" in r or "-shards-" in r) and "worker" not in r.split("{{-")[0]
    ]
    assert not one_layout, one_layout
