"""Serving: 16 concurrent clients, a large request that does not hold back small ones, Prometheus
metrics, and a server holding its partition's node data."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import kvstore, partition
from tests.runtime.conftest import TOKEN, segments_of, servers


@pytest.mark.timeout(180)
def test_sixteen_concurrent_clients(ckroot: Path) -> None:
    with servers(2, ckroot) as srv:
        addresses = [s.address for s in srv]
        setup = kvstore.connect(addresses, TOKEN)
        bounds = np.array([0, 5000, 10000])
        setup.create("t", 10000, (8,), "float32", bounds, {"kind": "uniform", "seed": 3})
        expected = setup.pull("t", np.arange(10000), bounds, (8,), np.float32)
        errors: list[BaseException] = []

        def worker(seed: int) -> None:
            try:
                client = kvstore.connect(addresses, TOKEN, timeout=60)
                rng = np.random.default_rng(seed)
                for _ in range(20):
                    ids = rng.integers(0, 10000, 500)
                    assert np.array_equal(client.pull("t", ids, bounds, (8,), np.float32), expected[ids])
                client.close()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=150)
        assert not errors, errors[0]
        assert all(not t.is_alive() for t in threads)
        setup.close()


@pytest.mark.timeout(180)
def test_large_push_does_not_stall_small_pulls(ckroot: Path) -> None:
    rows, dim = 400_000, 128
    with servers(1, ckroot) as srv:
        big = kvstore.connect([srv[0].address], TOKEN, timeout=120)
        small = kvstore.connect([srv[0].address], TOKEN, timeout=120)
        bounds = np.array([0, rows])
        big.create("t", rows, (dim,), "float32", bounds)
        values = np.ones((rows, dim), np.float32)  # 205 MB in one push
        done = {}

        def push() -> None:
            big.push("t", np.arange(rows), values, bounds)
            done["push"] = time.monotonic()

        t = threading.Thread(target=push)
        t.start()
        time.sleep(0.05)  # the push is in flight
        for _ in range(5):
            small.pull("t", np.arange(1000), bounds, (dim,), np.float32)
        done["pulls"] = time.monotonic()
        t.join(timeout=120)
        assert "push" in done
        assert done["pulls"] < done["push"], "small pulls waited for the large push"
        big.close()
        small.close()


@pytest.mark.timeout(120)
def test_health_command_is_the_readiness_probe(ckroot: Path, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with servers(1, ckroot) as srv:
        ok = subprocess.run(
            [
                sys.executable,
                "-m",
                "graphtrain.runtime.cli",
                "health",
                srv[0].address,
                "--token-file",
                str(token),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ok.returncode == 0, ok.stderr
        assert srv[0].address in ok.stdout
        addr = srv[0].address
    gone = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtrain.runtime.cli",
            "health",
            addr,
            "--token-file",
            str(token),
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gone.returncode == 1 and addr in gone.stderr + gone.stdout


def test_metrics_endpoint(ckroot: Path) -> None:
    with servers(1, ckroot, "--metrics-port", "0") as srv:
        client = kvstore.connect([srv[0].address], TOKEN)
        bounds = np.array([0, 100])
        client.create("t", 100, (4,), "float32", bounds)
        client.set_optimizer("t", {"kind": "sgd", "lr": 0.1})
        client.pull("t", np.arange(10), bounds, (4,), np.float32)
        client.push_grad("t", np.array([1, 2, 2]), np.ones((3, 4), np.float32), bounds, mean=False)
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{srv[0].metrics_port}/metrics", timeout=10)
            .read()
            .decode()
        )
        for needle in (
            'graphtrain_kvstore_requests_total{op="pull",outcome="ok",shard="0"} 1.0',
            # the pull went over the fast lane: counted at the scrape, with the lane's own families
            'graphtrain_kvstore_fast_lane_events_total{event="pulls_ok",shard="0"} 1.0',
            'graphtrain_kvstore_fast_lane_connections{shard="0"} 1.0',
            'graphtrain_kvstore_rows_pulled_total{shard="0"} 10.0',
            'graphtrain_kvstore_rows_pushed_total{kind="gradient",shard="0"} 2.0',
            "graphtrain_kvstore_request_seconds_bucket",
            "graphtrain_kvstore_optimizer_seconds_count",
            'graphtrain_kvstore_table_rows{shard="0",tensor="t"} 100.0',
            'graphtrain_kvstore_table_bytes{shard="0",tensor="t"} 1600.0',
        ):
            assert needle in text, needle
        assert TOKEN not in text
        client.close()


def dense_partition(directory: Path):
    """A 600-node planted graph with dense features, in 2 METIS parts: (graph, partition config)."""
    from graphtrain.runtime.data.graph import Graph
    from tests.conftest import planted_graph

    base = planted_graph(n=600, k=2)
    g = Graph.from_edges(
        "dense",
        600,
        *base.edges(),
        feat=np.random.default_rng(0).random((600, 5)).astype(np.float32),
        label=base.label,
        masks=base.masks,
    )
    return g, partition.write(g, partition.partition_graph(g, 2), directory / "part")


@pytest.mark.timeout(180)
def test_server_holds_its_partition_node_data(ckroot: Path, tmp_path: Path) -> None:

    g, cfg = dense_partition(tmp_path)
    bounds = partition.load_config(cfg).node_bounds
    with servers(2, ckroot, "--partition", str(cfg)) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        maps = partition.load_maps(partition.load_config(cfg))
        new_ids = np.arange(600)
        feat = client.pull("ndata.feat", new_ids, bounds, (5,), np.float32)
        label = client.pull("ndata.label", new_ids, bounds, (), np.int64)
        train = client.pull("ndata.train_mask", new_ids, bounds, (), np.int32)
        assert np.array_equal(feat, g.feat[maps["node_map"]])
        assert np.array_equal(label, g.label[maps["node_map"]])
        assert np.array_equal(train.astype(bool), g.masks["train"][maps["node_map"]])
        client.close()


@pytest.mark.timeout(180)
def test_same_host_clients_sample_shared_memory_as_the_servers_do(ckroot: Path, tmp_path: Path) -> None:
    """With --shm the servers put their partition's structure in shared memory; a client on the host
    samples it itself and draws exactly what the servers' sample requests return."""
    import os

    _, cfg = dense_partition(tmp_path)
    bounds = partition.load_config(cfg).node_bounds
    seeds = np.random.default_rng(3).permutation(600)[:200]
    with servers(2, ckroot, "--partition", str(cfg), "--shm") as srv:
        addresses = [s.address for s in srv]
        local = kvstore.connect(addresses, TOKEN, shm=True)
        remote = kvstore.connect(addresses, TOKEN)
        assert local.transport.local_graph(1) is not None and remote.transport.local_graph(1) is None
        for fanout in (3, -1):
            for seed in (0, 17):
                got = local.sample(seeds, fanout, bounds, seed)
                want = remote.sample(seeds, fanout, bounds, seed)
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        local.close()
        remote.close()
        pids = [os.getpid(), *(s.proc.pid for s in srv)]
    assert not segments_of(pids)


@pytest.mark.timeout(180)
def test_shared_memory_reads_and_gradient_buffers_match_tcp(ckroot: Path) -> None:
    """Same host: rows read from the servers' shared memory and gradients passed through the client's
    buffer give exactly what the socket path gives; nothing is left in /dev/shm afterwards."""
    import os

    import torch

    from graphtrain.runtime.optim import OptimConfig
    from graphtrain.runtime.tensor import DistEmbedding

    rows, dim = 20_000, 16
    with servers(2, ckroot, "--shm") as srv:
        addresses = [s.address for s in srv]
        local = kvstore.connect(addresses, TOKEN, shm=True)
        remote = kvstore.connect(addresses, TOKEN)
        config = OptimConfig("adagrad", 0.1)
        a = DistEmbedding(rows, dim, "a", client=local, init={"kind": "uniform", "seed": 1})
        b = DistEmbedding(rows, dim, "b", client=remote, init={"kind": "uniform", "seed": 1})
        a.attach(config)
        b.attach(config)
        assert local.transport.local_view(0, "a") is not None and remote.transport.local_view(0, "b") is None
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            ids = torch.randint(0, rows, (3000,), generator=g)
            grads = torch.randn(3000, dim, generator=g)
            a.apply_gradients(ids, grads)
            b.apply_gradients(ids, grads)
        everything = torch.arange(rows)
        assert torch.equal(a.rows(everything), b.rows(everything))  # a via shared memory, b via TCP
        local.close()
        remote.close()
        pids = [os.getpid(), *(s.proc.pid for s in srv)]
    assert not segments_of(pids)  # other tests' servers run beside these, under the same token


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shm", [False, True], ids=["tcp", "shm"])
def test_deferred_push_lands_before_the_next_read(ckroot: Path, shm: bool) -> None:
    """push_grad(wait=False) returns once sent; the client's next read (a socket pull or a shared-memory
    gather) waits for it, so every read sees the update; a refused push is raised there."""
    import torch

    from graphtrain.runtime.kvstore.wire.protocol import RemoteError
    from graphtrain.runtime.optim import OptimConfig
    from graphtrain.runtime.tensor import DistEmbedding

    rows, dim = 200_000, 32  # a push of ~100,000 unique rows keeps the servers busy for milliseconds
    with servers(2, ckroot, *(["--shm"] if shm else [])) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, shm=shm)
        config = OptimConfig("adam", 0.05)
        deferred = DistEmbedding(rows, dim, "deferred", client=client, init={"kind": "uniform", "seed": 1})
        direct = DistEmbedding(rows, dim, "direct", client=client, init={"kind": "uniform", "seed": 1})
        deferred.attach(config)
        direct.attach(config)
        g = torch.Generator().manual_seed(0)
        for n in (150_000, 2_000, 2_000):
            ids = torch.randint(0, rows, (n,), generator=g)
            grads = torch.randn(n, dim, generator=g)
            direct.apply_gradients(ids, grads)
            deferred.apply_gradients(ids, grads, wait=False)
            assert torch.equal(deferred.rows(ids), direct.rows(ids))  # read right after the push
        bare = DistEmbedding(rows, dim, "bare", client=client)  # no optimizer: the server refuses
        client.push_grad(
            "bare", np.arange(10), np.ones((10, dim), np.float32), bare.table.book.bounds, False, wait=False
        )
        with pytest.raises(RemoteError, match="no optimizer"):
            client.settle()
        everything = torch.arange(rows)
        assert torch.equal(deferred.rows(everything), direct.rows(everything))
        client.close()


@pytest.mark.timeout(180)
def test_a_shared_memory_read_waits_only_for_pushes_to_its_own_table(ckroot: Path) -> None:
    """With a push in flight, another table's rows are read from shared memory at once (its outcome still
    pending); a read of the pushed table waits for it, and is where its refusal is raised."""
    import torch

    from graphtrain.runtime.kvstore.wire.protocol import RemoteError
    from graphtrain.runtime.optim import OptimConfig
    from graphtrain.runtime.tensor import DistEmbedding, DistTensor

    rows, dim = 1_000, 8
    with servers(2, ckroot, "--shm") as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, shm=True)
        feat = DistTensor((rows, dim), torch.float32, "feat", {"kind": "uniform", "seed": 3}, client=client)
        emb = DistEmbedding(rows, dim, "emb", client=client, init={"kind": "uniform", "seed": 1})
        bare = DistEmbedding(rows, dim, "bare", client=client)  # no optimizer: its pushes are refused
        emb.attach(OptimConfig("sgd", 0.5))
        ids = np.arange(0, rows, 7)
        before = feat[torch.from_numpy(ids)]
        ones = np.ones((len(ids), dim), np.float32)
        client.push_grad("bare", ids, ones, bare.table.book.bounds, False, wait=False)
        assert torch.equal(feat[torch.from_numpy(ids)], before)  # read at once: nothing raised yet
        with pytest.raises(RemoteError, match="no optimizer"):
            bare.table.pull(ids)
        # a push applied before the next read of its own table, as ever
        old = emb.rows(torch.from_numpy(ids))
        emb.apply_gradients(torch.from_numpy(ids), torch.ones(len(ids), dim), wait=False)
        assert torch.equal(feat[torch.from_numpy(ids)], before)
        assert torch.allclose(emb.rows(torch.from_numpy(ids)), old - 0.5)
        assert client.transport._open is None and client.transport._lane_open is None  # collected there
        client.settle()
        client.close()
