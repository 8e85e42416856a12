"""What a checkpoint costs a job that touches few rows between checkpoints, full against incremental:
2 shard servers hold one Adam table (`--rows` x `--dim` float32, rows and state ~3x the rows' bytes);
a client trains it (DistEmbedding + SparseOptimizer, `--batch` uniform random ids a step) and takes a
checkpoint every `--interval` steps as the trainers do (arm, train on while the servers write, complete
with checkpoint.json and LATEST, prune to 2). The same seeded job runs with the servers'
--checkpoint-full-every 1 (every checkpoint full: the named baseline) and 5 (the default: incremental
between full ones), one after the other in one command.

Reported per checkpoint: the share of rows changed since the one before, the bytes of rows the servers
wrote, the pause (what the trainers wait for: the previous checkpoint's write to end, as rank 0 waits
for it, and the arm call) and the servers' background write time; per job,
the time to choose and check the latest checkpoint (latest_verified: every file of its chain hashed)
and to restore it, and that the restored rows equal the rows at that checkpoint, bit for bit.

    python bench/checkpoint_rows.py [--rows 1000000] [--dim 32] [--batch 1024] [--interval 200]
        [--checkpoints 6] [--work DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from servers import start_server

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding

CONFIG = OptimConfig("adam", 0.01, eps=1e-8, step_count="row")


def rows_of(client: kvstore.KVClient, emb: DistEmbedding, rows: int, dim: int) -> np.ndarray:
    return client.pull("emb", np.arange(rows), emb.table.book.bounds, (dim,), np.float32)


def complete(client: kvstore.KVClient, root: Path, name: str) -> tuple[list[dict[str, Any]], int]:
    """Wait for the servers' write of checkpoint `name` (bounded), then complete it as rank 0 does;
    returns each server's status (seconds, row_bytes, incremental) and the bytes of its .npy files."""
    deadline = time.monotonic() + 600
    while (pieces := client.checkpoint_done(name)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"checkpoint {name}: not written in 600 s")
        time.sleep(0.02)
    status = [a.result for a in client.each("checkpoint_status", None, {"path": name})]
    ckpt.write_top(root / name, pieces, client.num_shards)
    nbytes = sum(f.stat().st_size for f in (root / name).rglob("*.npy"))
    ckpt.mark_latest(root, name)
    ckpt.prune(root, 2)
    return status, nbytes


def job(full_every: int, a: argparse.Namespace, work: Path, token: str) -> dict[str, Any]:
    root = work / f"full-every-{full_every}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    procs, addresses = [], []
    try:
        for shard in range(2):
            extra = ("--shard", str(shard), "--checkpoint-full-every", str(full_every))
            proc, address = start_server("tcp://127.0.0.1:0", token, str(root), *extra)
            procs.append(proc)
            addresses.append(address)
        client = kvstore.connect(addresses, token, timeout=120)
        emb = DistEmbedding(a.rows, a.dim, "emb", client=client)
        opt = SparseOptimizer([emb], CONFIG)
        g = torch.Generator().manual_seed(0)
        changed = np.zeros(a.rows, dtype=bool)
        per: list[dict[str, Any]] = []
        pending = None
        saved = None
        for c in range(a.checkpoints):
            start = time.perf_counter()
            for _ in range(a.interval):
                ids = torch.randint(0, a.rows, (a.batch,), generator=g)
                changed[ids.numpy()] = True
                (emb(ids) * torch.randn(a.batch, a.dim, generator=g)).sum().backward()
                opt.step()
            train_s = time.perf_counter() - start
            armed = time.perf_counter()  # as rank 0: the previous write ends first, then this one is armed
            if pending is not None:
                pending["status"], pending["bytes"] = complete(client, root, pending["name"])
            name = f"step-{(c + 1) * a.interval:09d}"
            client.checkpoint_begin(name)
            paused = time.perf_counter() - armed
            if c == a.checkpoints - 1:
                saved = rows_of(client, emb, a.rows, a.dim)
            pending = {"name": name, "paused": paused, "changed": changed.mean(), "train_s": train_s}
            per.append(pending)
            changed[:] = False
        assert pending is not None and saved is not None
        pending["status"], pending["bytes"] = complete(client, root, pending["name"])
        start = time.perf_counter()
        latest, skipped = ckpt.latest_verified(root)
        verify_s = time.perf_counter() - start
        assert latest is not None and latest.name == per[-1]["name"] and not skipped, (latest, skipped)
        opt.step()  # nothing pending
        start = time.perf_counter()
        client.restore(latest.name)
        restore_s = time.perf_counter() - start
        same = bool(np.array_equal(rows_of(client, emb, a.rows, a.dim), saved))
        client.close()
    finally:
        for proc in procs:  # SIGTERM: a server stops; one that does not within 30 s is killed
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"per": per, "verify_s": verify_s, "restore_s": restore_s, "same": same}


def report(full_every: int, r: dict[str, Any]) -> None:
    print(f"\n--checkpoint-full-every {full_every}:")
    print(
        "| checkpoint | rows changed since the last | pieces incremental | rows' files written | paused | "
        "servers' write (slower shard) | training of the interval before |"
    )
    print("|---|---|---|---|---|---|---|")
    for p in r["per"]:
        inc = sum(s["incremental"] for s in p["status"])
        print(
            f"| {p['name']} | {100 * p['changed']:.1f} % | {inc} of {len(p['status'])} | "
            f"{p['bytes'] / 2**20:.1f} MiB | {1000 * p['paused']:.0f} ms | "
            f"{max(s['seconds'] for s in p['status']):.2f} s | {p['train_s']:.1f} s |"
        )
    total = sum(p["bytes"] for p in r["per"])
    print(
        f"in all {total / 2**20:.0f} MiB written, pause median "
        f"{1000 * statistics.median(p['paused'] for p in r['per']):.0f} ms; latest checked "
        f"(every file of its chain) in {r['verify_s']:.2f} s, restored in {r['restore_s']:.2f} s, "
        f"rows after restore {'equal' if r['same'] else 'DIFFERENT'} to the checkpoint's"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--interval", type=int, default=200)
    ap.add_argument("--checkpoints", type=int, default=6)
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-checkpoint-rows-"))
    torch.set_num_threads(1)
    print(
        f"[bench] {dt.datetime.now().isoformat(timespec='minutes')} {platform.node()} {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}; {a.rows:,} x {a.dim} Adam table on 2 shard servers, {a.batch} ids a "
        f"step, a checkpoint every {a.interval} steps, {a.checkpoints} checkpoints; work {work}",
        flush=True,
    )
    token = secrets.token_hex(16)
    for full_every in (1, 5):
        report(full_every, job(full_every, a, work, token))


if __name__ == "__main__":
    main()
