"""helm and the chart for the tests: render a scenario, run helm against a cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "graphtrain"
SCENARIOS = sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.36.0"  # the test API server's (../shared/k8s-testenv): Kubernetes 1.36
RELEASE, NAMESPACE = "gt", "graphtrain"


def helm_path() -> str:
    found = shutil.which("helm", path=str(Path(sys.executable).parent))
    if not found:  # `make install` puts it there (charts/install_helm.py)
        pytest.fail("helm is not installed in this environment: run `make install`")
    return found


def helm(*args: str, kubeconfig: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """helm with args; raises with helm's stderr when it fails and check is set."""
    env_args = ["--kubeconfig", kubeconfig] if kubeconfig else []
    res = subprocess.run(
        [helm_path(), *args, *env_args], capture_output=True, text=True, timeout=180, check=False
    )
    if check and res.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({res.returncode}):\n{res.stderr}")
    return res


def values_file(scenario: str) -> str:
    return str(CHART / "ci" / f"{scenario}-values.yaml")


def template(scenario: str = "default", *extra: str, namespace: str = NAMESPACE) -> str:
    """helm template of a ci/ scenario, tests (hooks) included, as text."""
    return helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        "-f",
        values_file(scenario),
        *extra,
    ).stdout


def render(scenario: str = "default", *extra: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The objects of a scenario: helm template parsed, empty documents dropped."""
    return [doc for doc in yaml.safe_load_all(template(scenario, *extra, namespace=namespace)) if doc]


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} in {[o['kind'] for o in objs]}"
    return found[0]


def operator_options() -> set[str]:
    """The options `graphtrain operator` takes, read from its --help: what the Deployment may pass."""
    exe = Path(sys.executable).parent / "graphtrain"
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    out = subprocess.run(
        [str(exe), "operator", "--help"], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return set(re.findall(r"--[a-z][a-z-]*", out.stdout))


def command_line(objs: list[dict[str, Any]], operator: str, config_file: Path) -> list[str]:
    """The command line of the chart's operator Deployment `operator` among `objs`, to run here: the
    config file from its rendered ConfigMap, health and metrics on free loopback ports; every other
    option as the chart passes it."""
    container = one(objs, "Deployment", operator)["spec"]["template"]["spec"]["containers"][0]
    config = one(objs, "ConfigMap", f"{operator}-config")["data"]["config.yaml"]
    config_file.write_text(config)
    local = {
        "--config": str(config_file),
        "--health-address": "127.0.0.1:0",
        "--metrics-address": "127.0.0.1:0",
    }
    args = []
    for arg in container["args"][1:]:  # after "operator"
        option, eq, value = arg.partition("=")
        args.append(f"{option}={local.get(option, value)}" if eq else option)
    assert container["command"] == ["graphtrain"] and container["args"][0] == "operator"
    return [str(Path(sys.executable).parent / "graphtrain"), "operator", *args]
