"""helm install, test, upgrade and uninstall against the test API server (tests/conftest.py): every
object of the release is created, changed values change the objects, `helm test` passes or fails with
its pod, and uninstall leaves no object of the chart behind, but the CRD (by helm's design), nor the
Lease the operator makes at run time (owned by the chart's Deployment: the garbage collector's)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import k8s
from tests.chart.chart import CHART, SCENARIOS, command_line, helm, helm_path, values_file
from tests.operator.conftest import wait_for
from tests.podrunner.decide import gc_victims

pytestmark = pytest.mark.timeout(240)
INSTANCE = "app.kubernetes.io/instance"
# the Prometheus Operator's other kinds the observability scenario renders
POD_MONITOR = ("monitoring.coreos.com", "podmonitors", "PodMonitor", "v1")
PROMETHEUS_RULE = ("monitoring.coreos.com", "prometheusrules", "PrometheusRule", "v1")


@pytest.fixture(scope="module")
def cluster(kube: k8s.Kubectl, kubeconfig: str) -> str:
    # the monitoring and observability scenarios', where the server lacks them
    k8s.serve_stand_ins(kube, k8s.SERVICE_MONITOR, POD_MONITOR, PROMETHEUS_RULE)
    for ns in ("a", "b"):  # the namespaced scenario's
        kube("create", "namespace", ns, check=False)
    return kubeconfig


@pytest.fixture
def release(cluster: str, kube: k8s.Kubectl) -> Iterator[tuple[str, str]]:
    """A release name and its own namespace; uninstalled afterwards if the test left it installed."""
    name = f"gt-{uuid.uuid4().hex[:6]}"
    yield name, f"chart-{name}"
    if name in helm("list", "-A", "-q", kubeconfig=cluster).stdout.split():
        helm("uninstall", name, "-n", f"chart-{name}", "--wait", kubeconfig=cluster)


def manifest(cluster: str, name: str, ns: str) -> list[dict]:
    out = helm("get", "manifest", name, "-n", ns, kubeconfig=cluster).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def hooks(cluster: str, name: str, ns: str) -> list[dict]:
    out = helm("get", "hooks", name, "-n", ns, kubeconfig=cluster).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def install(cluster: str, name: str, ns: str, scenario: str) -> tuple[str, list[dict], set[str]]:
    """helm install of a ci/ scenario: its output, the release's objects and every kind it renders
    (its `helm test` hooks included)."""
    out = helm(
        "install",
        name,
        str(CHART),
        "-n",
        ns,
        "--create-namespace",
        "-f",
        values_file(scenario),
        kubeconfig=cluster,
    ).stdout
    objs = manifest(cluster, name, ns)
    return out, objs, {resource(o) for o in objs + hooks(cluster, name, ns)}


def resource(obj: dict) -> str:
    """kubectl's name for an object's kind: kind.group, or the kind of the core group."""
    group = obj["apiVersion"].rpartition("/")[0]
    return f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()


def left_behind(kube: k8s.Kubectl, name: str, kinds: set[str]) -> dict[str, list[str]]:
    """Objects of these kinds labelled with the release, in every namespace."""
    found = {}
    for kind in sorted(kinds):
        out = kube("get", kind, "-A", "-l", f"{INSTANCE}={name}", "-o", "name")
        if out.split():
            found[kind] = out.split()
    return found


def helm_test(cluster: str, kube: k8s.Kubectl, name: str, ns: str, phase: str) -> subprocess.CompletedProcess:
    """`helm test`, playing the kubelet: the test pod ends in `phase`."""
    proc = subprocess.Popen(
        [helm_path(), "test", name, "-n", ns, "--timeout", "60s", "--kubeconfig", cluster],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pod = f"{name}-graphtrain-test"
        wait_for(lambda: kube("get", "pod", pod, "-n", ns, "-o", "name"), what=f"the test pod {pod}")
        status = {"status": {"phase": phase}}
        kube("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status))
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:  # a failed wait: stop our helm
            proc.kill()
            proc.wait(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def get(kube: k8s.Kubectl, kind: str, name: str, ns: str) -> dict:
    return json.loads(kube("get", kind, name, "-n", ns, "-o", "json"))


def test_install_test_upgrade_and_uninstall(
    cluster: str, kube: k8s.Kubectl, release: tuple[str, str]
) -> None:
    name, ns = release
    operator = f"{name}-graphtrain-operator"
    out, objs, kinds = install(cluster, name, ns, "default")
    assert "kubectl get gtr -n default -w" in out and "kubectl delete crd graphtrainings.graphtrain.io" in out
    assert kinds == {
        "clusterrole.rbac.authorization.k8s.io",
        "clusterrolebinding.rbac.authorization.k8s.io",
        "configmap",
        "deployment.apps",
        "networkpolicy.networking.k8s.io",
        "pod",
        "role.rbac.authorization.k8s.io",
        "rolebinding.rbac.authorization.k8s.io",
        "service",
        "serviceaccount",
    }
    for obj in objs:
        where = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
        assert kube("get", resource(obj), obj["metadata"]["name"], *where, "-o", "name"), obj["metadata"][
            "name"
        ]

    res = helm_test(cluster, kube, name, ns, "Succeeded")
    assert res.returncode == 0 and "Phase:          Succeeded" in res.stdout, res.stderr
    assert left_behind(kube, name, {"pod"}) == {}  # hook-succeeded: the test pod and its spec go

    before = get(kube, "deployment", operator, ns)
    helm(
        "upgrade",
        name,
        str(CHART),
        "-n",
        ns,
        "-f",
        values_file("default"),
        "--set",
        "replicas=2,resources.limits.memory=1Gi,trainings.storage.size=20Gi",
        kubeconfig=cluster,
    )
    after = get(kube, "deployment", operator, ns)
    pod, old_pod = after["spec"]["template"], before["spec"]["template"]
    assert (before["spec"]["replicas"], after["spec"]["replicas"]) == (1, 2)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
    assert (
        pod["metadata"]["annotations"]["checksum/config"]
        != old_pod["metadata"]["annotations"]["checksum/config"]
    )
    config = yaml.safe_load(get(kube, "configmap", f"{operator}-config", ns)["data"]["config.yaml"])
    assert config["storage"]["size"] == "20Gi"
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    history = json.loads(helm("history", name, "-n", ns, "-o", "json", kubeconfig=cluster).stdout)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]

    assert set(left_behind(kube, name, kinds)) == kinds - {"pod"}  # the check below can fail
    helm("uninstall", name, "-n", ns, "--wait", kubeconfig=cluster)
    assert left_behind(kube, name, kinds) == {}
    assert kube("get", "crd", "graphtrainings.graphtrain.io", "-o", "name")  # kept by design


def test_a_failing_helm_test_fails(cluster: str, kube: k8s.Kubectl, release: tuple[str, str]) -> None:
    name, ns = release
    install(cluster, name, ns, "default")
    res = helm_test(cluster, kube, name, ns, "Failed")
    assert res.returncode != 0 and f"{name}-graphtrain-test" in res.stderr + res.stdout
    # a failed test pod stays for `kubectl logs` (the next `helm test` replaces it), uninstall or not
    helm("uninstall", name, "-n", ns, "--wait", kubeconfig=cluster)
    kept = {"configmap": [f"configmap/{name}-graphtrain-test"], "pod": [f"pod/{name}-graphtrain-test"]}
    assert left_behind(kube, name, {"configmap", "pod"}) == kept
    kube("delete", "pod,configmap", "-n", ns, "-l", f"{INSTANCE}={name}")


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "default"])
def test_each_scenario_installs_and_uninstalls_cleanly(
    scenario: str, cluster: str, kube: k8s.Kubectl, release: tuple[str, str]
) -> None:
    name, ns = release
    _, objs, kinds = install(cluster, name, ns, scenario)
    placed = {(resource(o), o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs}
    for kind, where, obj in placed:
        assert kube("get", kind, obj, *(["-n", where] if where else []), "-o", "name"), (kind, where, obj)
    if scenario == "namespaced":
        roles = {(w, o) for k, w, o in placed if k == "role.rbac.authorization.k8s.io"}
        assert roles == {
            ("a", f"{name}-graphtrain-operator"),
            ("b", f"{name}-graphtrain-operator"),
            (ns, f"{name}-graphtrain-operator-leader-election"),
        }
    if scenario == "monitoring":
        assert "servicemonitor.monitoring.coreos.com" in kinds
        assert get(kube, "deployment", f"{name}-graphtrain-operator", ns)["spec"]["replicas"] == 2
    if scenario == "observability":
        monitoring = {
            f"{k}.monitoring.coreos.com" for k in ("servicemonitor", "podmonitor", "prometheusrule")
        }
        assert monitoring <= kinds
        dashboards = kube("get", "configmap", "-n", ns, "-l", "grafana_dashboard=1", "-o", "name").split()
        assert len(dashboards) == 3  # what the Grafana sidecar finds
        # the API's token: generated at install, kept by an upgrade (read back with lookup)
        token = get(kube, "secret", f"{name}-graphtrain-api-tokens", ns)["data"]["tokens"]
        helm("upgrade", name, str(CHART), "-n", ns, "-f", values_file(scenario), kubeconfig=cluster)
        assert get(kube, "secret", f"{name}-graphtrain-api-tokens", ns)["data"]["tokens"] == token
        assert len(base64.b64decode(token)) == 48
    assert set(left_behind(kube, name, kinds)) == kinds - {"pod"}  # no `helm test` ran: no test pod
    helm("uninstall", name, "-n", ns, "--wait", kubeconfig=cluster)
    assert left_behind(kube, name, kinds) == {}


def collect_garbage(kube: k8s.Kubectl, resource: str, ns: str) -> list[str]:
    """What a cluster's garbage collector does, once, to `resource` in `ns` (the test server has none):
    delete each object that has ownerReferences and none of whose owners exists (that name and uid).
    The names deleted."""
    objs = json.loads(kube("get", resource, "-n", ns, "-o", "json"))["items"]
    live = set()
    for ref in {
        (r["apiVersion"], r["kind"], r["name"])
        for o in objs
        for r in o["metadata"].get("ownerReferences") or []
    }:
        group = ref[0].rpartition("/")[0]
        try:
            owner = json.loads(
                kube("get", f"{ref[1].lower()}.{group}".rstrip("."), ref[2], "-n", ns, "-o", "json")
            )
        except RuntimeError:  # not found: gone
            continue
        live.add(owner["metadata"]["uid"])
    victims = [o["metadata"]["name"] for o in gc_victims(objs, live)]
    for name in victims:
        kube("delete", resource, name, "-n", ns)
    return victims


def test_uninstall_leaves_no_lease(
    cluster: str, kube: k8s.Kubectl, release: tuple[str, str], tmp_path: Path
) -> None:
    """The operator (here a process with the installed Deployment's command line, watching only the
    release's namespace, where no training is) creates its Lease owned by the chart's Deployment; helm
    uninstall deletes the Deployment while the operator still runs, and the garbage collector then
    deletes the Lease, which helm never knew."""
    name, ns = release
    operator = f"{name}-graphtrain-operator"
    _, objs, _ = install(cluster, name, ns, "default")
    cmd = [*command_line(objs, operator, tmp_path / "config.yaml"), f"--namespace={ns}"]
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}  # not in-cluster
    env.update(KUBECONFIG=cluster, POD_NAME=f"{operator}-0", POD_NAMESPACE=ns)
    log = tmp_path / "operator.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:

        def held() -> dict | None:
            out = kube("get", "leases", "-n", ns, "-o", "json")
            leases = json.loads(out)["items"]
            if proc.poll() is not None:
                raise AssertionError(f"the operator exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            return (
                leases[0] if leases and leases[0]["spec"].get("holderIdentity") == f"{operator}-0" else None
            )

        lease = wait_for(held, timeout=60, what="the operator's Lease")
        uid = get(kube, "deployment", operator, ns)["metadata"]["uid"]
        assert lease["metadata"]["name"] == operator
        assert lease["metadata"]["ownerReferences"] == [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": operator, "uid": uid}
        ]
        helm("uninstall", name, "-n", ns, "--wait", kubeconfig=cluster)
    finally:
        k8s.terminate(proc)  # as its pod is stopped: it releases the Lease on SIGTERM
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert kube("get", "leases", "-n", ns, "-o", "name").split() == [f"lease.coordination.k8s.io/{operator}"]
    assert collect_garbage(kube, "leases", ns) == [operator]
    assert kube("get", "leases", "-n", ns, "-o", "name") == ""
