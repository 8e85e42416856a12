"""The shard server's request path (issue 47, item 1): what one small pull costs the server.

One shard server process (2 workers, a 1,000,000 x 64 float32 table) and one client in this process
pulling random rows over TCP in a loop, one pull at a time, for --seconds per size. Reported per pull:
the round trip, the server's CPU (user + system, all its threads), and each server thread's share and
voluntary context switches (from /proc: who does the work, and how often threads hand it on). With
--py-spy PATH, `py-spy record --format raw` of the server for the first size goes to PATH (stacks by
thread, on-CPU samples only), to say where the CPU goes (py-spy is not a dependency: `pip install
py-spy`).

    python bench/request_path.py [--rows 64 1024] [--seconds 8] [--py-spy /tmp/spy.txt]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import start_server  # noqa: E402

from graphtrain.runtime import kvstore  # noqa: E402

TABLE_ROWS, DIM = 1_000_000, 64


def thread_times(pid: int) -> dict[int, tuple[float, int]]:
    """Each thread of `pid`: (CPU seconds, voluntary context switches)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            switches = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            out[int(tid)] = ((int(fields[11]) + int(fields[12])) / tick, switches)
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return out


def measure(client, server: psutil.Process, rows: int, seconds: float, spy: str | None) -> str:
    rng = np.random.default_rng(rows)
    ids = rng.integers(0, TABLE_ROWS, (2000, rows))
    bounds = np.array([0, TABLE_ROWS])
    for i in range(200):  # warm-up
        client.pull("t", ids[i % 2000], bounds, (DIM,), np.float32)
    recorder = None
    if spy:
        cmd = [shutil.which("py-spy") or "py-spy", "record", "--pid", str(server.pid), "--format", "raw"]
        cmd += ["--threads", "--nonblocking", "--rate", "500", "--duration", str(int(seconds)), "-o", spy]
        recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    before, cpu0 = thread_times(server.pid), sum(server.cpu_times()[:2])
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        client.pull("t", ids[n % 2000], bounds, (DIM,), np.float32)
        n += 1
    wall = time.perf_counter() - start
    cpu, after = sum(server.cpu_times()[:2]) - cpu0, thread_times(server.pid)
    if recorder is not None:
        recorder.wait(timeout=120)
    busy = sorted(
        ((after[t][0] - before.get(t, (0.0, 0))[0], after[t][1] - before.get(t, (0.0, 0))[1]) for t in after),
        reverse=True,
    )
    threads = ", ".join(f"{1000 * c / n:.3f} ms / {s / n:.1f}" for c, s in busy if c > 0.01 * cpu)
    return f"| {rows:,} | {n:,} | {1000 * wall / n:.3f} | {1000 * cpu / n:.3f} | {threads} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--py-spy", dest="spy", help="write py-spy's raw stacks of the server here (first size)")
    args = ap.parse_args()
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="gt-bench-rp-") as root:
        proc, address = start_server("tcp://127.0.0.1:0", token, root)
        client = kvstore.connect([address], token, timeout=120)
        try:
            client.create("t", TABLE_ROWS, (DIM,), "float32", np.array([0, TABLE_ROWS]), {"kind": "uniform"})
            print(f"# bench/request_path.py, {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs")
            columns = ["rows per pull", "pulls", "round trip ms", "server CPU ms per pull"]
            columns.append("busiest threads: CPU ms / voluntary switches per pull")
            print("| " + " | ".join(columns) + " |")
            print("|---|---|---|---|---|")
            for k, rows in enumerate(args.rows):
                print(
                    measure(
                        client, psutil.Process(proc.pid), rows, args.seconds, args.spy if k == 0 else None
                    )
                )
        finally:
            client.shutdown()
            client.close()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
