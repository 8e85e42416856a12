"""Two (then three) real `graphtrain operator --leader-elect` processes against the test API server:
exactly one holds the Lease and reconciles; SIGTERM of the leader hands over at the standby's next
try; SIGKILL of the leader hands over once the Lease expires; a leader whose Lease is taken exits 1;
a leader paused (SIGSTOP) past its renew deadline, resumed after a standby took the Lease, writes nothing.

Each process watches only this test's namespace and serves its endpoints on 127.0.0.1, port 0 (the
bound address read from its log). Which process reconciled a GraphTraining is read from the logs
(kopf prefixes each handler's line with namespace/name). They run against an API server of their own:
the session's in-process operator, which watches every namespace of the shared one, can then neither
make them pass nor fail (it once recreated the config map a paused leader must not). Every wait is
bounded; every process started here is stopped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import k8s
from tests.operator.conftest import wait_for

pytestmark = pytest.mark.timeout(240)

LEASE = "graphtrain-operator"
TIMING = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1"]
TRAINING = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {{name: {name}}}
spec:
  graph: {{dataset: wordnet}}
  embeddings: [{{name: node, dim: 8}}]
  model: {{nodeEmbedding: node}}
"""


@dataclass
class Operator:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def endpoint(self, which: str) -> str:
        found = re.search(rf"{which} endpoint on (http://127\.0\.0\.1:\d+)", self.text())
        if not found:
            raise RuntimeError(f"{self.name}: no {which} endpoint logged yet")
        return found.group(1)

    def get(self, which: str, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.endpoint(which) + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def leader_metric(self) -> float | None:
        """graphtrain_operator_leader from its /metrics; None while it does not answer."""
        try:
            status, text = self.get("metrics", "/metrics")
        except (RuntimeError, OSError):
            return None
        found = re.search(r"^graphtrain_operator_leader (\S+)$", text, re.M)
        return float(found.group(1)) if status == 200 and found else None

    def reconciled(self, ns: str, training: str) -> bool:
        return f"[{ns}/{training}] Handler 'on_training' succeeded" in self.text()

    def exited(self) -> int | None:
        return self.proc.poll()


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's own API server (overrides the session's; see the module docstring), or a user's
    test cluster as the session's fixture takes it."""
    yield from k8s.own_api_server(tmp_path_factory, "leader-apiserver")


@pytest.fixture(scope="module")
def kube(kubeconfig: str) -> k8s.Kubectl:
    return k8s.kubectl_for_operator(kubeconfig)


@pytest.fixture
def ns(kube) -> Iterator[str]:
    name = f"leader-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    yield name


@pytest.fixture
def operators(kubeconfig: str, ns: str, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    """Start `graphtrain operator --leader-elect` processes; all are stopped after the test."""
    started: list[Operator] = []

    def start(
        name: str,
        elect: bool = True,
        timing: list[str] = TIMING,
        timer: float = 15,
        extra: tuple[str, ...] = (),
    ) -> Operator:
        env = {**os.environ, "KUBECONFIG": kubeconfig, "POD_NAME": name, "POD_NAMESPACE": ns}
        env["GRAPHTRAIN_OPERATOR_TIMER"] = str(timer)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = tmp_path / f"{name}.log"
        cmd = [
            sys.executable,
            "-m",
            "graphtrain.cli",
            "operator",
            *(["--leader-elect", *timing] if elect else []),
        ]
        cmd += ["-n", ns, "--health-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", *extra]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        op = Operator(name, proc, log)
        started.append(op)
        return op

    yield start
    for op in started:
        if op.proc.poll() is None:
            op.proc.send_signal(signal.SIGCONT)  # a test that failed while it was paused
            op.proc.kill()
        op.proc.wait(timeout=30)
        print(f"---- {op.name} (exit {op.proc.returncode}):\n{op.text()[-4000:]}")  # shown if the test failed


def holder(kube, ns: str) -> str:
    """The Lease's holderIdentity (kubectl's stdout alone: its stderr may carry throttling notices)."""
    return kube("get", "lease", LEASE, "-n", ns, "-o", "jsonpath={.spec.holderIdentity}")


def stand_by(op: Operator) -> None:
    """`op` runs, answers its probes as a ready standby and says it does not lead."""
    wait_for(lambda: op.leader_metric() == 0, timeout=60, what=f"{op.name}'s /metrics")
    wait_for(lambda: op.get("health", "/readyz") == (200, "standby\n"), timeout=30, what=f"{op.name} ready")
    assert op.get("health", "/healthz") == (200, "ok\n")
    assert op.exited() is None


def lead(op: Operator, timeout: float) -> float:
    """Seconds until `op` says it leads (its /metrics)."""
    start = time.monotonic()
    wait_for(lambda: op.leader_metric() == 1, timeout=timeout, what=f"{op.name} to lead")
    return time.monotonic() - start


def reconciles(kube, op: Operator, others: list[Operator], ns: str, training: str) -> float:
    """Apply a GraphTraining; seconds until its children exist, checked made by `op` alone."""
    start = time.monotonic()
    kube("apply", "-n", ns, "-f", "-", input=TRAINING.format(name=training))
    wait_for(
        lambda: kube("get", "job", f"{training}-partition", "-n", ns, "-o", "name", check=False).startswith(
            "job"
        ),
        timeout=60,
        what=f"{training}'s partition job",
    )
    took = time.monotonic() - start
    wait_for(lambda: op.reconciled(ns, training), timeout=30, what=f"{op.name} to log {training}")
    assert not any(o.reconciled(ns, training) for o in others), f"{training} reconciled by a standby too"
    return took


def test_one_leader_hands_over_on_sigterm_and_on_sigkill(kube, operators, ns: str) -> None:
    a = operators("op-a")
    wait_for(lambda: a.leader_metric() == 1, timeout=60, what="op-a to lead")
    wait_for(lambda: a.get("health", "/readyz") == (200, "leading\n"), timeout=30, what="op-a's handlers")
    b = operators("op-b")
    stand_by(b)
    assert holder(kube, ns) == "op-a"
    first = reconciles(kube, a, [b], ns, "g1")
    assert b.leader_metric() == 0

    # SIGTERM: op-a stops its handlers, releases the Lease, exits 0; op-b takes over at its next try
    start = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    took = lead(b, timeout=30)
    assert a.proc.wait(timeout=30) == 0, a.text()[-3000:]
    # handed over, not waited out: op-a released the Lease before it exited (the time op-b took, 0.2-0.4 s
    # on a quiet machine, also counts op-a's kopf shutdown, 5.7 s once under CI load: not the property)
    assert "op-a released the lease" in a.text(), a.text()[-3000:]
    print(f"SIGTERM to op-b leading: {took:.2f} s")
    assert "op-a released the lease" in a.text()
    assert holder(kube, ns) == "op-b"
    second = reconciles(kube, b, [a], ns, "g2")
    sigterm = time.monotonic() - start

    # SIGKILL: nothing is released; op-c takes over once the Lease has not been renewed for 4 s
    c = operators("op-c")
    stand_by(c)
    start = time.monotonic()
    b.proc.send_signal(signal.SIGKILL)
    took_kill = lead(c, timeout=30)
    assert 2 <= took_kill < 10, f"takeover after SIGKILL in {took_kill:.1f} s (lease duration 4 s)"
    assert holder(kube, ns) == "op-c"
    third = reconciles(kube, c, [a, b], ns, "g3")
    sigkill = time.monotonic() - start

    # a leader whose Lease another holder took stops and exits 1 (to restart as a standby)
    kube("patch", "lease", LEASE, "-n", ns, "--type=merge", "-p", '{"spec": {"holderIdentity": "intruder"}}')
    assert c.proc.wait(timeout=30) == 1, c.text()[-3000:]
    assert "op-c lost the lease: intruder holds it now" in c.text()
    print(
        f"\nleader election: children of a new training in {first:.2f} s; SIGTERM -> standby leads in "
        f"{took:.2f} s, reconciles a new training {sigterm:.2f} s after the signal (children in "
        f"{second:.2f} s); SIGKILL -> standby leads in {took_kill:.2f} s, reconciles {sigkill:.2f} s "
        f"after (children in {third:.2f} s)"
    )


def test_a_replica_that_cannot_reach_its_lease_is_not_ready(operators) -> None:
    """An invalid lease name (422 from the API server) never makes a ready standby; the log says why,
    once, not at every retry."""
    op = operators(
        "op-bad",
        timing=["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"],
        extra=("--lease-name", "Bad_Name"),
    )
    wait_for(lambda: "Bad_Name" in op.text(), timeout=60, what="op-bad to say why")
    time.sleep(3)  # six tries more
    status, why = op.get("health", "/readyz")
    assert status == 503 and "Bad_Name" in why and "422" in why, (status, why)
    assert op.text().count("leader election: ") == 1, op.text()[-3000:]
    assert op.leader_metric() == 0 and op.exited() is None


def test_without_leader_election_it_runs_at_once(kube, operators, ns: str) -> None:
    op = operators("solo", elect=False)
    wait_for(lambda: op.leader_metric() == 1, timeout=60, what="solo's /metrics")
    wait_for(lambda: op.get("health", "/readyz") == (200, "leading\n"), timeout=30, what="solo's handlers")
    reconciles(kube, op, [], ns, "g0")
    assert kube("get", "lease", "-n", ns, "-o", "name") == ""  # no Lease without --leader-elect
    op.proc.send_signal(signal.SIGTERM)
    assert op.proc.wait(timeout=30) == 0, op.text()[-3000:]


def test_a_leader_resumed_after_losing_the_lease_writes_nothing(kube, operators, ns: str) -> None:
    """The old leader (periodic timer 1 s) reconciles g1, is paused past its renew deadline; a standby
    takes the Lease and is paused in turn (so nobody else reconciles); g1's config map is deleted and a
    new GraphTraining applied; the old leader resumes: its overdue timer reconciles g1 at once, before
    its election thread notices the Lease is gone, and the fence (it leads and renewed within the renew
    deadline) holds that reconcile back: nothing is recreated, nothing made for the new training."""
    timing = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]
    a = operators("op-a", timing=timing, timer=1)
    wait_for(lambda: a.get("health", "/readyz") == (200, "leading\n"), timeout=60, what="op-a's handlers")
    b = operators("op-b", timing=timing, timer=1)
    stand_by(b)
    reconciles(kube, a, [b], ns, "g1")
    a.proc.send_signal(signal.SIGSTOP)
    paused = time.monotonic()
    wait_for(lambda: holder(kube, ns) == "op-b", timeout=30, what="op-b to take the Lease")
    b.proc.send_signal(signal.SIGSTOP)
    kube("delete", "configmap", "g1-config", "-n", ns)
    kube("apply", "-n", ns, "-f", "-", input=TRAINING.format(name="late"))
    time.sleep(max(0.0, 7 - (time.monotonic() - paused)))
    a.proc.send_signal(signal.SIGCONT)
    assert a.proc.wait(timeout=30) == 1, a.text()[-3000:]
    assert "op-a lost the lease" in a.text()  # "op-b holds it now", or "no renewal for 7 s"
    made = kube("get", "configmap", "g1-config", "-n", ns, "-o", "name", "--ignore-not-found")
    assert made == "", "the resumed old leader recreated g1's config map"
    children = kube("get", "configmap,job", "-n", ns, "-l", "graphtrain.io/training=late", "-o", "name")
    assert children == "", f"the resumed old leader made children of a new training: {children}"
    tried = re.search(rf"reconcile of {ns}/(g1|late) skipped", a.text())  # the first skip is logged at info
    assert tried, "op-a never tried to reconcile after it resumed: the test proves nothing"
    b.proc.send_signal(signal.SIGCONT)  # (the fixture stops it)
