"""Collective tables against shard servers on the same job, and a dynamic vocabulary against fixed rows.

    python bench/collective.py [--rows 1000000 --dim 64 --batch 16384 --steps 20 --worlds 2 4]

The job: W trainer ranks (spawned processes, one thread each), each looking up `batch` ids per step
(uniform, or Zipf with --zipf), a loss over the rows, backward, and a row-wise Adagrad step. Modes, run
one after the other on this machine:
- server: W shard servers (--shm, ipc://, 1 worker each), each rank a client reading co-located rows
  from shared memory and pushing deduplicated gradients (what `graphtrain run` does on one host);
- collective: the table sharded over the ranks themselves, lookups and gradients all-to-all over gloo;
- collective dynamic: the same with a dynamic vocabulary (capacity = rows; keys spread over int64);
- server dynamic: the server mode with a dynamic vocabulary on the shard servers (key mod shards, no
  shared-memory path: every lookup is a request; keys spread over int64).
Prints lookups+updates per second over all ranks (ids looked up and their gradients applied) and each
mode's ratio to the server mode, per world size.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from servers import start_server

SCALE, SHIFT = 7_919_000_003, -(2**61)


def batches(args: argparse.Namespace, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(1000 + rank)
    out = []
    for _ in range(args.steps + args.warmup):
        if args.zipf:
            ids = (rng.zipf(args.zipf, args.batch) - 1) % args.rows
        else:
            ids = rng.integers(0, args.rows, args.batch)
        out.append(
            (
                torch.from_numpy(ids.astype(np.int64)),
                torch.from_numpy(rng.standard_normal((args.batch, args.dim), dtype=np.float32)),
            )
        )
    return out


def table_for(mode: str, args: argparse.Namespace, addresses: list[str], token: str):  # type: ignore[no-untyped-def]
    if mode in ("server", "server-dynamic"):
        from graphtrain.runtime import kvstore
        from graphtrain.runtime.tensor import DistEmbedding, DynamicVocabulary

        client = kvstore.connect(addresses, token, shm=True)
        vocab = DynamicVocabulary(args.rows) if mode == "server-dynamic" else None
        return DistEmbedding(args.rows, args.dim, "bench", client=client, vocabulary=vocab)
    from graphtrain.runtime.collective import CollectiveEmbedding

    capacity = args.rows if mode == "dynamic" else None
    return CollectiveEmbedding(args.rows, args.dim, "bench", capacity=capacity)


def rank_main(
    mode: str,
    rank: int,
    world: int,
    store: str,
    args: argparse.Namespace,
    addresses: list[str],
    token: str,
    out: str,
) -> None:
    from graphtrain.runtime.optim import OptimConfig, SparseOptimizer

    torch.set_num_threads(1)
    os.environ["GRAPHTRAIN_OPTIM_THREADS"] = "1"
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    table = table_for(mode, args, addresses, token)
    opt = SparseOptimizer([table], OptimConfig("rowwise_adagrad", 0.01, eps=1e-8))
    work = batches(args, rank)
    if mode in ("dynamic", "server-dynamic"):
        work = [(ids * SCALE + SHIFT, g) for ids, g in work]
    times = []
    for k, (ids, grads) in enumerate(work):
        if k == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        t0 = time.perf_counter()
        (table(ids) * grads).sum().backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    dist.barrier()
    Path(out, f"{rank}.txt").write_text(f"{elapsed} {statistics.median(times[args.warmup :])}")
    if mode.startswith("server"):
        table.client.close()
    dist.destroy_process_group()


def run_mode(mode: str, world: int, args: argparse.Namespace) -> tuple[float, float]:
    """(lookups+updates per second over all ranks, median step seconds) of one mode."""
    with tempfile.TemporaryDirectory(prefix="gt-coll-") as tmp:
        token, servers, addresses = secrets.token_hex(16), [], []
        if mode.startswith("server"):
            for s in range(world):
                proc, address = start_server(
                    f"ipc://{tmp}/s{s}.sock", token, tmp, "--shard", str(s), "--workers", "1", "--shm"
                )
                servers.append(proc)
                addresses.append(address)
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(target=rank_main, args=(mode, r, world, f"{tmp}/store", args, addresses, token, tmp))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(args.timeout)
        for p in procs:
            if p.is_alive():
                p.kill()
        for proc in servers:  # SIGTERM: a server unlinks its shared memory as it stops
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        results = [Path(tmp, f"{r}.txt").read_text().split() for r in range(world)]
    elapsed = max(float(e) for e, _ in results)
    step = statistics.median(float(s) for _, s in results)
    return world * args.batch * args.steps / elapsed, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16_384, help="ids per rank per step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--zipf", type=float, default=0.0, help="Zipf exponent of the ids (0: uniform)")
    parser.add_argument("--timeout", type=float, default=600)
    modes = ["server", "collective", "dynamic", "server-dynamic"]
    parser.add_argument("--modes", nargs="+", choices=modes, default=modes, help="the first is the baseline")
    args = parser.parse_args()
    print(
        f"# bench/collective.py {dt.date.today()} on {platform.node()} ({os.cpu_count()} cores), "
        f"{args.rows:,} x {args.dim} rows, {args.batch:,} ids per rank per step, "
        f"{'Zipf ' + str(args.zipf) if args.zipf else 'uniform'} ids, row-wise Adagrad, {args.steps} steps"
    )
    print("| ranks | mode | lookups+updates/s | step ms (median) | vs server |")
    print("|---|---|---|---|---|")
    for world in args.worlds:
        base = None
        for mode in args.modes:
            rate, step = run_mode(mode, world, args)
            base = base or rate
            label = {
                "dynamic": "collective, dynamic vocabulary",
                "server-dynamic": "server, dynamic vocabulary",
            }.get(mode, mode)
            print(f"| {world} | {label} | {rate:,.0f} | {step * 1e3:.1f} | {rate / base:.2f}x |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
