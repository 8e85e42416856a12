"""Every pod the chart renders, in every ci/ scenario, meets the restricted Pod Security Standard and
has requests and limits (tests/pod_security.py); the checker itself finds each violation of a bad pod."""

from __future__ import annotations

import copy

import pytest
import yaml

from graphtrain.contract.spec import GraphTraining, parse, yaml_document
from graphtrain.operator import config as operator_config
from graphtrain.operator import manifests
from tests.chart.chart import ROOT, SCENARIOS, render
from tests.pod_security import pod_specs, violations

GOOD_CONTAINER = {
    "name": "main",
    "image": "x",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    },
    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}
GOOD_POD = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [GOOD_CONTAINER],
    "initContainers": [{**copy.deepcopy(GOOD_CONTAINER), "name": "init"}],
    "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}],
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_the_chart_renders_is_restricted(scenario: str) -> None:
    checked = []
    for obj in render(scenario):
        for where, spec in pod_specs(obj):
            assert violations(spec) == [], f"{scenario}: {where}"
            checked.append(where)
    # the operator's Deployment, the status API's (observability) and the `helm test` pod (init
    # container included)
    api = ["Deployment/gt-graphtrain-api"] if scenario == "observability" else []
    assert checked == [*api, "Deployment/gt-graphtrain-operator", "Pod/gt-graphtrain-test"]


def test_a_good_pod_passes_with_settings_on_the_pod_or_on_every_container() -> None:
    assert violations(GOOD_POD) == []
    per_container = copy.deepcopy(GOOD_POD)
    moved = per_container.pop("securityContext")
    for c in per_container["containers"] + per_container["initContainers"]:
        c["securityContext"].update(moved)
    assert violations(per_container) == []


def test_the_checker_finds_every_violation_of_a_bad_pod() -> None:
    bad_init = {
        "name": "setup",
        "image": "x",
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "seccompProfile": {"type": "Unconfined"},
            "privileged": True,
            "allowPrivilegeEscalation": True,
            "capabilities": {"drop": ["NET_RAW"], "add": ["SYS_ADMIN"]},
            "readOnlyRootFilesystem": False,
        },
        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
    }
    bare = {"name": "main", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}]}
    bad = {
        "hostNetwork": True,
        "hostPID": True,
        "hostIPC": True,
        "securityContext": {"runAsUser": 0},
        "initContainers": [bad_init],
        "containers": [bare],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "ok", "emptyDir": {}}],
    }
    init, main = "init container 'setup'", "container 'main'"
    assert sorted(violations(bad)) == sorted(
        [
            "pod: hostNetwork is true",
            "pod: hostPID is true",
            "pod: hostIPC is true",
            "volume 'root': hostPath is not a restricted volume type",
            "pod: runAsUser is 0 (root)",
            f"{init}: runAsNonRoot is not true (pod or container)",
            f"{init}: runAsUser is 0 (root)",
            f"{init}: seccompProfile is Unconfined, not RuntimeDefault",
            f"{init}: allowPrivilegeEscalation is not false",
            f"{init}: privileged",
            f"{init}: capabilities do not drop ALL",
            f"{init}: capabilities add SYS_ADMIN",
            f"{init}: readOnlyRootFilesystem is not true",
            f"{init}: no requests for memory",
            f"{init}: no limits for cpu",
            f"{main}: runAsNonRoot is not true (pod or container)",
            f"{main}: seccompProfile is unset, not RuntimeDefault",
            f"{main}: allowPrivilegeEscalation is not false",
            f"{main}: capabilities do not drop ALL",
            f"{main}: readOnlyRootFilesystem is not true",
            f"{main}: hostPort 80",
            f"{main}: no requests for cpu, memory",
            f"{main}: no limits for cpu, memory",
        ]
    )


INIT, MAIN = "init container 'init'", "container 'main'"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda p: p["securityContext"].pop("runAsNonRoot"),
            [
                f"{INIT}: runAsNonRoot is not true (pod or container)",
                f"{MAIN}: runAsNonRoot is not true (pod or container)",
            ],
        ),
        (
            lambda p: p["containers"][0]["securityContext"].update(runAsNonRoot=False),
            [f"{MAIN}: runAsNonRoot is not true (pod or container)"],
        ),
        (
            lambda p: p["initContainers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            [f"{INIT}: seccompProfile is Unconfined, not RuntimeDefault"],
        ),
        (
            lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
            [f"{MAIN}: allowPrivilegeEscalation is not false"],
        ),
        (
            lambda p: p["initContainers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
            [f"{INIT}: readOnlyRootFilesystem is not true"],
        ),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["NET_BIND_SERVICE"]),
            [f"{MAIN}: capabilities add NET_BIND_SERVICE"],
        ),
        (
            lambda p: p["containers"][0]["resources"]["limits"].pop("memory"),
            [f"{MAIN}: no limits for memory"],
        ),
        (
            lambda p: p["initContainers"][0]["resources"].pop("requests"),
            [f"{INIT}: no requests for cpu, memory"],
        ),
        (
            lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
            ["volume 'n': nfs is not a restricted volume type"],
        ),
        (lambda p: p.update(containers=[], initContainers=[]), ["pod: no containers"]),
    ],
)
def test_one_change_to_a_good_pod_is_found(change, expected: list[str]) -> None:
    pod = copy.deepcopy(GOOD_POD)
    change(pod)
    assert violations(pod) == expected


def test_pod_specs_are_found_in_every_workload_kind() -> None:
    spec = {"containers": [GOOD_CONTAINER]}
    template = {"template": {"spec": spec}}
    for kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        assert pod_specs({"kind": kind, "metadata": {"name": "w"}, "spec": template}) == [(f"{kind}/w", spec)]
    cron = {"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": template}}}
    assert pod_specs(cron) == [("CronJob/c", spec)]
    assert pod_specs({"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}) == [("Pod/p", spec)]
    assert pod_specs({"kind": "ConfigMap", "metadata": {"name": "m"}, "data": {}}) == []


# ------------------------------------------------------------- what the operator creates, per scenario

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
VARIANTS = {  # what changes a pod: the device, the backend, a spec's own resources and placement
    "as-is": {},
    "cuda": {"shardServers": {"device": "cuda"}, "trainers": {"device": "cuda"}},
    "own-resources": {
        "trainers": {
            "resources": {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"cpu": "4", "memory": "6Gi"}},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
    },
}


def children(config: operator_config.OperatorConfig, gt: GraphTraining) -> list[dict]:
    """Every child of a training whose pods the operator makes (one rank stands for all)."""
    owner = {"metadata": {"name": gt.metadata.name, "namespace": "team", "uid": "u1"}}
    return [
        manifests.partition_job(owner, gt, config),
        manifests.shard_statefulset(owner, gt, config),
        manifests.trainer_pod(owner, gt, config, 0, 0),
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_the_operator_creates_under_each_scenario_is_restricted(scenario: str) -> None:
    """The chart's rendered configuration is one the operator takes (its own parser), and under it
    every pod of every example, in every variant, is restricted and has requests and limits."""
    (cm,) = [o for o in render(scenario) if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})]
    config = operator_config.parse(yaml.safe_load(cm["data"]["config.yaml"]), f"{scenario}: config.yaml")
    checked = 0
    for path in EXAMPLES:
        doc = yaml_document(path.read_text())
        for variant, changes in VARIANTS.items():
            spec = copy.deepcopy(doc)
            for section, fields in changes.items():
                spec["spec"].setdefault(section, {}).update(fields)
            gt = parse(spec)
            for obj in children(config, gt):
                for where, pod in pod_specs(obj):
                    assert violations(pod) == [], f"{scenario}, {path.name} ({variant}): {where}"
                    checked += 1
    assert checked == len(EXAMPLES) * len(VARIANTS) * 3
