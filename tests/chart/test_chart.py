"""The chart without a cluster: helm lint, every ci/ scenario rendered and validated against Kubernetes
1.36's schemas (kubernetes-validate --strict), the values schema refusing typos and wrong types by name,
and the operator's command line and config file as the contract between the branches (contract-16.md)
fixes them."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from graphtrain.contract.spec import Resources
from tests.chart.chart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    ROOT,
    SCENARIOS,
    find,
    helm,
    one,
    operator_options,
    render,
    template,
)

pytestmark = pytest.mark.timeout(120)

OPERATOR = "gt-graphtrain-operator"  # the operator's objects in release "gt"
CONFIG_PATH = "/etc/graphtrain/operator/config.yaml"
ROLE_DEFAULT_KEYS = {"resources", "nodeSelector", "tolerations", "affinity", "priorityClassName"}


def test_the_scenarios_are_the_five_of_issue_16_and_observability() -> None:
    assert SCENARIOS == ["default", "existing-claim", "gpu", "monitoring", "namespaced", "observability"]


def test_lint_with_default_values() -> None:
    out = helm("lint", str(CHART), "--strict").stdout
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict_with_each_scenario(scenario: str) -> None:
    out = helm("lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, "-f", values(scenario)).stdout
    assert "0 chart(s) failed" in out and "[WARNING]" not in out, out


def values(scenario: str) -> str:
    return str(CHART / "ci" / f"{scenario}-values.yaml")


def validate(manifests: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "kubernetes-validate"
    return subprocess.run(
        [str(exe), "--strict", "--kubernetes-version", KUBE_VERSION, "--quiet", "-"],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_renders_valid_kubernetes_objects(scenario: str) -> None:
    """Every object against 1.36's OpenAPI schemas, unknown fields refused; the ServiceMonitor (a CRD the
    package has no schema for) is checked against its Service in test_the_service_monitor_..., the
    Prometheus Operator's other kinds in test_monitoring.py"""
    res = validate(template(scenario))
    lines = [line for line in (res.stdout + res.stderr).splitlines() if line.strip()]
    unchecked = [line for line in lines if "Couldn't find schema" in line]
    assert res.returncode == 0 and len(lines) == len(unchecked), "\n".join(lines)
    expected = {
        "monitoring": ["ServiceMonitor"],
        "observability": ["PodMonitor", "PrometheusRule", "ServiceMonitor", "ServiceMonitor"],
    }.get(scenario, [])
    kinds = sorted(line.split("kind ")[1].split()[0] for line in unchecked)
    assert kinds == expected


def test_the_validation_refuses_an_unknown_field() -> None:
    """The check above can fail: a misspelt field in a rendered Deployment is an error."""
    bad = template().replace("automountServiceAccountToken: true", "automountServiceAccountTokn: true")
    res = validate(bad)
    assert res.returncode != 0 and "automountServiceAccountTokn" in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("replica=2", "replica"),  # a typo'd key
        ("replicas=two", "replicas"),  # a wrong type
        ("leaderElection.enable=true", "enable"),
        ("leaderElection.leaseName=Bad_Name", "leaderElection.leaseName"),
        ("trainings.storage.acessModes={ReadWriteOnce}", "acessModes"),
        ("trainings.storage.accessModes={ReadWriteSome}", "trainings.storage.accessModes"),
        ("trainings.storage.size=lots", "trainings.storage.size"),
        ("trainings.defaults.trainers.resources.limits.memry=1Gi", "memry"),
        ("trainings.defaults.trainer.resources.limits.cpu=1", "trainer"),
        ("resources.limits.cpu=fast", "resources.limits.cpu"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("watchNamespaces={Team_A}", "watchNamespaces"),
        ("metrics.serviceMonitor.interval=30", "metrics.serviceMonitor.interval"),
        ("networkPolicy.apiServer.cidrs={10.0.0.1}", "networkPolicy.apiServer.cidrs"),
        ("api.enabled=yes", "api.enabled"),
        ("api.auth.existingSecret=Bad_Name", "api.auth.existingSecret"),
        ("api.servicemonitor.enabled=true", "servicemonitor"),
        ("dashboards.labelValue=a b", "dashboards.labelValue"),
        ("dashboards.namespace=Grafana", "dashboards.namespace"),
        ("metrics.podMonitor.namespaceSelector.all=true", "all"),
        ("prometheusRule.noProgressMinutes=0", "prometheusRule.noProgressMinutes"),
        ("prometheusRule.shardRestartWindow=15", "prometheusRule.shardRestartWindow"),
        ("prometheusRule.severity.failed=Page Me", "prometheusRule.severity.failed"),
    ],
)
def test_the_schema_refuses_a_bad_value_naming_it(setting: str, named: str) -> None:
    res = helm("lint", str(CHART), "--set", setting, check=False)
    assert res.returncode != 0, f"{setting} passed helm lint"
    said = res.stdout + res.stderr
    assert named in said and "values don't meet the specifications of the schema" in said, said
    installed = helm("template", "gt", str(CHART), "--set", setting, check=False)
    assert installed.returncode != 0 and named in installed.stderr  # install renders the same way


def test_versions_and_default_images_follow_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert (chart["apiVersion"], chart["version"], chart["appVersion"]) == ("v2", "0.1.0", version)
    assert chart["kubeVersion"] and chart["home"] and chart["sources"] and chart["maintainers"]
    objs = render()
    container = operator_container(objs)
    assert container["image"] == f"ghcr.io/graphtrain/graphtrain-control:{version}"
    images = config(objs)["images"]
    assert images["runtime"] == f"ghcr.io/graphtrain/graphtrain:{version}"
    assert images["cuda"] == f"ghcr.io/graphtrain/graphtrain:{version}-cuda"
    digest = "sha256:" + "ab" * 32
    pinned = operator_container(render("default", "--set", f"image.digest={digest}"))
    assert pinned["image"] == f"ghcr.io/graphtrain/graphtrain-control@{digest}"


def operator_container(objs: list[dict]) -> dict:
    pod = one(objs, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["operator"]
    return pod["containers"][0]


def config(objs: list[dict]) -> dict:
    return yaml.safe_load(one(objs, "ConfigMap", f"{OPERATOR}-config")["data"]["config.yaml"])


LEADER_ARGS = [
    "--leader-elect",
    f"--lease-name={OPERATOR}",
    f"--lease-namespace={NAMESPACE}",
    f"--lease-owner={OPERATOR}",  # the Lease goes with the Deployment (garbage collector)
    "--lease-duration=15",
    "--renew-deadline=10",
    "--retry-period=2",
]
ADDRESSES = ["--health-address=0.0.0.0:8081", "--metrics-address=0.0.0.0:8080", "--log-format=json"]


@pytest.mark.parametrize(
    ("scenario", "sets", "args"),
    [
        ("default", [], [*LEADER_ARGS, *ADDRESSES]),
        ("namespaced", [], ["--namespace=a", "--namespace=b", *LEADER_ARGS, *ADDRESSES]),
        ("default", ["--set", "leaderElection.enabled=false"], ADDRESSES),
        ("default", ["--set", "leaderElection.enabled=false,replicas=2"], [*LEADER_ARGS, *ADDRESSES]),
        ("monitoring", [], [*LEADER_ARGS, *ADDRESSES]),
        (
            "default",
            [
                "--set",
                "leaderElection.leaseName=gt-lease,health.port=9000",
                "--set-json",
                "leaderElection.retryPeriod=1.5",
            ],
            [
                *LEADER_ARGS[:1],
                "--lease-name=gt-lease",
                *LEADER_ARGS[2:6],
                "--retry-period=1.5",
                "--health-address=0.0.0.0:9000",
                *ADDRESSES[1:],
            ],
        ),
        (
            "default",
            ["--set", "logging.format=text,logging.verbose=true"],
            [*LEADER_ARGS, *ADDRESSES[:2], "--log-format=text", "--verbose"],
        ),
    ],
)
def test_the_operator_runs_with_the_contract_command_line(
    scenario: str, sets: list[str], args: list[str]
) -> None:
    objs = render(scenario, *sets)
    container = operator_container(objs)
    assert container["command"] == ["graphtrain"]
    assert container["args"] == ["operator", f"--config={CONFIG_PATH}", *args]
    assert {a.split("=", 1)[0] for a in container["args"][1:]} <= operator_options()
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    deployment = one(objs, "Deployment", OPERATOR)
    # without leader election no two operators may overlap, not even during a rollout
    recreate = "--leader-elect" not in args
    assert (deployment["spec"].get("strategy") == {"type": "Recreate"}) == recreate
    assert bool(find(objs, "Role", f"{OPERATOR}-leader-election")) != recreate


@pytest.mark.parametrize("timing", ["renewDeadline=15", "retryPeriod=10", "leaseDuration=2"])
def test_lease_timings_out_of_order_are_refused(timing: str) -> None:
    res = helm("template", "gt", str(CHART), "--set", f"leaderElection.{timing}", check=False)
    assert res.returncode != 0 and "leaseDuration (" in res.stderr and "> retryPeriod (" in res.stderr


def test_the_operator_pod_probes_ports_and_mounts() -> None:
    objs = render()
    pod = one(objs, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    c = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8081, "metrics": 8080}
    assert (c["livenessProbe"]["httpGet"], c["readinessProbe"]["httpGet"]) == (
        {"path": "/healthz", "port": "health"},
        {"path": "/readyz", "port": "health"},
    )
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts == {str(Path(CONFIG_PATH).parent): "config", "/tmp": "tmp"}
    assert volumes["config"]["configMap"]["name"] == f"{OPERATOR}-config" and "emptyDir" in volumes["tmp"]
    assert pod["serviceAccountName"] == OPERATOR and pod["automountServiceAccountToken"] is True
    assert one(objs, "ServiceAccount", OPERATOR)["automountServiceAccountToken"] is False
    test_pod = one(objs, "Pod", "gt-graphtrain-test")
    assert test_pod["spec"]["automountServiceAccountToken"] is False  # no token where none is needed
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_config_file_has_the_contract_format(scenario: str) -> None:
    cfg = config(render(scenario))
    assert set(cfg) == {
        "images",
        "defaults",
        "gpu",
        "storage",
        "networkPolicy",
        "podDisruptionBudget",
        "podSecurity",
    }
    assert set(cfg["images"]) == {"runtime", "cuda", "pullPolicy", "pullSecrets"}
    assert set(cfg["defaults"]) == {"partition", "shardServers", "trainers"}
    for role, defaults in cfg["defaults"].items():
        assert set(defaults) == ROLE_DEFAULT_KEYS, role
        Resources.model_validate(defaults["resources"])  # quantities the spec's own model takes
        for section in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(defaults["resources"][section]), (role, section)
    assert set(cfg["gpu"]) == {"tolerations", "nodeSelector"}
    assert set(cfg["storage"]) == {"storageClassName", "accessModes", "size", "offline"}
    assert set(cfg["networkPolicy"]) == {"enabled", "metricsFrom"}
    assert set(cfg["podDisruptionBudget"]) == {"enabled"}
    assert cfg["podSecurity"] == {"runAsUser": 10001}


def test_the_config_file_carries_the_scenarios_values() -> None:
    default = config(render())
    assert default["defaults"]["partition"]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "4Gi"},
    }
    assert default["storage"] == {
        "storageClassName": "",
        "accessModes": ["ReadWriteMany"],
        "size": "10Gi",
        "offline": False,
    }
    assert default["networkPolicy"]["enabled"] and default["podDisruptionBudget"]["enabled"]
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert default["gpu"] == {"tolerations": [gpu_taint], "nodeSelector": {}}
    gpu = config(render("gpu"))
    assert gpu["defaults"]["trainers"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["defaults"]["trainers"]["tolerations"] == []  # the GPU toleration is the gpu section's
    assert gpu["gpu"] == {"tolerations": [gpu_taint], "nodeSelector": {"nvidia.com/gpu.present": "true"}}
    offline = config(render("existing-claim"))
    assert offline["storage"]["offline"] is True and offline["storage"]["accessModes"] == ["ReadWriteOnce"]
    assert offline["images"]["pullSecrets"] == ["regcred"]
    assert offline["images"]["runtime"].startswith("registry.internal.example/")
    scraped = config(render("monitoring"))["networkPolicy"]["metricsFrom"]
    assert scraped == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def checksum(objs: list[dict]) -> str:
    return one(objs, "Deployment", OPERATOR)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


def test_a_config_change_rolls_the_operator_and_nothing_else_does() -> None:
    base = checksum(render())
    assert checksum(render("default", "--set", "trainings.storage.size=20Gi")) != base
    assert checksum(render("default", "--set", "replicas=3")) == base


def test_the_service_monitor_scrapes_the_metrics_service_of_the_operator_pods() -> None:
    objs = render("monitoring")
    service = one(objs, "Service", f"{OPERATOR}-metrics")
    monitor = one(objs, "ServiceMonitor", OPERATOR)
    pod = one(objs, "Deployment", OPERATOR)["spec"]["template"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in {
        p["name"] for p in pod["spec"]["containers"][0]["ports"]
    }
    assert service["spec"]["publishNotReadyAddresses"] is True  # standbys are scraped too
    assert find(render(), "ServiceMonitor") == []  # off by default


def test_the_network_policy_admits_only_the_operators_ports() -> None:
    for scenario in ("default", "monitoring"):
        objs = render(scenario)
        policy = one(objs, "NetworkPolicy", OPERATOR)["spec"]
        pod = one(objs, "Deployment", OPERATOR)["spec"]["template"]
        assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert policy["policyTypes"] == ["Ingress"]  # egress open unless the API server is named
        ports = [p["port"] for rule in policy["ingress"] for p in rule["ports"]]
        assert sorted(ports) == ["health", "metrics"]
    metrics_rule = policy["ingress"][0]
    test_labels = one(objs, "Pod", "gt-graphtrain-test")["metadata"]["labels"]
    peers = metrics_rule["from"]
    assert peers[0] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    assert peers[1]["podSelector"]["matchLabels"].items() <= test_labels.items()  # `helm test` may read it
    closed = one(
        render("default", "--set", "networkPolicy.apiServer.cidrs={10.0.0.10/32}"), "NetworkPolicy", OPERATOR
    )["spec"]
    assert closed["policyTypes"] == ["Ingress", "Egress"]
    assert closed["egress"] == [
        {
            "to": [{"ipBlock": {"cidr": "10.0.0.10/32"}}],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
        }
    ]
    assert find(render("default", "--set", "networkPolicy.enabled=false"), "NetworkPolicy") == []


def test_every_object_carries_the_release_labels() -> None:
    for scenario in SCENARIOS:
        for obj in render(scenario):
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/instance"] == "gt", obj["metadata"]["name"]
            assert (
                labels["app.kubernetes.io/name"] == "graphtrain"
                and labels["helm.sh/chart"] == "graphtrain-0.1.0"
            )
            assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_the_test_hook_validates_a_spec_the_package_accepts(tmp_path: Path) -> None:
    spec = one(render(), "ConfigMap", "gt-graphtrain-test")["data"]["graphtraining.yaml"]
    (tmp_path / "spec.yaml").write_text(spec)
    exe = Path(sys.executable).parent / "graphtrain"
    res = subprocess.run([str(exe), "validate", str(tmp_path / "spec.yaml")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "old form" not in res.stdout, res.stdout  # `helm test --logs` shows it: the form users write
    pod = one(render(), "Pod", "gt-graphtrain-test")["spec"]
    assert pod["initContainers"][0]["args"] == ["validate", "/etc/graphtrain/test/graphtraining.yaml"]
    assert pod["containers"][0]["args"][1] == f"http://{OPERATOR}-metrics.{NAMESPACE}.svc:8080/metrics"
    alone = one(render("default", "--set", "metrics.service.enabled=false"), "Pod", "gt-graphtrain-test")
    assert [c["name"] for c in alone["spec"]["containers"]] == ["validate"] and "initContainers" not in alone[
        "spec"
    ]


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, list[bytes]]]:
    """An HTTP server on 127.0.0.1 answering GET with the body the test puts in the list."""
    body: list[bytes] = [b""]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body[0])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", body
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_the_test_hooks_metrics_check_passes_and_fails(metrics_server: tuple[str, list[bytes]]) -> None:
    url, body = metrics_server
    script = (CHART / "files" / "check_metrics.py").read_text()

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60)

    body[0] = b"# TYPE graphtrain_operator_leader gauge\ngraphtrain_operator_leader 1.0\n"
    res = check()
    assert res.returncode == 0 and "the operator answers" in res.stdout
    body[0] = b"process_cpu_seconds_total 1.0\n"
    res = check()
    assert res.returncode == 1 and "without graphtrain_operator_leader" in res.stderr
