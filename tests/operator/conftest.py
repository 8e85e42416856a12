"""The operator running in this process against the test API server (the `kubeconfig` and `kube`
fixtures of tests/conftest.py, shared with the chart tests: see tests/k8s.py).
Pods never run: the tests play the kubelet and the Job/StatefulSet controllers by writing status.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import k8s

# The in-process operator's configuration, read by its startup handler from $GRAPHTRAIN_OPERATOR_CONFIG
# (as `kopf run -m graphtrain.operator.handlers` has no --config)
OPERATOR_CONFIG = """
images: {runtime: "localhost/graphtrain:ci", cuda: "localhost/graphtrain:ci-cuda", pullSecrets: [regcred]}
defaults:
  shardServers: {nodeSelector: {pool: memory}, priorityClassName: graphtrain-shards}
storage: {storageClassName: nfs, size: 20Gi}
"""

PROBE = """
apiVersion: graphtrain.io/v1alpha1
kind: GraphTraining
metadata: {name: probe}
spec:
  graph: {dataset: wordnet}
  embeddings: [{name: node, dim: 8}]
  model: {nodeEmbedding: node}
"""  # a valid training in its own namespace: the operator gives it a phase and children, deleted after


UNOPERATED = ("api-", "rules-")  # namespaces the session operator leaves alone


@pytest.fixture(scope="session")
def operator(kube, tmp_path_factory) -> Iterator[Any]:
    """The operator (kopf, standalone), running in this process for the whole session; yielded once it
    has reconciled a probe GraphTraining (its watch is up and its handlers answer), not after a guess."""
    config = tmp_path_factory.mktemp("operator") / "config.yaml"
    config.write_text(OPERATOR_CONFIG)
    os.environ["GRAPHTRAIN_OPERATOR_CONFIG"] = str(config)
    os.environ["GRAPHTRAIN_OPERATOR_TIMER"] = "1"
    from kopf.testing import KopfRunner

    from graphtrain.operator import handlers

    # tests/api's trainings (namespaces api-*) stand for what an operator wrote, children and status made
    # by hand: the session operator leaves them alone, whichever test ran first in this worker (run after
    # an operator test, it reconciled them and deleted their pods under the API tests); so it does the
    # CRD rules' tests' (rules-*: their status is the test's, as no operator wrote it)
    acts = handlers.may_act
    handlers.may_act = lambda namespace, name: not namespace.startswith(UNOPERATED) and acts(namespace, name)
    with KopfRunner(
        ["run", "--standalone", "--all-namespaces", "-m", "graphtrain.operator.handlers"]
    ) as runner:
        kube("create", "namespace", "operator-probe")
        kube("apply", "-n", "operator-probe", "-f", "-", input=PROBE)

        def reacted() -> bool:
            if runner.future.done():  # it stopped while starting: say why, now
                raise AssertionError(f"the operator stopped: {runner.exception!r}\n{runner.output[-3000:]}")
            return kube("get", "gtr", "probe", "-n", "operator-probe", "-o", "jsonpath={.status.phase}") != ""

        wait_for(reacted, timeout=60, what="the operator to reconcile a probe GraphTraining")
        kube("delete", "gtr", "probe", "-n", "operator-probe", "--wait=false")
        yield runner
    handlers.may_act = acts
    assert runner.exception is None, runner.exception


def wait_for(fn: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except RuntimeError as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def start_operator(env: dict[str, str], log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """`graphtrain operator ARGS` on port-0 endpoints, its output in `log`: the process and its metrics
    endpoint's host:port, once it serves (the caller terminates it)."""
    cmd = [sys.executable, "-m", "graphtrain.cli", "operator", *args]
    cmd += ["--health-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)

    def address() -> str | None:
        assert proc.poll() is None, f"the operator exited:\n{log.read_text()[-3000:]}"
        found = re.search(r"metrics endpoint on http://(127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        return found.group(1) if found else None

    try:
        return proc, wait_for(address, timeout=60, what="the operator's metrics endpoint")
    except BaseException:
        k8s.terminate(proc)
        raise


def get(kube, kind: str, name: str, ns: str) -> dict:
    return yaml.safe_load(kube("get", kind, name, "-n", ns, "-o", "yaml"))


@pytest.fixture
def ns(kube) -> str:
    """A namespace of the test's own."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube("create", "namespace", name)
    return name
