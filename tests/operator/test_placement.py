"""What a training's pods and data claim get from its spec and the operator configuration: the merge
rules of operator/placement.py as tables, then every pod the operator renders checked for them and for
the restricted Pod Security Standard, and the shard servers' NetworkPolicy and PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

import pytest

from graphtrain.contract import roles
from graphtrain.contract.children import LABEL_ROLE, LABEL_TRAINING
from graphtrain.contract.spec import (
    Affinity,
    GraphTraining,
    GraphTrainingSpec,
    Resources,
    Toleration,
    Trainers,
    parse,
)
from graphtrain.operator import config as operator_config
from graphtrain.operator import manifests, placement
from tests.contract.spec_cases import GRAPHSAGE, edit

CPU_DEFAULT = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}


def res(requests: dict | None = None, limits: dict | None = None) -> Resources:
    return Resources(requests=requests or {}, limits=limits or {})


DEFAULT = res({"cpu": "1", "memory": "2Gi"}, {"cpu": "2", "memory": "8Gi"})


@pytest.mark.parametrize(
    ("own", "gpu", "expected"),
    [
        pytest.param(None, False, CPU_DEFAULT, id="unset-takes-the-default"),
        pytest.param(res(), False, CPU_DEFAULT, id="empty-takes-the-default"),
        pytest.param(
            res(limits={"memory": "64Gi"}),
            False,
            {"limits": {"memory": "64Gi"}},
            id="own-as-a-whole-not-merged",
        ),
        pytest.param(
            res({"cpu": "4"}, {"cpu": "8"}),
            False,
            {"requests": {"cpu": "4"}, "limits": {"cpu": "8"}},
            id="own",
        ),
        pytest.param(
            None,
            True,
            {"requests": CPU_DEFAULT["requests"], "limits": {**CPU_DEFAULT["limits"], "nvidia.com/gpu": "1"}},
            id="gpu-pod-gets-one-gpu",
        ),
        pytest.param(
            res({"nvidia.com/gpu": "2"}),
            True,
            {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
            id="gpu-limit-is-the-request",
        ),
        pytest.param(
            res(limits={"nvidia.com/gpu": "4"}),
            True,
            {"limits": {"nvidia.com/gpu": "4"}},
            id="own-gpu-limit-kept",
        ),
    ],
)
def test_resources(own: Resources | None, gpu: bool, expected: dict) -> None:
    assert placement.resources(own, DEFAULT, gpu) == expected


ROLE_DEFAULT = operator_config.RoleDefaults(
    node_selector={"pool": "gpu"},
    tolerations=[Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
    affinity=Affinity(pod_anti_affinity={"preferredDuringSchedulingIgnoredDuringExecution": []}),
    priority_class_name="batch",
)
DEFAULT_SCHEDULING = {
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    "priorityClassName": "batch",
}


@pytest.mark.parametrize(
    ("own", "default", "expected"),
    [
        pytest.param({}, operator_config.RoleDefaults(), {}, id="nothing-anywhere-nothing-in-the-pod"),
        pytest.param({}, ROLE_DEFAULT, DEFAULT_SCHEDULING, id="unset-takes-every-default"),
        pytest.param(
            {"nodeSelector": {"disk": "ssd"}, "priorityClassName": "urgent"},
            ROLE_DEFAULT,
            {**DEFAULT_SCHEDULING, "nodeSelector": {"disk": "ssd"}, "priorityClassName": "urgent"},
            id="each-field-on-its-own",
        ),
        pytest.param(
            {"nodeSelector": {}, "tolerations": [], "affinity": {}, "priorityClassName": ""},
            ROLE_DEFAULT,
            {},
            id="empty-clears-the-default",
        ),
        pytest.param(
            {"tolerations": [{"operator": "Exists"}], "affinity": {"nodeAffinity": {"x": 1}}},
            operator_config.RoleDefaults(),
            {"tolerations": [{"operator": "Exists"}], "affinity": {"nodeAffinity": {"x": 1}}},
            id="passed-on-as-written",
        ),
    ],
)
def test_scheduling(own: dict, default: operator_config.RoleDefaults, expected: dict) -> None:
    assert placement.scheduling(Trainers.model_validate(own), default) == expected


def spec(**sections: Any) -> GraphTrainingSpec:
    return parse(edit(GRAPHSAGE, lambda s: s.update(sections))).spec


# ------------------------------------------------------------------- GPU pods' scheduling defaults

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT = {"key": "spot", "operator": "Exists"}
GPU_NODES = {"nvidia.com/gpu.present": "true", "pool": "gpu"}
ROLE_ONLY = {"nodeSelector": {"zone": "a"}, "tolerations": [SPOT]}
ROLE_AND_GPU = {"nodeSelector": {**GPU_NODES, "zone": "a"}, "tolerations": [SPOT, GPU_TOLERATION]}
GPU_CONFIG = operator_config.OperatorConfig.model_validate(
    {
        "defaults": {role: ROLE_ONLY for role in ("partition", "shardServers", "trainers")},
        "gpu": {"nodeSelector": GPU_NODES},  # tolerations: the built-in [GPU_TOLERATION]
    }
)


def test_the_built_in_gpu_defaults_tolerate_the_gpu_taint_and_select_no_nodes() -> None:
    gpu = operator_config.OperatorConfig().gpu
    assert placement.with_gpu_defaults({}, gpu) == {"tolerations": [GPU_TOLERATION]}
    assert gpu.node_selector == {}


@pytest.mark.parametrize(
    ("own", "config", "expected"),
    [
        pytest.param({}, GPU_CONFIG, ROLE_AND_GPU, id="unset-role-default-then-gpu"),
        pytest.param(
            {"tolerations": [{"key": "team", "value": "ml"}]},
            GPU_CONFIG,
            {**ROLE_AND_GPU, "tolerations": [{"key": "team", "value": "ml"}, GPU_TOLERATION]},
            id="own-tolerations-then-gpu",
        ),
        pytest.param(
            {"tolerations": []},
            GPU_CONFIG,
            {**ROLE_AND_GPU, "tolerations": [GPU_TOLERATION]},
            id="empty-tolerations-clear-the-role-default-not-the-gpu-one",
        ),
        pytest.param(
            {"tolerations": [GPU_TOLERATION, SPOT]},
            GPU_CONFIG,
            {**ROLE_AND_GPU, "tolerations": [GPU_TOLERATION, SPOT]},
            id="an-equal-toleration-once",
        ),
        pytest.param(
            {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
            GPU_CONFIG,
            {
                **ROLE_AND_GPU,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TOLERATION],
            },
            id="a-different-toleration-of-the-same-key-kept-beside",
        ),
        pytest.param(
            {"nodeSelector": {"pool": "a100"}},
            GPU_CONFIG,
            {**ROLE_AND_GPU, "nodeSelector": {"nvidia.com/gpu.present": "true", "pool": "a100"}},
            id="own-node-selector-key-wins",
        ),
        pytest.param(
            {"nodeSelector": {}},
            GPU_CONFIG,
            {**ROLE_AND_GPU, "nodeSelector": GPU_NODES},
            id="empty-node-selector-keeps-the-gpu-keys",
        ),
        pytest.param(
            {"affinity": {"nodeAffinity": {"x": 1}}, "priorityClassName": "urgent"},
            GPU_CONFIG,
            {**ROLE_AND_GPU, "affinity": {"nodeAffinity": {"x": 1}}, "priorityClassName": "urgent"},
            id="the-other-fields-untouched",
        ),
        pytest.param(
            {"tolerations": []},
            operator_config.OperatorConfig.model_validate({"gpu": {"tolerations": []}}),
            {},
            id="the-administrator-turns-them-off",
        ),
    ],
)
@pytest.mark.parametrize("role", ["trainer", "shards"])
def test_gpu_defaults_merge_beneath_the_specs_own_fields(
    own: dict, config: operator_config.OperatorConfig, expected: dict, role: placement.Role
) -> None:
    section = "trainers" if role == "trainer" else "shardServers"
    settings = placement.pod_settings(spec(**{section: {"device": "cuda", **own}}), config, role)
    assert settings.pod_spec == expected


GPU_SPEC = {"shardServers": {"device": "cuda"}, "trainers": {"device": "cuda"}}
IMAGES = operator_config.OperatorConfig.model_validate(
    {"images": {"runtime": "reg/rt:1", "cuda": "reg/rt:1-cuda"}}
)


@pytest.mark.parametrize(
    ("sections", "role", "expected"),
    [
        pytest.param({}, "partition", "reg/rt:1", id="partition-runtime"),
        pytest.param({}, "shards", "reg/rt:1", id="cpu-shards-runtime"),
        pytest.param({}, "trainer", "reg/rt:1", id="gloo-trainers-runtime"),
        pytest.param(GPU_SPEC, "partition", "reg/rt:1", id="partition-never-cuda"),
        pytest.param(GPU_SPEC, "shards", "reg/rt:1-cuda", id="cuda-shards"),
        pytest.param(GPU_SPEC, "trainer", "reg/rt:1-cuda", id="cuda-trainers"),
        pytest.param(
            {"shardServers": {"device": "cuda"}}, "trainer", "reg/rt:1", id="cpu-trainers-beside-cuda-shards"
        ),
        pytest.param(
            {"trainers": {"device": "cuda"}}, "shards", "reg/rt:1", id="cpu-shards-beside-cuda-trainers"
        ),
        pytest.param(
            {"trainers": {"device": "cuda", "backend": "gloo"}}, "trainer", "reg/rt:1-cuda", id="gloo-on-gpus"
        ),
        pytest.param({**GPU_SPEC, "image": "mine:2"}, "shards", "mine:2", id="spec-image-overrides-all"),
        pytest.param({"image": "mine:2"}, "partition", "mine:2", id="spec-image-partition"),
    ],
)
def test_image(sections: dict, role: placement.Role, expected: str) -> None:
    s = spec(**sections)
    assert placement.image(s, IMAGES, placement.uses_gpu(s, role)) == expected


def test_default_images_are_the_package_version() -> None:
    images = operator_config.OperatorConfig().images
    version = operator_config.package_version()
    assert (images.runtime, images.cuda) == (
        f"ghcr.io/graphtrain/graphtrain:{version}",
        f"ghcr.io/graphtrain/graphtrain:{version}-cuda",
    )


CLAIMS = operator_config.OperatorConfig.model_validate(
    {"storage": {"storageClassName": "nfs", "accessModes": ["ReadWriteOnce"], "size": "50Gi"}}
)


@pytest.mark.parametrize(
    ("storage", "config", "expected"),
    [
        pytest.param(
            {},
            operator_config.OperatorConfig(),
            placement.ClaimSettings(None, ["ReadWriteMany"], "10Gi"),
            id="built-in",
        ),
        pytest.param({}, CLAIMS, placement.ClaimSettings("nfs", ["ReadWriteOnce"], "50Gi"), id="configured"),
        pytest.param(
            {"storageClassName": "fast", "accessModes": ["ReadWriteOncePod"], "size": "1Ti"},
            CLAIMS,
            placement.ClaimSettings("fast", ["ReadWriteOncePod"], "1Ti"),
            id="spec-wins",
        ),
        pytest.param(
            {"size": 5000000000},
            CLAIMS,
            placement.ClaimSettings("nfs", ["ReadWriteOnce"], "5000000000"),
            id="each-field-on-its-own",
        ),
        pytest.param(
            {"storageClassName": ""},
            CLAIMS,
            placement.ClaimSettings(None, ["ReadWriteOnce"], "50Gi"),
            id="empty",
        ),
    ],
)
def test_claim(
    storage: dict, config: operator_config.OperatorConfig, expected: placement.ClaimSettings
) -> None:
    assert placement.claim_settings(spec(storage=storage).storage, config) == expected


# ------------------------------------------------------------------------------------ rendered pods

OWNER = {"metadata": {"name": "wn", "namespace": "ml", "uid": "u1"}}
CONFIG = operator_config.OperatorConfig.model_validate(
    {
        "images": {
            "runtime": "reg/rt:1",
            "cuda": "reg/rt:1-cuda",
            "pullPolicy": "Always",
            "pullSecrets": ["r"],
        },
        "defaults": {
            "shardServers": {
                "resources": {"requests": {"cpu": 3, "memory": "6Gi"}, "limits": {"memory": "12Gi"}},
                "nodeSelector": {"pool": "mem"},
            }
        },
        "storage": {"offline": True},
        "networkPolicy": {"metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]},
    }
)


def pods(gt: GraphTraining, config: operator_config.OperatorConfig) -> dict[str, dict]:
    """role -> the pod spec the operator renders for it."""
    return {
        "partition": manifests.partition_job(OWNER, gt, config)["spec"]["template"]["spec"],
        "shards": manifests.shard_statefulset(OWNER, gt, config)["spec"]["template"]["spec"],
        "trainer": manifests.trainer_pod(OWNER, gt, config, 0, 0)["spec"],
    }


@pytest.mark.parametrize("trainers", ["cpu", "cuda"])
@pytest.mark.parametrize("shards", ["cpu", "cuda"])
def test_gpus_follow_each_roles_device(trainers: str, shards: str) -> None:
    """Every combination of trainers.device and shardServers.device: a role on cuda gets the CUDA image
    and one GPU, the other role neither; the partition Job never does. GPU trainers get nccl unless the
    spec names a backend."""
    gt = parse(
        edit(GRAPHSAGE, lambda s: s.update(trainers={"device": trainers}, shardServers={"device": shards}))
    )
    assert gt.spec.trainers.backend == ("nccl" if trainers == "cuda" else "gloo")
    rendered = pods(gt, CONFIG)
    for role, device in (("trainer", trainers), ("shards", shards), ("partition", "cpu")):
        (container,) = rendered[role]["containers"]
        gpu = container["resources"].get("limits", {}).get("nvidia.com/gpu")
        assert (container["image"], gpu) == (
            ("reg/rt:1-cuda", "1") if device == "cuda" else ("reg/rt:1", None)
        ), role


@pytest.mark.parametrize(
    ("trainers", "shards", "expected"),
    [
        pytest.param("cpu", "cpu", {"trainer": ROLE_ONLY, "shards": ROLE_ONLY}, id="cpu-cpu"),
        pytest.param("cuda", "cpu", {"trainer": ROLE_AND_GPU, "shards": ROLE_ONLY}, id="gpu-trainers"),
        pytest.param("cpu", "cuda", {"trainer": ROLE_ONLY, "shards": ROLE_AND_GPU}, id="gpu-shards"),
        pytest.param("cuda", "cuda", {"trainer": ROLE_AND_GPU, "shards": ROLE_AND_GPU}, id="gpu-both"),
    ],
)
def test_gpu_defaults_reach_the_pods_of_each_role_on_a_gpu(
    trainers: str, shards: str, expected: dict
) -> None:
    """Every combination of the two devices, as rendered: a role on cuda gets its own defaults with the
    GPU ones beneath, a role on the CPU its own only, and the partition Job never the GPU ones."""
    gt = parse(
        edit(GRAPHSAGE, lambda s: s.update(trainers={"device": trainers}, shardServers={"device": shards}))
    )
    rendered = pods(gt, GPU_CONFIG)
    for role, want in {**expected, "partition": ROLE_ONLY}.items():
        got = {k: rendered[role].get(k) for k in ("nodeSelector", "tolerations")}
        assert got == want, role


def test_every_pod_gets_its_roles_settings_and_is_restricted() -> None:
    gt = parse(
        edit(
            GRAPHSAGE,
            lambda s: s.update(
                trainers={"priorityClassName": "urgent", "tolerations": [{"key": "t", "value": "v"}]},
                shardServers={"device": "cuda"},
            ),
        )
    )
    rendered = pods(gt, CONFIG)
    for role, pod in rendered.items():
        (container,) = pod["containers"]
        ctx, psc = container["securityContext"], pod["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True, role
        assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["runAsNonRoot"] and psc["runAsNonRoot"], role
        assert ctx["seccompProfile"] == psc["seccompProfile"] == {"type": "RuntimeDefault"}, role
        assert container["resources"]["requests"] and container["resources"]["limits"], role
        assert container["imagePullPolicy"] == "Always" and pod["imagePullSecrets"] == [{"name": "r"}], role
        assert {"name": "GRAPHTRAIN_OFFLINE", "value": "1"} in container["env"], role
        for name, value in roles.process_env({}).items():  # a short OpenMP spin
            assert {"name": name, "value": value} in container["env"], role
        assert not any("hostPath" in v for v in pod["volumes"]), role
    shard = rendered["shards"]["containers"][0]
    assert shard["image"] == "reg/rt:1-cuda" and rendered["shards"]["nodeSelector"] == {"pool": "mem"}
    assert shard["resources"] == {
        "requests": {"cpu": "3", "memory": "6Gi"},
        "limits": {"memory": "12Gi", "nvidia.com/gpu": "1"},
    }
    assert rendered["trainer"]["priorityClassName"] == "urgent"
    assert rendered["trainer"]["tolerations"] == [{"key": "t", "value": "v"}]
    assert rendered["trainer"]["containers"][0]["image"] == "reg/rt:1"
    part = rendered["partition"]["containers"][0]
    assert part["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "4Gi"},
    }
    assert "nodeSelector" not in rendered["partition"] and "priorityClassName" not in rendered["partition"]


def test_online_pods_may_download() -> None:
    for role, pod in pods(parse(GRAPHSAGE), operator_config.OperatorConfig()).items():
        assert all(e["name"] != "GRAPHTRAIN_OFFLINE" for e in pod["containers"][0]["env"]), role
        assert "imagePullSecrets" not in pod, role


def test_trainer_network_policy_admits_only_the_trainings_pods() -> None:
    """Without partition locality the trainer pods listen too (rank 0's rendezvous store, gloo's pair
    ports, metrics): only the training's own trainers reach them, and its pods and scrapers the metrics."""
    gt = parse(GRAPHSAGE)
    policy = manifests.trainer_network_policy(OWNER, gt, CONFIG)
    assert policy is not None and policy["metadata"]["labels"][LABEL_ROLE] == "network"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {LABEL_TRAINING: "wn", LABEL_ROLE: "trainer"}}
    assert spec["policyTypes"] == ["Ingress"]
    peers, metrics = spec["ingress"]
    own = {"matchLabels": {LABEL_TRAINING: "wn", LABEL_ROLE: "trainer"}}
    assert peers == {"from": [{"podSelector": own}]}
    assert metrics["ports"] == [{"protocol": "TCP", "port": manifests.METRICS_PORT}]
    off = operator_config.parse({"networkPolicy": {"enabled": False}})
    assert manifests.trainer_network_policy(OWNER, gt, off) is None


def test_shard_network_policy_admits_only_the_trainings_pods() -> None:
    gt = parse(GRAPHSAGE)
    policy = manifests.shard_network_policy(OWNER, gt, CONFIG)
    assert policy is not None and policy["metadata"]["labels"][LABEL_ROLE] == "network"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {LABEL_TRAINING: "wn", LABEL_ROLE: "shards"}}
    assert spec["policyTypes"] == ["Ingress"]
    kvstore, fast, metrics = spec["ingress"]
    assert kvstore["ports"] == [{"protocol": "TCP", "port": manifests.SHARD_PORT}]
    assert kvstore["from"] == [
        {"podSelector": {"matchLabels": {LABEL_TRAINING: "wn", LABEL_ROLE: role}}}
        for role in ("trainer", "partition")
    ]
    # the fast lane (small pulls) from the trainers only: the partition job never pulls
    assert fast["ports"] == [{"protocol": "TCP", "port": manifests.FAST_PORT}]
    assert fast["from"] == [{"podSelector": {"matchLabels": {LABEL_TRAINING: "wn", LABEL_ROLE: "trainer"}}}]
    assert metrics["ports"] == [{"protocol": "TCP", "port": manifests.METRICS_PORT}]
    assert metrics["from"] == [
        {"podSelector": {"matchLabels": {LABEL_TRAINING: "wn"}}},
        {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}},
    ]
    # the pods the rules name carry those labels
    labels = {
        "trainer": manifests.trainer_pod(OWNER, gt, CONFIG, 0, 0)["metadata"]["labels"],
        "partition": manifests.partition_job(OWNER, gt, CONFIG)["spec"]["template"]["metadata"]["labels"],
        "shards": manifests.shard_statefulset(OWNER, gt, CONFIG)["spec"]["template"]["metadata"]["labels"],
    }
    for role, got in labels.items():
        assert got[LABEL_ROLE] == role and got[LABEL_TRAINING] == "wn"


def test_the_fast_lane_is_on_port_7001_unless_the_spec_turns_it_off() -> None:
    """shardServers.fastLane false: the servers get --fast-port -1 and the policy opens no lane port."""

    def fast_port(gt) -> str:  # noqa: ANN001
        args = manifests.shard_statefulset(OWNER, gt, CONFIG)["spec"]["template"]["spec"]["containers"][0][
            "args"
        ]
        return args[args.index("--fast-port") + 1]

    on = parse(GRAPHSAGE)
    off = parse(edit(GRAPHSAGE, lambda s: s.update(shardServers={"fastLane": False})))
    assert (fast_port(on), fast_port(off)) == (str(manifests.FAST_PORT), "-1")
    ports = [
        [
            p["port"]
            for rule in manifests.shard_network_policy(OWNER, gt, CONFIG)["spec"]["ingress"]
            for p in rule["ports"]
        ]
        for gt in (on, off)
    ]
    assert manifests.FAST_PORT in ports[0] and manifests.FAST_PORT not in ports[1]


def test_trainer_pods_serve_metrics_on_a_named_port_of_their_own_ip() -> None:
    """The chart's PodMonitor scrapes the port named `metrics` of shard and trainer pods alike."""
    gt = parse(GRAPHSAGE)
    (container,) = manifests.trainer_pod(OWNER, gt, CONFIG, 1, 0)["spec"]["containers"]
    assert {"name": "metrics", "containerPort": manifests.METRICS_PORT} in container["ports"]
    args = container["args"]
    assert args[args.index("--metrics-port") + 1] == str(manifests.METRICS_PORT)
    assert args[args.index("--metrics-host") + 1] == f"$({manifests.POD_IP_ENV})"
    assert {
        "name": manifests.POD_IP_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    } in container["env"]
    # the training's only NetworkPolicy selects its shard servers: a trainer's ingress (its metrics port
    # included) is not restricted by it
    policy = manifests.shard_network_policy(OWNER, gt, CONFIG)
    assert policy is not None
    assert policy["spec"]["podSelector"]["matchLabels"][LABEL_ROLE] == "shards"


def test_shard_disruption_budget_allows_no_eviction() -> None:
    pdb = manifests.shard_disruption_budget(OWNER, parse(GRAPHSAGE), CONFIG)
    assert pdb is not None and pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {
        "maxUnavailable": 0,
        "selector": {"matchLabels": {LABEL_TRAINING: "wn", LABEL_ROLE: "shards"}},
    }


def test_disabled_policies_are_not_made() -> None:
    off = operator_config.OperatorConfig.model_validate(
        {"networkPolicy": {"enabled": False}, "podDisruptionBudget": {"enabled": False}}
    )
    gt = parse(GRAPHSAGE)
    assert (
        manifests.shard_network_policy(OWNER, gt, off) is None
        and manifests.shard_disruption_budget(OWNER, gt, off) is None
    )


def test_the_data_claim_follows_spec_and_config() -> None:
    gt = parse(edit(GRAPHSAGE, lambda s: s.update(storage={"size": "20Gi"})))
    claim = manifests.data_claim(OWNER, gt, CLAIMS)
    assert claim is not None and claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "nfs",
    }
    default = manifests.data_claim(OWNER, parse(GRAPHSAGE), operator_config.OperatorConfig())
    assert default is not None and "storageClassName" not in default["spec"]
    named = parse(edit(GRAPHSAGE, lambda s: s.update(storage={"volumeClaimName": "seeded"})))
    assert manifests.data_claim(OWNER, named, CLAIMS) is None


@pytest.mark.parametrize(
    ("resources", "threads"),
    [
        ({"requests": {"cpu": "3500m"}}, "3"),  # a request alone: its whole cores
        ({"requests": {"cpu": "250m"}}, "1"),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}, None),  # a limit: the trainer reads its quota
        ({"requests": {"memory": "1Gi"}}, None),  # no CPU stated: the cores it may use
    ],
)
def test_a_trainer_pod_requesting_cpu_without_a_limit_runs_that_many_threads(
    resources: dict, threads: str | None
) -> None:
    """Without a limit the trainer's cgroup has no quota, and torch would start a thread per node core."""
    gt = parse(edit(GRAPHSAGE, lambda s: s.update(trainers={"replicas": 2, "resources": resources})))
    (container,) = manifests.trainer_pod(OWNER, gt, CONFIG, 1, 0)["spec"]["containers"]
    args = container["args"]
    assert (args[args.index("--threads") + 1] if "--threads" in args else None) == threads
