"""The acceptance test of issue 18's dashboards and alerts: a REAL Prometheus (Debian package
`prometheus`) scrapes a real `graphtrain run` (2 shard servers x 2 trainers) through the file_sd targets
file the launcher writes, and a real `graphtrain operator` process reconciling one GraphTraining on a test
API server of this module's own; then every PromQL expression of every dashboard panel is evaluated over
the run through Prometheus' HTTP API and must return finite data (no empty panel), every dashboard
variable must list the run, and every alert rule of the chart's PrometheusRule, loaded by that
Prometheus, is healthy, selects series that exist, and never fired during the healthy run (that each
fires when it should is tests/chart/test_monitoring.py's `promtool test rules`).

Prometheus listens on 127.0.0.1 on a port found free just before (it cannot report a port 0 back), keeps
its data in tmp_path, scrapes every second. Every wait is bounded; only the processes started here are
stopped.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import k8s
from tests.chart.chart import CHART, one, render
from tests.observability import promql
from tests.operator.conftest import start_operator, wait_for
from tests.runtime.launch.test_run import ONE_THREAD, graph_file, sage_spec, write_spec  # noqa: F401 - a fixture

pytestmark = pytest.mark.timeout(420)

EPOCHS = 40  # ~10 s of training on a quiet machine: Prometheus scrapes each trainer several times
# (12 epochs at batch 32 lasted ~2 s once the machine was idle: too few scrapes for a rate)
RATE_INTERVAL = "5s"  # $__rate_interval: 5 scrapes
OPERATOR_TRAINING = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {name: watched}
spec:
  graph: {dataset: wordnet}
  embeddings: [{name: node, dim: 8}]
  model: {nodeEmbedding: node}
"""


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>: its `data`, or raises with Prometheus' error."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: {exc.code} {exc.read().decode()[:500]}") from exc
        assert body["status"] == "success", body
        return body["data"]

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step="1")
        assert data["resultType"] == "matrix", data
        return list(data["result"])


def prometheus_bin() -> str:
    found = shutil.which("prometheus")
    if not found:  # .ci/run installs it
        pytest.fail("prometheus is not installed: apt-get install prometheus (Debian package)")
    return found


def free_port() -> int:
    """A port free on 127.0.0.1 now (Prometheus takes a fixed --web.listen-address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's own API server: the session's in-process operator (tests/operator/conftest.py)
    must not reconcile the training this test's operator does, nor this one its."""
    yield from k8s.own_api_server(tmp_path_factory, "prometheus-apiserver")


@pytest.fixture(scope="module")
def kube(kubeconfig: str) -> k8s.Kubectl:
    return k8s.kubectl_for_operator(kubeconfig)


@pytest.fixture
def operator(kube: k8s.Kubectl, kubeconfig: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A `graphtrain operator` process watching a namespace of its own with one GraphTraining in it,
    reconciling every second (its timer); yields (its metrics address host:port, the namespace)."""
    ns = f"obs-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", ns)
    kube("apply", "-n", ns, "-f", "-", input=OPERATOR_TRAINING)
    env = {**os.environ, "KUBECONFIG": kubeconfig, "POD_NAME": "operator-0", "POD_NAMESPACE": ns}
    env["GRAPHTRAIN_OPERATOR_TIMER"] = "1"
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = tmp_path / "operator.log"
    proc, where = start_operator(env, log, "-n", ns)
    try:
        phase = "jsonpath={.status.phase}"
        wait_for(lambda: kube("get", "gtr", "watched", "-n", ns, "-o", phase), timeout=60, what="a reconcile")
        yield where, ns
    finally:
        k8s.terminate(proc)
        print(f"---- operator:\n{log.read_text(errors='replace')[-3000:]}")  # shown if the test failed


@pytest.fixture
def prometheus(tmp_path: Path) -> Callable[[dict[str, Any]], Prometheus]:
    """Start Prometheus with a config (its data in tmp_path); stopped after the test."""
    started: list[Prometheus] = []

    def start(config: dict[str, Any]) -> Prometheus:
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        for _ in range(3):  # the free port may be taken between free_port() and Prometheus' bind
            port = free_port()
            log = tmp_path / f"prometheus-{port}.log"
            cmd = [
                prometheus_bin(),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=info",
            ]
            with log.open("wb") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
            prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
            started.append(prom)

            def ready(p: Prometheus = prom) -> bool:
                if p.proc.poll() is not None:
                    return True  # exited (a taken port): tried again below
                try:
                    with urllib.request.urlopen(f"{p.url}/-/ready", timeout=5) as r:
                        return r.status == 200
                except OSError:
                    return False

            wait_for(ready, timeout=60, what="Prometheus to be ready")
            if proc.poll() is None:
                return prom
        raise AssertionError(f"Prometheus did not start:\n{log.read_text()[-3000:]}")

    yield start
    for p in started:
        k8s.terminate(p.proc)
        print(f"---- {p.log.name}:\n{p.log.read_text(errors='replace')[-3000:]}")


def rules_file(tmp_path: Path) -> Path:
    """The chart's PrometheusRule, as the rule file Prometheus loads."""
    rule = one(render("observability"), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def finite(series: list[dict[str, Any]]) -> bool:
    """At least one finite value in a query_range result (NaN draws nothing in Grafana)."""
    return any(math.isfinite(float(v)) for s in series for _, v in s["values"])


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((CHART / "dashboards").glob("*.json"))}


def test_every_dashboard_panel_and_alert_has_data_from_a_real_prometheus(
    graph_file: Path,  # noqa: F811 - the fixture
    operator: tuple[str, str],
    prometheus: Callable[[dict[str, Any]], Prometheus],
    tmp_path: Path,
) -> None:
    operator_address, operator_ns = operator
    run_dir = tmp_path / "run"
    targets = run_dir / "prometheus" / "targets.json"
    prom = prometheus(
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_file(tmp_path))],
            "scrape_configs": [
                {
                    "job_name": "graphtrain",  # each target's own job label (file_sd) wins
                    "honor_labels": True,
                    # read again every second: the file appears once the run starts, and changes
                    "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
                },
                {
                    "job_name": "graphtrain-operator",
                    "honor_labels": True,
                    "static_configs": [{"targets": [operator_address]}],
                },
            ],
        }
    )
    start = time.time()
    # the whole command (graphtrain.cli): `run --api` serves the run's REST status API, a target too
    write_spec(sage_spec(graph_file, epochs=EPOCHS, batch=16), run_dir)
    command = [sys.executable, "-m", "graphtrain.cli", "run", str(run_dir.parent / "run.yaml")]
    with open(run_dir.parent / "run.out", "wb") as out:
        launcher = subprocess.Popen(
            [*command, "--run-dir", str(run_dir), "--api", "0", "--api-no-auth"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=ONE_THREAD,
        )
    try:
        code = launcher.wait(timeout=300)
    finally:
        k8s.terminate(launcher)
    output = (run_dir.parent / "run.out").read_text(errors="replace")
    assert code == 0, output[-3000:]
    time.sleep(3)  # the last scrapes and rule evaluations
    end = time.time()

    up = prom.query_range("up", start, end)
    jobs = {s["metric"]["job"] for s in up if any(v == "1" for _, v in s["values"])}
    every = {
        "graphtrain-shard",
        "graphtrain-trainer",
        "graphtrain-launcher",
        "graphtrain-api",
        "graphtrain-operator",
    }
    assert every <= jobs, up
    scrapes = 'graphtrain_api_requests_total{route="/metrics",method="GET",status="200"}'
    assert finite(prom.query_range(scrapes, start, end)), "the API's request metrics"
    variables = {
        "namespace": f"default|{operator_ns}",  # the run's (its spec names none) and the operator's
        "training": "planted|watched",
        "__rate_interval": RATE_INTERVAL,
        "__interval": "1s",
        "datasource": "prometheus",
    }

    evaluated, empty = 0, []
    for board_name, board in dashboards().items():
        for var in board["templating"]["list"][1:]:
            selector = promql.substitute(promql.label_values_selector(var["definition"]), variables)
            _, label = promql.label_values(var["definition"])
            values = {s["metric"].get(label) for s in prom.query_range(selector, start, end)}
            wanted = {"default", operator_ns} if label == "namespace" else {"planted", "watched"}
            if board_name == "shard-servers":  # the operator's training has no shard servers running
                wanted = {"default"} if label == "namespace" else {"planted"}
            if not wanted <= values:
                empty.append(f"{board_name} / variable {var['name']}: {selector} lists {values}")
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = promql.substitute(target["expr"], variables)
                evaluated += 1
                if not finite(prom.query_range(expr, start, end)):
                    empty.append(f"{board_name} / {panel['title']}: {expr}")
    assert empty == [], "panels or variables without data:\n" + "\n".join(empty)
    assert not finite(prom.query_range("graphtrain_trainer_loss_total", start, end))  # the check can fail
    # the operator started over the chart's CRD, its version's: 1, never the alert's 0 (NaN before its
    # check, which runs beside it, had the answer: a scrape may come first)
    crd = prom.query_range("graphtrain_operator_crd_current", start, end)
    assert crd and {v for s in crd for _, v in s["values"]} - {"NaN"} == {"1"}, crd
    assert evaluated >= 30
    print(f"{evaluated} panel expressions evaluated, every one with data")

    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {r["name"] for r in rules} == {
        "GraphTrainingFailed",
        "GraphTrainingStalled",
        "GraphTrainingShardRestarting",
        "GraphTrainingNoProgress",
        "GraphTrainingCRDOutdated",
    }
    for rule in rules:
        assert rule["health"] == "ok" and rule["state"] == "inactive", rule
        for selector in promql.selectors(rule["query"]):
            assert prom.query_range(selector, start, end), (rule["name"], selector)
    assert prom.query_range("ALERTS", start, end) == []  # a healthy run fires nothing
