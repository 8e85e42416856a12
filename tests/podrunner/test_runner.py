"""The runner's pods on a private API server, in both modes: each in a network namespace of its own
(two pods bind every interface on port 29500, reach each other by cluster name and the API server
at localhost), a pod re-created under its name while its predecessor still stops runs beside it
(podman), a pod's downloads go out through the runner's egress proxy, and a native sidecar shares its
POSIX shared memory with the main container through an emptyDir of medium Memory at /dev/shm, is
restarted in place when killed and stopped once the main container is done.

podman mode runs the local Debian base (tests/images/base-image.sh; reused while that script is
unchanged); process mode runs the same commands as host processes. About 35 s in all here."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import k8s
from tests.images import test_images as images_test
from tests.podrunner import PodRunner, decide, net, podnames
from tests.podrunner.api import Api, ApiError, Obj

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
    return [p.name for p in net.NETNS_DIR.iterdir() if podnames.netns_block(p.name) == block]


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
        assert ips == {podnames.pod_address(block, 0), podnames.pod_address(block, 1)}
        assert f"a is at {a['status']['podIP']}" in runner.logs(NS, "b")
        assert sorted(our_namespaces(block)) == sorted(
            [podnames.hub_netns(block), podnames.pod_netns(block, 0), podnames.pod_netns(block, 1)]
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
        assert (net.NETNS_DIR / podnames.pod_netns(runner.network.block, 0)).exists()
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


# the shard server as a native sidecar: counts its starts and makes a shared memory segment in the
# pod's /dev/shm (once: a restarted one finds it), answers its readiness probe, ends 0 on SIGTERM
SHARD = """
import http.server, signal, sys
from multiprocessing import resource_tracker, shared_memory
def stop(*_):
    open("/dev/termination-log", "w").write("shard stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open("/dev/shm/starts", "a") as f:
    f.write("start\\n")
try:
    seg = shared_memory.SharedMemory(name="gt-rows", create=True, size=16)
    seg.buf[:5] = b"rows!"
    resource_tracker.unregister(seg._name, "shared_memory")  # the segment outlives this process
except FileExistsError:
    pass
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("0.0.0.0", 9090), Ready).serve_forever()
"""
# the trainer: waits for the shard server's second start (killed and restarted in place), then maps
# its segment and ends 0
TRAIN = """
import time
from multiprocessing import resource_tracker, shared_memory
deadline = time.monotonic() + 30
while True:
    try:
        if open("/dev/shm/starts").read().count("start") >= 2:
            break
    except FileNotFoundError:
        pass
    assert time.monotonic() < deadline, "the shard server did not start twice"
    time.sleep(0.1)
seg = shared_memory.SharedMemory(name="gt-rows")
resource_tracker.unregister(seg._name, "shared_memory")
got = bytes(seg.buf[:5]).decode()
print("read", got)
open("/dev/termination-log", "w").write("read " + got)
"""


def worker_pod(image: str) -> Obj:
    """The operator's worker pod in small: a sidecar and a trainer (each its own mounts), restricted
    as the operator's pods are, /dev/shm an emptyDir of medium Memory in both."""
    shm = {"name": "shm", "mountPath": "/dev/shm"}
    restricted = {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    shard = {
        "name": "shard",
        "image": image,
        "command": ["python3", "-c", SHARD],
        "restartPolicy": "Always",
        "ports": [{"name": "metrics", "containerPort": 9090}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 1},
        "volumeMounts": [shm],
        "securityContext": restricted,
    }
    trainer = {
        "name": "trainer",
        "image": image,
        "command": ["python3", "-c", TRAIN],
        "volumeMounts": [shm, {"name": "scratch", "mountPath": "/scratch"}],
        "securityContext": restricted,
    }
    return pod(
        "w",
        image,
        [],
        initContainers=[shard],
        containers=[trainer],
        volumes=[
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
            {"name": "scratch", "emptyDir": {}},
        ],
        securityContext={"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
        terminationGracePeriodSeconds=5,
    )


def wait_ready(runner: PodRunner, name: str, timeout: float = 30) -> dict:
    """The pod once its Ready condition is True (every container ready, sidecars included)."""
    deadline, body = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        assert not runner.errors, runner.errors[-3:]
        body = runner.api.get("api/v1", NS, "pods", name)
        if body is not None and decide.is_ready(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"{name} not Ready after {timeout:.0f} s: {json.dumps(body)[:3000]}")


@pytest.mark.parametrize("mode", ["process", "podman"])
def test_a_sidecar_shares_dev_shm_restarts_in_place_and_stops_after_the_main_containers(
    mode: str, kubeconfig: str, tmp_path: Path
) -> None:
    """Partition locality's worker pod: the shard server a sidecar (initContainers, restartPolicy
    Always) whose POSIX shared memory the trainer maps from the pod's /dev/shm (uid 10001 in podman)."""
    image = image_for(mode)
    delete_pods(Api(kubeconfig))
    with PodRunner(kubeconfig, mode=mode, image=image, root=tmp_path / "runner") as runner:
        memory = Path(podnames.memory_dir(runner.network.block))
        runner.api.create("api/v1", NS, "pods", worker_pod(image or "none"))
        ready = wait_ready(runner, "w")  # the sidecar's readiness probe included
        (side,) = ready["status"]["initContainerStatuses"]
        assert side["name"] == "shard" and side["ready"] and side["started"], side
        assert side["restartCount"] == 0, side
        assert {c["type"]: c["status"] for c in ready["status"]["conditions"]}["Initialized"] == "True"
        assert [p.name for p in memory.glob("*/shm/gt-rows")] == ["gt-rows"]  # tmpfs, not the pod's dir
        trainer = runner.pid(NS, "w")
        runner.kill_container(NS, "w", signal.SIGKILL, container="shard")
        done = wait_pod(runner, "w", {"Succeeded", "Failed"}, timeout=30)
        log = runner.logs(NS, "w")
        assert done["status"]["phase"] == "Succeeded", (done["status"], log)
        (main,) = done["status"]["containerStatuses"]
        assert main["restartCount"] == 0 and main["state"]["terminated"]["message"] == "read rows!", main
        (side,) = done["status"]["initContainerStatuses"]
        assert side["restartCount"] == 1, side  # restarted in place, once, while the trainer ran on
        assert side["lastState"]["terminated"]["exitCode"] == 137, side
        assert side["state"]["terminated"]["message"] == "shard stopped", side  # SIGTERM; its own message
        assert trainer is not None and "read rows!" in log
        time.sleep(1.5)  # past the restart back-off: nothing restarts a finished pod's sidecar
        assert runner.pid(NS, "w", container="shard") is None
        assert runner.api.get("api/v1", NS, "pods", "w")["status"]["initContainerStatuses"] == [side]
        delete_pods(runner.api)
        deadline = time.monotonic() + 10
        while list(memory.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not list(memory.iterdir())  # a pod's Memory emptyDirs go with it
    assert not memory.exists()  # and the runner's with the runner
