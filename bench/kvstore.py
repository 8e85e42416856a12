"""Shard-server benchmark: throughput against a raw TCP socket, latency, and a full optimizer step.

Measured side by side in one run, server and client in separate processes on loopback:
- raw TCP: a process sends 100,000 x 128 float32 (51 MB) over a plain socket, the other recv_into()s a
  reused buffer: the baseline the protocol is held to (target: >= 65 % of it);
- pull and push-gradient of the same 51 MB (100,000 random rows of a 1,000,000-row table) over tcp://,
  ipc:// and, for a client on the server's host, shared memory (--shm);
- p50 / p99 latency of 1,000-row pulls;
- the end-to-end optimizer step of a DistEmbedding (pull, backward, dedup, push-gradient, server-side
  row-wise Adagrad) over tcp:// and over shared memory, and in standalone mode (in-process shards).

    python bench/kvstore.py [--rows 1000000] [--batch 100000] [--dim 128] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding


def _raw_sender(port: int, nbytes: int, reps: int) -> None:
    payload = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(reps):
            s.recv(1)  # the receiver asks for the next transfer
            s.sendall(memoryview(payload))


def raw_tcp(nbytes: int, reps: int) -> float:
    """Best transfer time of `nbytes` from another process over a plain loopback socket."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    proc = mp.get_context("spawn").Process(target=_raw_sender, args=(srv.getsockname()[1], nbytes, reps))
    proc.start()
    conn, _ = srv.accept()
    buf = bytearray(nbytes)
    mv = memoryview(buf)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        conn.send(b"g")
        got = 0
        while got < nbytes:
            got += conn.recv_into(mv[got:], nbytes - got)
        best = min(best, time.perf_counter() - t)
    conn.close()
    proc.join(timeout=30)
    return best


def start_server(bind: str, token: str, root: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """A shard-server process; its log goes to <root>/server.log."""
    env = {**os.environ, "GRAPHTRAIN_TOKEN": token, "GRAPHTRAIN_QUIET": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphtrain.runtime.cli",
            "shard-server",
            "--bind",
            bind,
            "--checkpoint-root",
            root,
            "--workers",
            "2",
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(root, "server.log"), "a"),  # noqa: SIM115 - the child owns it
        text=True,
    )
    line = json.loads(proc.stdout.readline())
    return proc, line["address"]


def best_of(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_transport(label: str, client, rows: int, batch: int, dim: int, reps: int) -> dict[str, float]:
    bounds = np.array([0, rows])
    name = f"t{secrets.token_hex(3)}"
    client.create(name, rows, (dim,), "float32", bounds, {"kind": "uniform", "seed": 1})
    client.set_optimizer(name, {"kind": "rowwise_adagrad", "lr": 0.01, "eps": 1e-8})
    rng = np.random.default_rng(0)
    ids = rng.permutation(rows)[:batch]  # distinct rows: the push moves all 51 MB
    grads = rng.standard_normal((batch, dim)).astype(np.float32)
    out = {
        "pull": best_of(lambda: client.pull(name, ids, bounds, (dim,), np.float32), reps),
        "push_grad": best_of(lambda: client.push_grad(name, ids, grads, bounds, mean=False), reps),
    }
    small = rng.integers(0, rows, (1000, 1000))
    lat = []
    for i in range(len(small)):
        t = time.perf_counter()
        client.pull(name, small[i], bounds, (dim,), np.float32)
        lat.append(time.perf_counter() - t)
    out["p50"] = statistics.median(lat)
    out["p99"] = float(np.percentile(lat, 99))
    out["label"] = label
    return out


def step_time(client, rows: int, batch: int, dim: int, reps: int) -> float:
    emb = DistEmbedding(rows, dim, f"e{secrets.token_hex(3)}", client=client)
    opt = SparseOptimizer([emb], OptimConfig("rowwise_adagrad", 0.01, eps=1e-8, duplicate="mean"))
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, rows, (batch,), generator=g), torch.randn(batch, dim, generator=g))
        for _ in range(reps + 1)
    ]
    it = iter(batches)

    def one() -> None:
        ids, grads = next(it)
        (emb(ids) * grads).sum().backward()
        opt.step()

    return best_of(one, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(2)
    nbytes = args.batch * args.dim * 4
    token = secrets.token_hex(16)
    print(
        f"# bench/kvstore.py, {time.strftime('%Y-%m-%d')}, {platform.node()}, {platform.machine()}, "
        f"{args.batch:,} x {args.dim} float32 = {nbytes / 1e6:.1f} MB per request, table {args.rows:,} rows"
    )
    raw = raw_tcp(nbytes, args.repeat)
    print(
        f"raw TCP socket (process to process, loopback): {1e3 * raw:.1f} ms = {nbytes / raw / 1e9:.2f} GB/s\n"
    )
    results, steps = [], []
    with tempfile.TemporaryDirectory(prefix="gt-bench-kv-") as root:
        for label, bind, extra, shm in (
            ("tcp", "tcp://127.0.0.1:0", (), False),
            ("ipc", f"ipc://{root}/kv.sock", (), False),
            ("shared memory", "tcp://127.0.0.1:0", ("--shm",), True),
        ):
            proc, address = start_server(bind, token, root, *extra)
            try:
                client = kvstore.connect([address], token, timeout=120, shm=shm)
                results.append(bench_transport(label, client, args.rows, args.batch, args.dim, args.repeat))
                if label != "ipc":
                    steps.append(
                        (
                            f"1 shard server, {label}",
                            step_time(client, args.rows, args.batch, args.dim, args.repeat),
                        )
                    )
                client.shutdown()
                client.close()
            finally:
                proc.wait(timeout=30)
    standalone = kvstore.standalone(1)
    steps.append(
        ("standalone (in-process shard)", step_time(standalone, args.rows, args.batch, args.dim, args.repeat))
    )
    print(
        "| transport | pull ms | pull GB/s | vs raw TCP | push-grad ms | push-grad GB/s | vs raw TCP | "
        "1,000-row pull p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        pull, push = r["pull"], r["push_grad"]
        print(
            f"| {r['label']} | {1e3 * pull:.1f} | {nbytes / pull / 1e9:.2f} | {100 * raw / pull:.0f} % | "
            f"{1e3 * push:.1f} | {nbytes / push / 1e9:.2f} | {100 * raw / push:.0f} % | "
            f"{1e3 * r['p50']:.2f} / {1e3 * r['p99']:.2f} |"
        )
    print("\n| optimizer step (pull, backward, dedup, push-grad, row-wise Adagrad) | ms/step | rows/s |")
    print("|---|---|---|")
    for label, t in steps:
        print(f"| {label} | {1e3 * t:.1f} | {args.batch / t / 1e6:.2f} M |")


if __name__ == "__main__":
    main()
