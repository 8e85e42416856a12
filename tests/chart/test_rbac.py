"""The chart grants the operator exactly what it uses: no verb it never uses, none it needs missing.

What it uses is recorded, not listed: the operator runs as a process, with the command line of the
chart's Deployment, against a private API server whose audit log names every request's verb,
resource, subresource, namespace and object (the API server's own reading of the URL: what RBAC
checks). A training is driven through its whole lifecycle (partition, shards, trainers, a failed
trainer and the restart, success, deletion by its runPolicy.ttlSecondsAfterFinished with its data
claim, storage.whenDeleted Delete), as in tests/operator/test_operator_apiserver.py.
Needed = every resource request of the operator, plus the rules of every Role it created for a
training (RBAC escalation prevention: it may only grant what it holds). Non-resource requests
(discovery: /api, /apis, /version, /openapi) are granted to every authenticated user by the built-in
system:discovery role and only checked to be discovery.

Granted = the rules of every (Cluster)Role the rendered chart binds to the operator's ServiceAccount,
each in its scope: a ClusterRoleBinding everywhere, a RoleBinding in its namespace only. Compared in
the default scenario (one ClusterRole, every namespace) and the namespaced one (watchNamespaces a, b:
Roles there, a training in each).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests import k8s
from tests.chart.chart import NAMESPACE, command_line, find, one, render
from tests.operator.conftest import wait_for
from tests.operator.test_operator_apiserver import SPEC

pytestmark = pytest.mark.timeout(300)


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # one event per request, as it arrives (a watch's would otherwise come when it ends)
    "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
    "rules": [{"level": "Metadata"}],
}
DISCOVERY = re.compile(r"^/(api|apis|version|openapi)(/|$)")
OPERATOR_SA = "gt-graphtrain-operator"


@dataclass(frozen=True)
class Access:
    """One permission: a request made (or needed), or one granted by a rule. namespace None: cluster
    scope (a request outside any namespace; a grant everywhere). name None: any object (a grant) or
    no object named (a request: create, list, watch)."""

    namespace: str | None
    group: str
    resource: str
    verb: str
    name: str | None = None

    def __str__(self) -> str:
        where = f"in {self.namespace}" if self.namespace else "cluster-wide"
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named} {where}"


def covers(grant: Access, need: Access) -> bool:
    return (
        (grant.group, grant.resource, grant.verb) == (need.group, need.resource, need.verb)
        and grant.namespace in (None, need.namespace)
        and grant.name in (None, need.name)
    )


def rule_accesses(rules: list[dict], namespace: str | None) -> set[Access]:
    out = set()
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in (rule.get(field) or []), f"a wildcard in {rule}"
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        out.add(Access(namespace, group, res, verb, name))
    return out


def granted(objs: list[dict]) -> set[Access]:
    """What the rendered chart binds to the operator's ServiceAccount, each in its scope."""
    subject = {"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": NAMESPACE}
    out = set()
    for binding in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        if subject not in binding["subjects"]:
            continue
        namespace = binding["metadata"].get("namespace")  # None for a ClusterRoleBinding
        ref = binding["roleRef"]
        [role] = [  # a Role in the binding's namespace, or the ClusterRole
            r
            for r in find(objs, ref["kind"], ref["name"])
            if ref["kind"] == "ClusterRole" or r["metadata"]["namespace"] == namespace
        ]
        out |= rule_accesses(role["rules"], namespace)
    return out


def recorded(audit_log: Path) -> tuple[set[Access], set[str]]:
    """The operator's resource requests, and its non-resource paths, from the audit log. Everything
    but kubectl (this test), curl (testenv.sh's readiness probe) and the API server itself is the
    operator: nothing else talks to this server."""
    needs, paths = set(), set()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        agent = event.get("userAgent", "")
        if event["user"]["username"] == "system:apiserver" or agent.startswith(("kubectl/", "curl/")):
            continue
        ref = event.get("objectRef")
        if ref is None:
            paths.add(event["requestURI"].split("?")[0])
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        needs.add(
            Access(ref.get("namespace"), ref.get("apiGroup", ""), resource, event["verb"], ref.get("name"))
        )
    return needs, paths


@dataclass
class Server:
    kubeconfig: str
    audit_log: Path
    kube: k8s.Kubectl


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A private API server with an audit log: the session's in-process operator (tests/operator)
    would otherwise reconcile these trainings too, and nothing but the recorded operator and this test
    may make requests."""
    bin_dir = k8s.testenv_bin()  # fails saying how to provide ../shared/k8s-testenv when it is missing
    policy, audit_log = tmp_path / "audit-policy.yaml", tmp_path / "audit.log"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    run = tmp_path / "apiserver"
    try:
        kubeconfig = k8s.start(
            run, bin_dir, ("--audit-policy-file", str(policy), "--audit-log-path", str(audit_log))
        )
        kube = k8s.kubectl(kubeconfig)
        k8s.install_crd(kube)
        k8s.serve_stand_ins(kube, k8s.NETWORK_POLICY)  # for the opk branch's per-training NetworkPolicy
        yield Server(kubeconfig, audit_log, kube)
    finally:
        k8s.stop(run)


@pytest.fixture
def run_operator(server: Server, tmp_path: Path) -> Iterator:
    """Starts the operator as the chart would (see command_line) against the private server."""
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []

    def start(objs: list[dict]) -> None:
        # the chart's Deployment, as installed: the operator reads it once (the Lease's owner)
        deployment = one(objs, "Deployment", OPERATOR_SA)
        server.kube("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(deployment))
        cmd = command_line(objs, OPERATOR_SA, tmp_path / "config.yaml")
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}  # not in-cluster
        env.update(
            KUBECONFIG=server.kubeconfig,
            GRAPHTRAIN_OPERATOR_TIMER="1",
            POD_NAME="graphtrain-operator-rbac",
            POD_NAMESPACE=NAMESPACE,
        )
        log = tmp_path / "operator.log"
        logs.append(log)
        with log.open("w") as out:
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))

    yield start
    for proc in procs:  # only the operator this fixture started
        k8s.terminate(proc)
    for log in logs:
        print(f"--- {log}\n{log.read_text()[-4000:]}")


# ------------------------------------------------------------------------- a training's lifecycle


def status(kube: k8s.Kubectl, kind: str, name: str, ns: str, body: dict) -> None:
    patch = json.dumps({"status": body})
    kube("patch", kind, name, "-n", ns, "--subresource=status", "--type=merge", "-p", patch)


def jsonpath(kube: k8s.Kubectl, ns: str, path: str, *what: str) -> str:
    return kube("get", *what, "-n", ns, "-o", f"jsonpath={path}")


def wait_all(trainings: list[tuple[str, str]], check, what: str) -> None:
    for ns, name in trainings:
        wait_for(lambda ns=ns, name=name: check(ns, name), timeout=60, what=f"{what} of {ns}/{name}")


def terminated(container: str, **state: object) -> list[dict]:
    return [
        {"name": container, "ready": False, "restartCount": 0, "image": "x", "imageID": "", "state": state}
    ]


def lifecycle(kube: k8s.Kubectl, trainings: list[tuple[str, str]], tokens: list[str]) -> list[dict]:
    """Drive each training from creation to deletion, playing the kubelet and the Job and StatefulSet
    controllers; returns the Roles the operator created for them, adds their tokens to `tokens`."""

    def phase(ns: str, name: str) -> str:
        return jsonpath(kube, ns, "{.status.phase}", "gtr", name)

    for ns, name in trainings:  # deleted by the operator once finished, its claim with it
        spec = SPEC.format(name=name, extra_model="").replace(
            "{backoffLimit: 1}",
            "{backoffLimit: 1, ttlSecondsAfterFinished: 0}\n  storage: {whenDeleted: Delete}",
        )
        kube("apply", "-n", ns, "-f", "-", input=spec)
    wait_all(trainings, lambda ns, name: phase(ns, name) == "Partitioning", "Partitioning")
    stats = {"algorithm": "metis", "parts": 2, "numNodes": 100, "numEdges": 300, "cutEdges": 9}
    for ns, name in trainings:
        job = f"{name}-partition"
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True}
        owner["uid"] = jsonpath(kube, ns, "{.metadata.uid}", "job", job)
        labels = {"graphtrain.io/training": name, "graphtrain.io/role": "partition", "job-name": job}
        meta = {"name": f"{job}-x", "labels": labels, "ownerReferences": [owner]}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "p"}]}}
        kube("apply", "-n", ns, "-f", "-", input=json.dumps(pod))
        message = {"terminated": {"exitCode": 0, "message": json.dumps(stats)}}
        status(
            kube,
            "pod",
            f"{job}-x",
            ns,
            {"phase": "Succeeded", "containerStatuses": terminated("p", **message)},
        )
        status(kube, "job", job, ns, {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    wait_all(trainings, lambda ns, name: phase(ns, name) == "Starting", "Starting")
    for ns, name in trainings:
        status(kube, "statefulset", f"{name}-shards", ns, {"replicas": 2, "readyReplicas": 2})
    wait_all(trainings, lambda ns, name: phase(ns, name) == "Training", "Training")

    def trainers(ns: str, name: str, attempt: str) -> bool:
        out = jsonpath(
            kube,
            ns,
            "{.items[*].metadata.labels.graphtrain\\.io/attempt}",
            "pods",
            "-l",
            f"graphtrain.io/training={name},graphtrain.io/role=trainer",
        )
        return out.split() == [attempt, attempt]

    wait_all(trainings, lambda ns, name: trainers(ns, name, "0"), "trainer pods")
    for ns, name in trainings:
        status(kube, "pod", f"{name}-trainer-0", ns, {"phase": "Running"})
        killed = terminated("trainer", terminated={"exitCode": 137, "reason": "OOMKilled"})
        status(kube, "pod", f"{name}-trainer-1", ns, {"phase": "Failed", "containerStatuses": killed})
    wait_all(trainings, lambda ns, name: trainers(ns, name, "1"), "the restarted trainers")
    roles = []
    for ns, name in trainings:  # read before the TTL (0 s) deletes them, and their Roles with them
        out = kube("get", "roles", "-n", ns, "-l", f"graphtrain.io/training={name}", "-o", "json")
        roles += json.loads(out)["items"]
        secret = json.loads(kube("get", "secret", f"{name}-token", "-n", ns, "-o", "json"))
        encoded = (secret.get("data") or {}).get("token")  # the stand-in keeps stringData as written
        tokens.append(base64.b64decode(encoded).decode() if encoded else secret["stringData"]["token"])
    for ns, name in trainings:
        for rank in (0, 1):
            status(kube, "pod", f"{name}-trainer-{rank}", ns, {"phase": "Succeeded"})
    for ns, name in trainings:  # Succeeded, then deleted by the operator, its children after it went
        kube("wait", "--for=delete", f"gtr/{name}", "-n", ns, "--timeout=60s")
        for kind in ("pvc", "configmap"):  # the claim, and the config map, deleted last (k8s.CHILD_KINDS)
            wait_for(
                lambda ns=ns, name=name, kind=kind: (
                    jsonpath(kube, ns, "{.items}", kind, "-l", f"graphtrain.io/training={name}") in ("", "[]")
                ),
                what=f"the {kind} deleted",
            )
    return roles


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize(
    ("scenario", "trainings"),
    [("default", [("team", "wn")]), ("namespaced", [("a", "wn"), ("b", "kg")])],
)
def test_the_chart_grants_exactly_what_the_operator_uses(
    scenario: str, trainings: list[tuple[str, str]], server: Server, run_operator, tmp_path: Path
) -> None:
    objs = render(scenario)
    for ns in {NAMESPACE, *(ns for ns, _ in trainings)}:
        server.kube("create", "namespace", ns)
    run_operator(objs)
    tokens: list[str] = []
    roles = lifecycle(server.kube, trainings, tokens)
    assert roles, "the operator created no Role for the trainers"
    logged = (tmp_path / "operator.log").read_text()
    assert all(len(t) >= 32 for t in tokens) and not any(t in logged for t in tokens), "token in the log"
    decisions = [r["decision"] for r in map(json.loads, logged.splitlines()) if "decision" in r]
    for ns, name in trainings:  # the chart's --log-format=json: one object per decision
        phases = [d["phase"] for d in decisions if d["training"] == f"{ns}/{name}"]
        changes = [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]]
        assert changes == ["Partitioning", "Starting", "Training", "Restarting", "Training", "Succeeded"]

    needs, paths = recorded(server.audit_log)
    assert {a.resource for a in needs} >= {"graphtrainings", "pods", "jobs", "statefulsets", "events"}
    for role in roles:  # it may only grant what it holds
        needs |= rule_accesses(role["rules"], role["metadata"]["namespace"])
    assert all(DISCOVERY.match(p) for p in paths), f"non-discovery requests: {sorted(paths)}"

    grants = granted(objs)
    missing = sorted(str(n) for n in needs if not any(covers(g, n) for g in grants))
    unused = sorted(str(g) for g in grants if not any(covers(g, n) for n in needs))
    assert not missing and not unused, "\n".join(
        [f"needed but not granted ({scenario}):", *missing, "granted but never used:", *unused]
    )


def test_the_comparison_finds_a_missing_and_an_unused_grant() -> None:
    """The arithmetic above on literal accesses: scope, resource names and verbs all count."""
    grants = rule_accesses(
        [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["p"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete"]},
        ],
        "a",
    ) | rule_accesses([{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}], None)
    needs = {
        Access("a", "", "configmaps", "get", "p"),
        Access("a", "", "configmaps", "get", "q"),  # another object: not covered by resourceNames
        Access("a", "batch", "jobs", "create"),
        Access("b", "batch", "jobs", "create"),  # another namespace: not covered by a's Role
        Access(None, "batch", "jobs", "create"),  # cluster scope: no Role covers it
        Access("b", "", "events", "create"),  # a cluster-wide grant covers every namespace
    }
    missing = {n for n in needs if not any(covers(g, n) for g in grants)}
    unused = {g for g in grants if not any(covers(g, n) for n in needs)}
    assert missing == {
        Access("a", "", "configmaps", "get", "q"),
        Access("b", "batch", "jobs", "create"),
        Access(None, "batch", "jobs", "create"),
    }
    assert unused == {Access("a", "batch", "jobs", "delete")}


def test_pod_groups_are_granted_only_for_the_schedulers_named() -> None:
    """rbac.podGroups: create on the PodGroups of the gang schedulers named, nothing more (the exact
    comparison above runs with none: a training without scheduling.gang makes no PodGroup)."""

    def pod_group_rules(*extra: str) -> list[dict]:
        role = one(render("default", *extra), "ClusterRole", f"{OPERATOR_SA}")
        return [r for r in role["rules"] if "podgroups" in r["resources"]]

    assert pod_group_rules() == []
    assert pod_group_rules("--set", "rbac.podGroups={volcano}") == [
        {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["create"]}
    ]
    both = pod_group_rules("--set", "rbac.podGroups={volcano,coscheduling}")
    assert [r["apiGroups"] for r in both] == [["scheduling.volcano.sh"], ["scheduling.x-k8s.io"]]
