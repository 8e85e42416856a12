"""The operator configuration file: its defaults, what it refuses (one line naming the key), and how
`graphtrain operator` reports a bad one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphtrain.operator import config

FULL = """
images:
  runtime: registry.local/graphtrain:1
  cuda: registry.local/graphtrain:1-cuda
  pullPolicy: Always
  pullSecrets: [regcred]
defaults:
  partition: {resources: {requests: {cpu: 250m, memory: 512Mi}, limits: {cpu: 1, memory: 2Gi}}}
  shardServers:
    resources: {requests: {cpu: 2, memory: 4Gi}, limits: {cpu: 4, memory: 16Gi}}
    nodeSelector: {pool: memory}
    tolerations: [{key: memory, operator: Exists, effect: NoSchedule}]
    affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: []}}
    priorityClassName: graphtrain-shards
  trainers: {}
gpu: {tolerations: [{key: gpu, operator: Equal, value: a100}], nodeSelector: {pool: gpu}}
storage: {storageClassName: nfs, accessModes: [ReadWriteMany], size: 100Gi, offline: true}
networkPolicy: {enabled: false, metricsFrom: [{namespaceSelector: {}}]}
podDisruptionBudget: {enabled: false}
"""


def test_built_in_defaults_leave_no_pod_best_effort() -> None:
    cfg = config.OperatorConfig()
    for role in (cfg.defaults.partition, cfg.defaults.shard_servers, cfg.defaults.trainers):
        assert role.resources.requests and role.resources.limits
    assert cfg.defaults.partition.resources.limits == {"cpu": "2", "memory": "4Gi"}
    assert cfg.defaults.shard_servers.resources.requests == {"cpu": "1", "memory": "2Gi"}
    assert cfg.storage.access_modes == ["ReadWriteMany"] and cfg.storage.size == "10Gi"
    assert cfg.network_policy.enabled and cfg.pod_disruption_budget.enabled and not cfg.storage.offline
    assert cfg.images.pull_policy == "IfNotPresent" and cfg.images.pull_secrets == []
    (gpu,) = cfg.gpu.tolerations  # GPU pods tolerate the NVIDIA GPU Operator's taint; no nodeSelector
    assert (gpu.key, gpu.operator, gpu.effect, cfg.gpu.node_selector) == (
        "nvidia.com/gpu",
        "Exists",
        "NoSchedule",
        {},
    )


def test_a_full_file_reads_as_written(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL)
    cfg = config.load(path)
    assert cfg.images.cuda == "registry.local/graphtrain:1-cuda" and cfg.images.pull_secrets == ["regcred"]
    assert cfg.defaults.partition.resources.limits == {"cpu": "1", "memory": "2Gi"}
    shards = cfg.defaults.shard_servers
    assert shards.tolerations[0].key == "memory" and shards.priority_class_name == "graphtrain-shards"
    assert shards.affinity.pod_anti_affinity == {"preferredDuringSchedulingIgnoredDuringExecution": []}
    assert cfg.defaults.trainers.resources.limits == {"cpu": "2", "memory": "8Gi"}  # {}: the role's default
    assert cfg.gpu.tolerations[0].value == "a100" and cfg.gpu.node_selector == {"pool": "gpu"}
    assert cfg.storage.offline and cfg.storage.storage_class_name == "nfs"
    assert not cfg.network_policy.enabled and cfg.network_policy.metrics_from == [{"namespaceSelector": {}}]


def test_the_environment_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("storage: {size: 1Ti}\n")
    monkeypatch.setenv(config.ENV_CONFIG, str(path))
    assert config.load().storage.size == "1Ti"
    monkeypatch.setenv(config.ENV_CONFIG, "")
    assert config.load() == config.OperatorConfig()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "images: {pullPolicy: Sometimes}\n",
            "images.pullPolicy: Input should be 'Always', 'IfNotPresent' or 'Never', got 'Sometimes'",
        ),
        ("storage: {sise: 10Gi}\n", "storage.sise: unknown setting"),
        (
            "networkPolicy: {enabled: 'yes'}\n",
            "networkPolicy.enabled: Input should be a valid boolean, got 'yes'",
        ),
        ("storage: {size: ten}\n", "storage.size: 'ten' is not a Kubernetes quantity"),
        ("storage: {accessModes: [ReadWriteSometimes]}\n", "storage.accessModes.0: Input should be"),
        (
            "defaults: {trainers: {resources: {limits: {cpu: 2}}}}\n",
            "defaults.trainers: resources must set requests and limits",
        ),
        (
            "defaults: {partition: {resources: {requests: {memory: 16Gi}, limits: {memory: 4Gi}}}}\n",
            "defaults.partition: resources.requests.memory: 16Gi is above resources.limits.memory 4Gi",
        ),
        (
            "defaults: {shardServers: {tolerations: [{value: x}]}}\n",
            "defaults.shardServers.tolerations.0.key: is required unless operator is Exists",
        ),
        ("gpu: {tolerations: [{operator: Exists, value: x}]}\n", "gpu.tolerations.0.value: must be empty"),
        ("gpu: {nodeSelector: {pool: 1}}\n", "gpu.nodeSelector.pool: Input should be a valid string, got 1"),
        ("- a list\n", "expected a mapping of settings, got list"),
        (
            "images: {pullSecrets: [{name: hunter2}]}\n",
            "images.pullSecrets.0: Input should be a valid string (value not",
        ),
        (
            "storage: {size: [1, 2]}\n",
            "storage.size: expected a Kubernetes quantity such as '2', '500m' or '4Gi', got a list",
        ),
        ("podSecurity: 5\n", "podSecurity: Input should be an object, got 5"),  # no class name of the code's
        (
            "images: [x\n",
            "not YAML: expected ',' or ']', but got '<stream end>' at line 2, column 1 (while parsing a flow "
            "sequence from line 1, column 9)",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as info:
        config.load(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)) and needle in message, message


def operator_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "graphtrain.cli", "operator", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def test_the_command_refuses_a_bad_file_in_one_line_before_anything_else(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("images: {runtime: ''}\nstorage: {offline: maybe}\n")
    out = operator_command("--config", str(path))
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and "images.runtime" in line and "storage.offline" in line
    env = {**os.environ, config.ENV_CONFIG: str(tmp_path / "missing.yaml")}
    out = operator_command(env=env)
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 1
    missing = tmp_path / "missing.yaml"
    assert line == f"error: {missing}: cannot read the operator configuration: No such file or directory"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--leader-elect", "--lease-duration", "5", "--renew-deadline", "5"],
            "--lease-duration must be longer",
        ),
        (
            ["--leader-elect", "--renew-deadline", "2", "--retry-period", "2"],
            "--renew-deadline must be longer",
        ),
        (["--health-address", "localhost"], "'localhost' is not HOST:PORT"),
        (["--metrics-address", "127.0.0.1:99999"], "is not HOST:PORT"),
    ],
)
def test_the_command_refuses_bad_flags_in_one_line(args: list[str], needle: str) -> None:
    out = operator_command(*args)
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 1 and needle in line, line
