"""Soak: 16 clients pulling and pushing against 2 shard servers for 10 minutes.

Two shard-server processes (tcp://, 4 workers each) hold a 2,000,000 x 64 float32 table under row-wise
Adagrad, half each. 16 clients (4 processes x 4 threads, each thread its own connection) loop: pull
1,000 random rows, push 1,000 rows of gradients, and every 50th turn pull 50,000 rows (a stream of
several chunks). Every minute the script prints that minute's pulls/s, pushes/s, rows/s, errors and the
servers' RSS; at the end, RSS at the start and the end, and every distinct error with its count.

What it shows: throughput that stays flat (nothing slows down as the server runs), RSS that stops
growing once the buffers and allocator reach their steady state (no leak), and no errors. The clients'
1,000-row pulls and pushes (256,000 bytes) go over the fast lane, pushes stepped there under the table's
lock while 16 connections contend for it (a locked table's push goes over ZMQ); --no-fast: ZMQ only.
--shm: as `graphtrain run` lays them out on one host, the servers on ipc:// with their tables in shared
memory; the clients read rows from there and push gradients from their shared-memory buffers over the
lane's Unix socket (wire version 3).

    python bench/soak.py [--minutes 10] [--clients 16] [--no-fast] [--shm]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import platform
import secrets
import tempfile
import threading
import time

import numpy as np
import psutil
from servers import start_server

from graphtrain.runtime import kvstore

ROWS, DIM, BATCH = 2_000_000, 64, 1000


def client_thread(addresses: list[str], token: str, seed: int, stop, counts, errors, fast: bool) -> None:  # noqa: ANN001
    bounds = np.array([0, ROWS // 2, ROWS])
    rng = np.random.default_rng(seed)
    shm = addresses[0].startswith("ipc://")  # --shm: same host, tables and push buffers in shared memory
    c = kvstore.connect(addresses, token, timeout=60, retries=1, fast=fast, shm=shm)
    grads = rng.standard_normal((BATCH, DIM)).astype(np.float32) * 0.01
    turn = 0
    while not stop.is_set():
        turn += 1
        try:
            n = 50_000 if turn % 50 == 0 else BATCH
            c.pull("emb", rng.integers(0, ROWS, n), bounds, (DIM,), np.float32)
            with counts.get_lock():
                counts[0] += 1
                counts[2] += n
            c.push_grad("emb", rng.choice(ROWS, BATCH, replace=False), grads, bounds, mean=False)
            with counts.get_lock():
                counts[1] += 1
                counts[2] += BATCH
        except Exception as exc:  # noqa: BLE001 - counted and reported, the soak goes on
            with counts.get_lock():
                counts[3] += 1
            errors.put(f"{type(exc).__name__}: {str(exc)[:200]}")
            time.sleep(0.1)
    c.close()


def client_process(
    addresses: list[str],
    token: str,
    seed: int,
    threads: int,
    stop,
    counts,
    errors,
    fast: bool,  # noqa: ANN001
) -> None:
    ts = [
        threading.Thread(
            target=client_thread, args=(addresses, token, seed * 100 + i, stop, counts, errors, fast)
        )
        for i in range(threads)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=16, help="connections (4 per client process)")
    ap.add_argument(
        "--fast",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="clients use the fast lane (its pulls, and its pushes of <= 256 KiB); --no-fast: ZMQ only",
    )
    ap.add_argument("--shm", action="store_true", help="servers on ipc:// with shared memory (a local run's)")
    args = ap.parse_args()
    token = secrets.token_hex(16)
    print(
        f"# bench/soak.py, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {psutil.cpu_count()} CPUs, "
        f"2 servers x 4 workers, {args.clients} clients, table {ROWS:,} x {DIM}, {args.minutes:g} min, "
        f"{'fast lane' if args.fast else 'ZMQ only'}{', ipc:// and shared memory' if args.shm else ''}"
    )
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="gt-soak-") as root:
        procs, addresses = [], []
        for i in range(2):
            bind, extra = (
                (f"ipc://{root}/shard-{i}.sock", ["--shm"]) if args.shm else ("tcp://127.0.0.1:0", [])
            )
            p, a = start_server(bind, token, root, "--workers", "4", *extra)
            procs.append(p)
            addresses.append(a)
        setup = kvstore.connect(addresses, token, timeout=120)
        setup.create(
            "emb", ROWS, (DIM,), "float32", np.array([0, ROWS // 2, ROWS]), {"kind": "uniform", "seed": 1}
        )
        setup.set_optimizer("emb", {"kind": "rowwise_adagrad", "lr": 0.01})
        servers = [psutil.Process(p.pid) for p in procs]

        def rss() -> list[float]:
            return [s.memory_info().rss / 2**20 for s in servers]

        start_rss = rss()
        stop, errors = ctx.Event(), ctx.Queue()
        counts = ctx.Array("d", 4)  # pulls, pushes, rows, errors
        per_proc = 4
        clients = [
            ctx.Process(
                target=client_process, args=(addresses, token, i, per_proc, stop, counts, errors, args.fast)
            )
            for i in range(max(1, args.clients // per_proc))
        ]
        for c in clients:
            c.start()
        print("\n| minute | pulls/s | pushes/s | rows/s | errors | server RSS MB |")
        print("|---|---|---|---|---|---|")
        end = time.monotonic() + 60 * args.minutes
        last, minute, t0 = [0.0] * 4, 0, time.monotonic()
        while time.monotonic() < end:
            time.sleep(min(60.0, max(0.0, end - time.monotonic())))
            minute += 1
            with counts.get_lock():
                now = list(counts)
            d = [a - b for a, b in zip(now, last, strict=True)]
            last, t1 = now, time.monotonic()
            span, t0 = t1 - t0, t1
            print(
                f"| {minute} | {d[0] / span:,.0f} | {d[1] / span:,.0f} | {d[2] / span:,.0f} | {int(d[3])} | "
                + " / ".join(f"{r:.0f}" for r in rss())
                + " |",
                flush=True,
            )
        stop.set()
        for c in clients:
            c.join(timeout=120)
        seen: collections.Counter[str] = collections.Counter()
        while not errors.empty():
            seen[errors.get()] += 1
        end_rss = rss()
        health = setup.health(timeout=10)
        setup.shutdown()
        setup.close()
        for p in procs:
            p.wait(timeout=60)
    print(
        "\nserver RSS MB, start -> end: "
        + ", ".join(f"{a:.0f} -> {b:.0f}" for a, b in zip(start_rss, end_rss, strict=True))
        + f"; live at the end: {[h['live'] for h in health]}; errors: {sum(seen.values())}"
    )
    for text, n in seen.most_common():
        print(f"  {n} x {text}")


if __name__ == "__main__":
    main()
