"""The runner's pods on a private API server, in both modes: each in a network namespace of its own
(two pods bind every interface on port 29500, reach each other by cluster name and the API server
at localhost), a pod re-created under its name while its predecessor still stops runs beside it
(podman), and a pod's downloads go out through the runner's egress proxy.

podman mode runs the local Debian base (tests/images/base-image.sh; reused while that script is
unchanged); process mode runs the same commands as host processes. About 20 s in all here."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import k8s
from tests.images import test_images as images_test
from tests.podrunner import PodRunner, decide, net
from tests.podrunner.runner import Api, ApiError

NS = "net"
# pod a: every interface's port 29500, answers one connection
SERVE = """
import socket
with socket.create_server(("0.0.0.0", 29500)) as s:
    s.settimeout(60)
    conn, _ = s.accept()
    conn.sendall(b"hello from a")
    conn.close()
"""
# pod b: the same port of its own, then a's by its cluster name, then the API server as in-cluster
# clients reach it (localhost, the service account's token and CA; NO_PROXY keeps it off the proxy)
CALL = """
import json, os, socket, ssl, time, urllib.request
mine = socket.create_server(("0.0.0.0", 29500))
for _ in range(150):
    try:
        conn = socket.create_connection(("a.s.net.svc.cluster.local", 29500), timeout=5)
        break
    except OSError:
        time.sleep(0.2)
got = conn.recv(100)
assert got == b"hello from a", got
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
req = urllib.request.Request(
    f"https://{host}:{port}/api/v1/namespaces/net/pods/a",
    headers={"Authorization": "Bearer " + open(f"{sa}/token").read()},
)
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
print("a is at", json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["status"]["podIP"])
"""
# a pod that takes its time to stop: SIGTERM ignored (for 60 s, past any grace period here)
SLOW = "trap '' TERM; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory) -> Iterator[str]:
    """A private server with the namespace NS: a runner plays every pod, Job and StatefulSet of its
    server, and the session's is shared with tests that play them themselves. REST calls here, not
    kubectl, whose first call on a new server spends a second on discovery."""
    run = tmp_path_factory.mktemp("runner-api")
    try:
        kubeconfig = k8s.start(run, k8s.testenv_bin())
        api, deadline = Api(kubeconfig), time.monotonic() + 60
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        while True:  # each kind's storage answers 429 while it initialises
            try:
                with contextlib.suppress(ApiError):  # made by an earlier try (409), or a 429 seen below
                    api.call("POST", "/api/v1/namespaces", namespace)
                api.call("GET", f"/api/v1/namespaces/{NS}")
                api.call("GET", f"/api/v1/namespaces/{NS}/pods")
                break
            except ApiError as exc:
                if exc.status != 429 or time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield kubeconfig
    finally:
        k8s.stop(run)


def delete_pods(api: Api, *names: str) -> None:
    """Delete these pods of NS (all of them if none is named)."""
    pods = api.call("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    for name in names or [p["metadata"]["name"] for p in pods]:
        api.delete("api/v1", NS, "pods", name)


def image_for(mode: str) -> str | None:
    if mode == "process":
        return None
    images_test.build_base()
    return images_test.BASE


def pod(name: str, image: str, command: list[str], **spec: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "hostname": name,
            "subdomain": "s",
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": image, "command": command}],
            **spec,
        },
    }


def wait_pod(
    runner: PodRunner, name: str, done: set[str], uid: str | None = None, timeout: float = 120
) -> dict:
    """The pod once its phase is in `done` (of the pod with `uid`, if given)."""
    deadline = time.monotonic() + timeout
    body: dict | None = None
    while time.monotonic() < deadline:
        assert not runner.errors, runner.errors[-3:]
        body = runner.api.get("api/v1", NS, "pods", name)
        ok = body is not None and (uid is None or body["metadata"]["uid"] == uid)
        if ok and (body.get("status") or {}).get("phase") in done:
            return body
        time.sleep(0.2)
    raise AssertionError(
        f"{name} not {done} after {timeout:.0f} s: {json.dumps(body)[:2000]}\n{runner.logs(NS, name)}"
    )


def our_namespaces(block: int) -> list[str]:
    return [p.name for p in net.NETNS_DIR.iterdir() if decide.netns_block(p.name) == block]


@pytest.mark.parametrize("mode", ["process", "podman"])
def test_pods_have_their_own_network_and_reach_each_other_and_the_api(
    mode: str, kubeconfig: str, tmp_path: Path
) -> None:
    image = image_for(mode)
    delete_pods(Api(kubeconfig))
    with PodRunner(kubeconfig, mode=mode, image=image, root=tmp_path / "runner") as runner:
        block = runner.network.block
        for name, script in (("a", SERVE), ("b", CALL)):
            runner.api.create("api/v1", NS, "pods", pod(name, image or "none", ["python3", "-c", script]))
        b = wait_pod(runner, "b", {"Succeeded", "Failed"})
        a = wait_pod(runner, "a", {"Succeeded", "Failed"})
        assert (a["status"]["phase"], b["status"]["phase"]) == ("Succeeded", "Succeeded"), runner.logs(
            NS, "b"
        )
        ips = {a["status"]["podIP"], b["status"]["podIP"]}
        assert ips == {decide.pod_address(block, 0), decide.pod_address(block, 1)}
        assert f"a is at {a['status']['podIP']}" in runner.logs(NS, "b")
        assert sorted(our_namespaces(block)) == sorted(
            [decide.hub_netns(block), decide.pod_netns(block, 0), decide.pod_netns(block, 1)]
        )
        delete_pods(runner.api)
    assert our_namespaces(block) == []  # every namespace, veth and bridge gone with the runner


@pytest.mark.parametrize("mode", ["podman"])  # process mode names no container: nothing to collide
def test_a_recreated_pod_runs_beside_its_predecessor_still_stopping(
    mode: str, kubeconfig: str, tmp_path: Path
) -> None:
    """Issue 32 item 7.2: a pod deleted and created again under its name (a StatefulSet's server, the
    operator's trainer of the next attempt) while the old one is in its grace period. podman once
    refused the new container the old one's name (exit 125): a trainer (restartPolicy Never) failed."""
    image = image_for(mode)
    delete_pods(Api(kubeconfig))
    slow = pod("slow", image or "none", ["sh", "-c", SLOW], terminationGracePeriodSeconds=8)
    with PodRunner(kubeconfig, mode=mode, image=image, root=tmp_path / "runner") as runner:
        runner.api.create("api/v1", NS, "pods", slow)
        first = wait_pod(runner, "slow", {"Running"})
        delete_pods(runner.api, "slow")
        deadline = time.monotonic() + 30
        while runner.api.get("api/v1", NS, "pods", "slow") is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        runner.api.create("api/v1", NS, "pods", slow)
        uid = runner.api.get("api/v1", NS, "pods", "slow")["metadata"]["uid"]
        second = wait_pod(runner, "slow", {"Running", "Failed"}, uid=uid)
        status = second["status"]["containerStatuses"][0]
        assert second["status"]["phase"] == "Running", (status, runner.logs(NS, "slow"))
        assert second["status"]["podIP"] != first["status"]["podIP"]
        # the first still stops beside it (its namespace goes once it has)
        assert (net.NETNS_DIR / decide.pod_netns(runner.network.block, 0)).exists()
        delete_pods(runner.api)


# a pod's downloads: https (CONNECT) and http (an absolute URL) through the runner's egress proxy
FETCH = """
import urllib.request
for url in ("https://pypi.org/simple/pip/", "http://deb.debian.org/debian/dists/bookworm/Release"):
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as resp:
        print(url, resp.status)
"""


@pytest.mark.network
def test_a_pod_reaches_the_package_registries_through_the_egress_proxy(
    kubeconfig: str, tmp_path: Path
) -> None:
    delete_pods(Api(kubeconfig))
    with PodRunner(kubeconfig, mode="process", root=tmp_path / "runner") as runner:
        runner.api.create("api/v1", NS, "pods", pod("fetch", "none", ["python3", "-c", FETCH]))
        done = wait_pod(runner, "fetch", {"Succeeded", "Failed"})
        log = runner.logs(NS, "fetch")
        delete_pods(runner.api)
    assert done["status"]["phase"] == "Succeeded", log
    assert "https://pypi.org/simple/pip/ 200" in log and "Release 200" in log, log
