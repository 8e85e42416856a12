"""The chart's observability objects without a cluster: the Prometheus Operator's kinds (no schema for
them in kubernetes-validate, so their shape is checked here), the alerts through promtool (`check
rules` on the rendered group, `test rules` proving each alert fires on synthetic series and stays quiet
on healthy ones), the dashboards (Grafana's schema, their variables, every panel's PromQL naming only
metrics the code defines), and the status API's objects (read-only RBAC, the token only as a file).

The dashboards' PromQL is evaluated against a real Prometheus scraping a real run in
tests/observability/test_prometheus.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from graphtrain.contract.spec import Phase, load_yaml
from graphtrain.contract.spec.locality import resolved
from graphtrain.operator import config as operator_config
from graphtrain.operator import manifests, workers
from tests.chart.chart import CHART, NAMESPACE, ROOT, find, helm, one, render
from tests.observability import promql
from tests.selectors import selects

pytestmark = pytest.mark.timeout(120)

FULL = "gt-graphtrain"
API = f"{FULL}-api"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
PANEL_TYPES = {"timeseries", "stat"}


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:  # .ci/run installs it (Debian package prometheus)
        pytest.fail("promtool is not installed: apt-get install prometheus")
    return found


# ------------------------------------------------------------------------------------------- alerts


def rule_group(*sets: str) -> dict[str, Any]:
    """The rule file Prometheus would load from the rendered PrometheusRule: its spec.groups."""
    rule = one(render("observability", *sets), "PrometheusRule", f"{FULL}-trainings")
    return {"groups": rule["spec"]["groups"]}


def test_the_prometheus_rule_has_the_five_alerts_with_severities_and_runbooks() -> None:
    groups = rule_group()["groups"]
    assert [g["name"] for g in groups] == ["graphtrain.trainings"]
    rules = {r["alert"]: r for r in groups[0]["rules"]}
    assert set(rules) == {
        "GraphTrainingFailed",
        "GraphTrainingStalled",
        "GraphTrainingShardRestarting",
        "GraphTrainingNoProgress",
        "GraphTrainingCRDOutdated",
    }
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), name
        assert rule["annotations"]["runbook_url"] == f"https://graphtrain.example/runbooks/{name.lower()}"
    assert rules["GraphTrainingFailed"]["labels"]["severity"] == "critical"
    assert "> 1200" in rules["GraphTrainingNoProgress"]["expr"]  # the scenario's 20 minutes
    obj = one(render("observability"), "PrometheusRule")
    assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert find(render(), "PrometheusRule") == []  # off by default


def test_promtool_check_rules_passes_and_can_fail(tmp_path: Path) -> None:
    good = tmp_path / "rules.yaml"
    good.write_text(yaml.safe_dump(rule_group()))
    res = subprocess.run(
        [promtool(), "check", "rules", str(good)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0 and "SUCCESS: 5 rules found" in res.stdout, res.stdout + res.stderr
    bad = rule_group()
    bad["groups"][0]["rules"][0]["expr"] = "max by (namespace (graphtrain_training_phase)"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    res = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "bad.yaml")], capture_output=True, text=True, timeout=60
    )
    assert res.returncode != 0


def phase_series(training: str, phase: str, minutes: int, ns: str = "ml") -> list[dict[str, str]]:
    """graphtrain_training_phase of one training held in `phase` for `minutes`: 1 there, 0 elsewhere."""
    return [
        {
            "series": f'graphtrain_training_phase{{namespace="{ns}",training="{training}",phase="{p}"}}',
            "values": f"{int(p == phase)}x{minutes}",
        }
        for p in Phase
    ]


def clock(minutes: int) -> str:
    """A timestamp that keeps up with time(): 60 s more every minute from 0."""
    return f"0+60x{minutes}"


def frozen(at_minute: int, minutes: int) -> str:
    """A timestamp that keeps up with time() until at_minute, then stops moving."""
    return f"0+60x{at_minute} {at_minute * 60}x{minutes - at_minute}"


def alert(name: str, at: str, *fired: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": labels} for labels in fired]}


HEARTBEAT = "graphtrain_trainer_last_report_timestamp_seconds"
PROGRESS = "graphtrain_training_last_progress_timestamp_seconds"


def rule_tests() -> list[dict[str, Any]]:
    """Each alert fires for one training and stays quiet for the healthy ones beside it (the default
    values: stalled after 10 minutes, no progress after 30, shard restarts within 15 minutes)."""
    m = 60
    series = [
        *phase_series("broken", "Failed", m),
        *phase_series("healthy", "Training", m),
        *phase_series("hung", "Training", m),
        *phase_series("done", "Succeeded", m),
        *phase_series("crashy", "Training", m),
        # trainers' heartbeats: healthy keeps reporting; hung's rank 1 stops at minute 10;
        # done's stopped at minute 5 but it finished (never stalled)
        *[
            {
                "series": f'{HEARTBEAT}{{namespace="ml",training="{t}",rank="{r}"}}',
                "values": values,
            }
            for t, r, values in [
                ("healthy", "0", clock(m)),
                ("healthy", "1", clock(m)),
                ("hung", "0", clock(m)),
                ("hung", "1", frozen(10, m)),
                ("done", "0", frozen(5, m)),
            ]
        ],
        # the trainings' progress: hung's stops at minute 10
        *[
            {
                "series": f'{PROGRESS}{{namespace="ml",training="{t}"}}',
                "values": values,
            }
            for t, values in [("healthy", clock(m)), ("hung", frozen(10, m)), ("done", frozen(5, m))]
        ],
        *[
            {"series": f'graphtrain_operator_crd_current{{namespace="{ns}",pod="{pod}"}}', "values": values}
            for ns, pod, values in [
                ("ops", "operator-a", f"1x10 0x{m - 10}"),
                ("ml", "operator-b", f"1x{m}"),
                ("ml", "operator-c", " ".join(["NaN"] * (m + 1))),
            ]
        ],
        # crashy's shard 1 restarts at minute 20; healthy's shards never do
        *[
            {
                "series": f'graphtrain_training_shard_restarts{{namespace="ml",training="{t}",shard="{s}"}}',
                "values": values,
            }
            for t, s, values in [
                ("crashy", "0", f"0x{m}"),
                ("crashy", "1", f"0x20 1x{m - 20}"),
                ("healthy", "0", f"0x{m}"),
                ("healthy", "1", f"0x{m}"),
            ]
        ],
    ]

    def who(training: str, severity: str = "warning", **extra: str) -> dict[str, str]:
        return {"namespace": "ml", "training": training, "severity": severity, "team": "ml", **extra}

    return [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                alert("GraphTrainingFailed", "5m", who("broken", "critical")),
                # hung's rank 1 silent for 9 minutes: not yet; for 15: stalled
                alert("GraphTrainingStalled", "19m"),
                alert("GraphTrainingStalled", "25m", who("hung", rank="1")),
                alert("GraphTrainingNoProgress", "25m"),
                alert("GraphTrainingNoProgress", "45m", who("hung")),
                alert("GraphTrainingShardRestarting", "19m"),
                alert("GraphTrainingShardRestarting", "25m", who("crashy")),
                alert("GraphTrainingShardRestarting", "40m"),  # out of the 15-minute window
                # the operator in ops started over an older CRD at minute 10; the one in ml's own
                # Prometheus over its own, and one not yet answered (NaN) beside it
                alert("GraphTrainingCRDOutdated", "5m"),
                alert(
                    "GraphTrainingCRDOutdated",
                    "15m",
                    {"namespace": "ops", "severity": "warning", "team": "ml"},
                ),
            ],
        }
    ]


def test_promtool_test_rules_each_alert_fires_and_healthy_trainings_stay_quiet(tmp_path: Path) -> None:
    rules = rule_group(
        "--set", "prometheusRule.noProgressMinutes=30,prometheusRule.additionalAlertLabels.team=ml"
    )
    for rule in rules["groups"][0]["rules"]:  # the runbook URLs of the scenario are not under test here
        rule["annotations"] = {}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": rule_tests()}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    res = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    # and the test can fail: a healthy training's trainer silent would have to fire, and is not expected
    tests["tests"][0]["input_series"] = [
        s if 'training="healthy",rank="1"' not in s["series"] else {**s, "values": frozen(10, 60)}
        for s in tests["tests"][0]["input_series"]
    ]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    res = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert res.returncode != 0 and "GraphTrainingStalled" in res.stdout + res.stderr


# --------------------------------------------------------------------------------- scraped targets


def test_the_pod_monitor_finds_the_shard_servers_and_trainers_the_operator_makes() -> None:
    """The PodMonitor's selector matches the pods of operator/manifests.py, on a port they name
    `metrics`; its relabelings give the targets the labels a local run's file_sd targets have."""
    monitor = one(render("observability"), "PodMonitor", f"{FULL}-trainings")
    spec = monitor["spec"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert spec["namespaceSelector"] == {"any": True}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and "port" not in endpoint  # every metrics port, kept below
    keep = endpoint["relabelings"][0]
    assert keep["sourceLabels"] == ["__meta_kubernetes_pod_container_port_name"] and keep["action"] == "keep"
    assert "honorLabels" not in endpoint  # the pods run users' code: their labels never win
    relabel = {
        (tuple(r["sourceLabels"]), r.get("replacement", "$1")): r["targetLabel"]
        for r in endpoint["relabelings"]
        if "targetLabel" in r
    }
    assert relabel[(("__meta_kubernetes_pod_label_graphtrain_io_training",), "$1")] == "training"
    assert relabel[(("__meta_kubernetes_namespace",), "$1")] == "namespace"
    roles = "__meta_kubernetes_pod_label_graphtrain_io_role"
    assert relabel[((roles,), "graphtrain-shard")] == relabel[((roles,), "graphtrain-trainer")] == "job"

    config = operator_config.parse({}, "defaults")
    gt = load_yaml((ROOT / "examples" / "nations-transe.yaml").read_text())
    owner = {"metadata": {"name": gt.metadata.name, "namespace": "team", "uid": "u1"}}
    pods = {
        "shards": manifests.shard_statefulset(owner, gt, config)["spec"]["template"],
        "trainer": manifests.trainer_pod(owner, gt, config, 0, 0),
    }
    worker = workers.worker_pod(owner, gt.model_copy(update={"spec": resolved(gt.spec)}), config, 0, 0)
    assert worker["spec"]["initContainers"]  # 2 trainers on 2 partitions: worker pods by default
    pods["worker"] = worker
    for role, pod in pods.items():
        labels = pod["metadata"]["labels"]
        assert selects(spec["selector"], labels), role
        containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
        for c in containers:  # each container's metrics port kept, nothing else
            kept = [p for p in c.get("ports", []) if re.fullmatch(keep["regex"], p["name"])]
            assert [p["containerPort"] for p in kept] in ([9090], [9091]), (role, c["name"], kept)
    partition = manifests.partition_job(owner, gt, config)["spec"]["template"]["metadata"]["labels"]
    assert not selects(spec["selector"], partition)  # it serves no metrics
    assert find(render(), "PodMonitor") == []


def test_the_pod_monitors_targets_are_open_to_prometheus_through_the_trainings_policies() -> None:
    """Each training's NetworkPolicy admits its metrics ports only from its own pods and
    trainings.networkPolicy.metricsFrom: a PodMonitor without metricsFrom would find every shard
    server and worker pod down, so the chart refuses it, naming the value."""
    objs = render("observability")
    cfg = yaml.safe_load(one(objs, "ConfigMap", f"{FULL}-operator-config")["data"]["config.yaml"])
    assert cfg["networkPolicy"]["enabled"] and cfg["networkPolicy"]["metricsFrom"]
    res = helm("template", "gt", str(CHART), "--set", "metrics.podMonitor.enabled=true", check=False)
    assert res.returncode != 0 and "trainings.networkPolicy.metricsFrom" in res.stderr
    off = ("--set", "metrics.podMonitor.enabled=true", "--set", "trainings.networkPolicy.enabled=false")
    assert helm("template", "gt", str(CHART), *off, check=False).returncode == 0


def test_the_service_monitors_honor_the_operators_labels_and_scrape_the_api_with_a_token() -> None:
    objs = render("observability")
    operator = one(objs, "ServiceMonitor", f"{FULL}-operator")["spec"]["endpoints"][0]
    assert operator["honorLabels"] is True  # its graphtrain_training_* series name their own namespace
    api_monitor = one(objs, "ServiceMonitor", API)
    service = one(objs, "Service", API)
    secret = one(objs, "Secret", f"{API}-tokens")
    (endpoint,) = api_monitor["spec"]["endpoints"]
    assert api_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] and endpoint["path"] == "/metrics"
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret["metadata"]["name"], "key": "tokens"},
    }
    own = one(
        render(
            "observability",
            "--set",
            "api.auth.existingSecret=api-users,api.serviceMonitor.tokenSecret.name=scraper,"
            "api.serviceMonitor.tokenSecret.key=token",
        ),
        "ServiceMonitor",
        API,
    )
    assert own["spec"]["endpoints"][0]["authorization"]["credentials"] == {"name": "scraper", "key": "token"}


# ------------------------------------------------------------------------------------- the status API


def test_the_api_runs_read_only_with_its_token_as_a_file_only() -> None:
    objs = render("observability")
    deployment = one(objs, "Deployment", API)
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    token_file = "/var/run/secrets/graphtrain.io/api/tokens"
    assert c["command"] == ["graphtrain"]
    assert c["args"] == [
        "api",
        "--source=kubernetes",
        "--host=0.0.0.0",
        "--port=8000",
        f"--token-file={token_file}",
    ]
    assert "env" not in c and "envFrom" not in c  # the token is never a variable
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tokens"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tokens"]
    assert mount["mountPath"] == str(Path(token_file).parent) and mount["readOnly"] is True
    assert volume["secret"]["secretName"] == f"{API}-tokens"
    assert volume["secret"]["items"] == [{"key": "tokens", "path": "tokens"}]
    secret = one(objs, "Secret", f"{API}-tokens")
    assert len(secret["data"]["tokens"]) == 64  # 48 random characters, base64
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    assert pod["serviceAccountName"] == API and pod["automountServiceAccountToken"] is True
    service = one(objs, "Service", API)
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"] == "http"
    policy = one(objs, "NetworkPolicy", API)["spec"]
    assert (
        policy["podSelector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}] and len(rule["from"]) == 2

    mine = render(
        "observability", "--set", "api.auth.existingSecret=api-users,api.auth.existingSecretKey=list"
    )
    assert find(mine, "Secret") == []  # the user's Secret, not one of the chart's
    (volume,) = [
        v
        for v in one(mine, "Deployment", API)["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "tokens"
    ]
    assert volume["secret"]["secretName"] == "api-users" and volume["secret"]["items"][0]["key"] == "list"
    assert [o for o in render() if API in o["metadata"]["name"]] == []  # off by default


@pytest.mark.parametrize(("namespaces", "kind"), [([], "ClusterRole"), (["a"], "Role")])
def test_the_api_may_only_read_trainings_configmaps_pods_and_events(namespaces: list[str], kind: str) -> None:
    sets = ["--set", f"watchNamespaces={{{','.join(namespaces)}}}"] if namespaces else []
    objs = render("observability", *sets)
    roles = find(objs, kind, API)
    bindings = find(objs, f"{kind}Binding", API)
    assert len(roles) == len(bindings) == max(1, len(namespaces))
    assert find(objs, "ClusterRole" if kind == "Role" else "Role", API) == []
    if namespaces:
        assert sorted(r["metadata"]["namespace"] for r in roles) == namespaces
    args = one(objs, "Deployment", API)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == [f"--namespace={n}" for n in namespaces]
    for role, binding in zip(roles, bindings, strict=True):
        granted = {
            (g, r, v)
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
        # the calls api/sources/kubernetes.py makes: its cache lists and watches each collection;
        # pods and events are never read one by one
        wanted = {
            ("graphtrain.io", "graphtrainings", "get"),
            ("graphtrain.io", "graphtrainings", "list"),
            ("graphtrain.io", "graphtrainings", "watch"),
            ("", "configmaps", "get"),
            ("", "configmaps", "list"),
            ("", "configmaps", "watch"),
            ("", "pods", "list"),
            ("", "pods", "watch"),
            ("", "events", "list"),
            ("", "events", "watch"),
        }
        assert granted == wanted
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": API, "namespace": NAMESPACE}]
        assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_the_api_with_several_watched_namespaces_is_refused_naming_them() -> None:
    """`graphtrain api` serves one namespace or all: with Roles in two namespaces only, listing all
    would be forbidden, so the chart says so instead of installing an API that answers 403."""
    res = helm("template", "gt", str(CHART), "--set", "api.enabled=true,watchNamespaces={a,b}", check=False)
    assert res.returncode != 0 and "watchNamespaces [a b]" in res.stderr, res.stderr


def test_the_api_command_line_parses_with_graphtrain_apis_own_options() -> None:
    """The Deployment's args as `graphtrain api` parses them (its typer command; obs-api's api/cli.py)."""
    from graphtrain.api import cli as api_cli

    for sets in ([], ["--set", "watchNamespaces={team}"]):
        objs = render("observability", *sets)
        args = one(objs, "Deployment", API)["spec"]["template"]["spec"]["containers"][0]["args"]
        command = typer.main.get_command(api_cli.app)
        with command.make_context("api", list(args[1:])) as ctx:
            params = ctx.params
        assert (params["host"], params["port"], params["no_auth"]) == ("0.0.0.0", 8000, False)
        assert str(params["token_file"]) == "/var/run/secrets/graphtrain.io/api/tokens"
        assert params["namespace"] == ("team" if sets else None)


# ------------------------------------------------------------------------------------------ dashboards


def dashboard(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def test_the_three_dashboards_ship_in_configmaps_for_the_grafana_sidecar() -> None:
    assert [p.name for p in DASHBOARDS] == ["operator.json", "shard-servers.json", "training-overview.json"]
    objs = render("observability")
    maps = [o for o in find(objs, "ConfigMap") if o["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert sorted(m["metadata"]["name"] for m in maps) == [f"{FULL}-dashboard-{p.stem}" for p in DASHBOARDS]
    for m, path in zip(sorted(maps, key=lambda m: m["metadata"]["name"]), DASHBOARDS, strict=True):
        assert json.loads(m["data"][path.name]) == dashboard(path)
        assert m["metadata"]["annotations"] == {"grafana_folder": "GraphTrain"}
    moved = render(
        "observability",
        "--set",
        "dashboards.label=dashboards,dashboards.labelValue=graphtrain,dashboards.namespace=grafana,dashboards.folder=",
    )
    maps = [o for o in find(moved, "ConfigMap") if "dashboard-" in o["metadata"]["name"]]
    assert len(maps) == 3
    for m in maps:
        assert (
            m["metadata"]["labels"]["dashboards"] == "graphtrain"
            and "grafana_dashboard" not in m["metadata"]["labels"]
        )
        assert m["metadata"]["namespace"] == "grafana" and "annotations" not in m["metadata"]
    assert [o for o in render() if "dashboard-" in o["metadata"]["name"]] == []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_each_dashboard_follows_grafanas_schema_with_a_datasource_variable(path: Path) -> None:
    board = dashboard(path)
    assert board["schemaVersion"] >= 39 and board["uid"].startswith("graphtrain-") and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "training"]
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for name in ("namespace", "training"):
        var = variables[name]
        assert var["type"] == "query" and var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert promql.label_values(var["definition"])[1] == name
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        assert panel["type"] in PANEL_TYPES and panel["title"] and panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"], panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]


ISSUE_PANELS = {
    "training-overview": ["phase", "progress", "loss", "samples/s", "evaluation", "restarts"],
    "shard-servers": ["requests by op", "latency", "pulled and pushed", "optimizer", "memory", "table bytes"],
    "operator": ["reconciles by result", "errors", "duration", "leader"],
}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_each_dashboard_has_the_panels_issue_18_asks_for(path: Path) -> None:
    titles = " | ".join(p["title"].lower() for p in panels(dashboard(path)))
    for wanted in ISSUE_PANELS[path.stem]:
        assert wanted in titles, (wanted, titles)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_names_only_metrics_the_code_defines(path: Path) -> None:
    defined = promql.defined_series_names()
    assert "graphtrain_trainer_loss_total" not in defined and "graphtrain_trainer_loss" in defined
    board = dashboard(path)
    used: set[str] = set()
    for panel in panels(board):
        for target in panel["targets"]:
            names = promql.metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= defined, (panel["title"], names - defined)
            used |= names
    for var in board["templating"]["list"][1:]:
        assert promql.label_values(var["definition"])[0] in {n.split("{")[0] for n in defined}
    assert used


def test_the_alerts_name_only_metrics_the_code_defines() -> None:
    defined = promql.defined_series_names()
    for rule in rule_group()["groups"][0]["rules"]:
        assert promql.metric_names(rule["expr"]) <= defined, rule["alert"]
