"""Liveness: a shard server tells "deaf" (nothing can be answered any more) from "busy" (workers are in
long requests but finish them), restarts a worker thread that ended, and serves its verdict at /livez
(the operator's liveness probe) and in the health reply (the readiness probe)."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from graphtrain.contract import httpd
from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.serving.server import Limits, ShardServer
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from tests.runtime.conftest import TOKEN, servers


@pytest.fixture
def server():
    srv = ShardServer(ShardTensors(0), TOKEN, "tcp://127.0.0.1:0", workers=2, limits=Limits(deaf_seconds=1.0))
    srv.start()
    yield srv
    srv.stop()


def block_stats(srv: ShardServer) -> threading.Event:
    """Make every `stats` request hold its worker until the returned event is set."""
    release = threading.Event()
    run = srv.dispatcher.run

    def slow(req, args, who=None, now=None):
        if req.op == "stats":
            release.wait(30)
        return run(req, args, who, now)

    srv.dispatcher.run = slow  # type: ignore[method-assign]
    return release


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(60)
def test_workers_stuck_with_requests_waiting_is_deaf_and_recovers(server: ShardServer) -> None:
    release = block_stats(server)
    clients = [kvstore.connect([server.address], TOKEN, timeout=30, retries=0) for _ in range(3)]
    threads = [threading.Thread(target=c.stats) for c in clients]  # 2 hold the workers, 1 waits
    for t in threads:
        t.start()
    assert wait_for(lambda: not server.liveness()[0], 10)
    live, why = server.liveness()
    assert "requests have waited" in why and "stats" in why
    probe = kvstore.connect([server.address], TOKEN, timeout=5, retries=0)
    health = probe.health()[0]  # answered by the I/O thread although both workers are stuck
    assert health["live"] is False and health["busy"] == 2 and health["queued"] == 1
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert wait_for(lambda: server.liveness()[0], 5)
    for c in [*clients, probe]:
        c.close()


@pytest.mark.timeout(60)
def test_busy_workers_that_finish_requests_are_live(server: ShardServer) -> None:
    run = server.dispatcher.run

    def slow(req, args, who=None, now=None):
        time.sleep(0.3)  # each request is long, but they keep finishing
        return run(req, args, who, now)

    server.dispatcher.run = slow  # type: ignore[method-assign]
    clients = [kvstore.connect([server.address], TOKEN, timeout=30, retries=0) for _ in range(4)]
    stop = time.monotonic() + 3.0
    verdicts = []

    def load(c) -> None:
        while time.monotonic() < stop:
            c.stats()

    threads = [threading.Thread(target=load, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    while time.monotonic() < stop:
        verdicts.append(server.liveness()[0])
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=10)
    assert all(verdicts), "a busy server was reported deaf"
    for c in clients:
        c.close()


@pytest.mark.timeout(60)
def test_a_worker_thread_that_ended_is_replaced(server: ShardServer) -> None:
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    server._workers[0] = dead  # noqa: SLF001 - as if the thread had ended
    assert not server.liveness()[0]
    assert wait_for(lambda: server._workers[0] is not dead and server._workers[0].is_alive(), 5)  # noqa: SLF001
    assert server.liveness()[0]
    value = server.metrics.registry.get_sample_value(
        "graphtrain_kvstore_worker_restarts_total", {"shard": "0"}
    )
    assert value == 1.0
    c = kvstore.connect([server.address], TOKEN, timeout=5, retries=0)
    assert c.stats()[0]["shard"] == 0
    c.close()


def test_a_stalled_io_thread_is_deaf(server: ShardServer) -> None:
    live, why = server.liveness(now=time.monotonic() + 60)
    assert not live and "I/O thread" in why


def test_readiness_is_the_request_loop_answering_now() -> None:
    """/readyz (the StatefulSet's readiness probe) is honest: not before the server started, not once
    a stop was asked for, not when the I/O thread stopped turning for seconds (well before liveness
    gives up on it), and ready with the shard and its tables otherwise."""
    srv = ShardServer(ShardTensors(3), TOKEN, "tcp://127.0.0.1:0", workers=1)
    assert srv.readiness() == (False, "not started")
    srv.start()
    try:
        assert srv.readiness() == (True, "ready: shard 3, 0 tables")
        ready, why = srv.readiness(now=time.monotonic() + 5)
        assert not ready and "request loop has not turned" in why
        assert srv.liveness(now=time.monotonic() + 5)[0]  # still live: the kubelet does not restart it
        srv.request_stop()
        assert srv.readiness() == (False, "stopping")
    finally:
        srv.stop()


@pytest.mark.timeout(60)
def test_livez_answers_the_verdict(server: ShardServer) -> None:
    verdict = {"v": (True, "ok")}
    http = httpd.serve_metrics(server.metrics.registry, "127.0.0.1", 0, {"/livez": lambda: verdict["v"]})
    port = http.port
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5).read().decode()
        assert body.strip() == "ok"
        verdict["v"] = (False, "the I/O thread has not turned for 12 s")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5)
        assert exc.value.code == 503 and b"not turned" in exc.value.read()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'graphtrain_kvstore_live{shard="0"} 1.0' in metrics
        assert "\nprocess_resident_memory_bytes " in metrics  # the dashboards' memory panel
    finally:
        http.close()


@pytest.mark.timeout(120)
def test_a_server_process_serves_livez_and_readyz(ckroot: Path) -> None:
    with servers(1, ckroot, "--metrics-port", "0") as srv:
        base = f"http://127.0.0.1:{srv[0].metrics_port}"
        for path in ("/livez", "/readyz"):
            assert urllib.request.urlopen(base + path, timeout=5).status == 200
        said = urllib.request.urlopen(base + "/readyz?verbose", timeout=5).read().decode()
        assert said == "ready: shard 0, 0 tables\n"
        client = kvstore.connect([srv[0].address], TOKEN)
        try:
            client.create("t", 10, (2,), "float32", np.array([0, 10]))
            # the create's worker sends its reply before it counts itself idle: on a loaded machine the
            # next health may still see it busy, so the idle server is awaited (bounded), not assumed
            deadline = time.monotonic() + 10
            while (health := client.health()[0])["busy"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert 0 < health.pop("fast_port") < 65536  # the fast lane's, for clients to learn
            assert health.pop("fast_version") == 3  # its wire: batches, pushes from shared memory
            assert health.pop("fast_path") == ""  # a TCP lane: no Unix socket
            assert health == {
                "shard": 0,
                "tensors": 1,
                "live": True,
                "why": "ok",
                "workers": 4,
                "busy": 0,
                "queued": 0,
            }
        finally:
            client.close()


@pytest.mark.timeout(60)
def test_a_sticky_cuda_error_makes_the_server_not_live(server: ShardServer) -> None:
    """After an illegal address the GPU context is dead: the request is answered with the error, and the
    server is not live any more (so /livez fails and Kubernetes restarts it from its checkpoint)."""
    run = server.dispatcher.run

    def broken(req, args, who=None, now=None):
        if req.op == "stats":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return run(req, args, who, now)

    server.dispatcher.run = broken  # type: ignore[method-assign]
    client = kvstore.connect([server.address], TOKEN, timeout=10, retries=0)
    try:
        assert server.liveness()[0]
        with pytest.raises(Exception, match="illegal memory access"):
            client.stats()
        live, why = server.liveness()
        assert not live and "sticky CUDA error" in why and "illegal memory access" in why
        assert client.health()[0]["live"] is False
    finally:
        client.close()


def test_an_error_that_is_not_sticky_leaves_the_server_live(server: ShardServer) -> None:
    server.note_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    server.note_error(ValueError("an illegal memory access, says a client"))
    assert server.liveness() == (True, "ok")


@pytest.mark.timeout(60)
def test_a_server_stopped_by_a_signal_says_so_in_its_log(ckroot: Path) -> None:
    """A SIGTERM (the kubelet's, an admin's) ends a server with code 0, as a shutdown request does; its
    log says which it was, so a run whose trainers then lose it is told apart from a crash."""
    with servers(1, ckroot) as srv:
        srv[0].proc.send_signal(signal.SIGTERM)
        assert srv[0].proc.wait(timeout=30) == 0
        assert "stopping: SIGTERM received" in srv[0].log_text()
