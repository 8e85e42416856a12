"""The shard server's request path (issue 47, item 1): what one small pull costs the server.

One shard server process (2 workers, a 1,000,000 x 64 float32 table) and one client in this process
pulling random rows over TCP in a loop, one pull at a time, for --seconds per size and path: `zmq`
(the protocol's ROUTER, answered by the I/O thread or a worker) and `fast` (the fast lane, a native
thread on its own port: serving/fastlane.py); then gradient pushes of the same rows on each path
(row-wise Adagrad; `fast push`: stepped on the lane's thread under the table's native lock); then
`pair`: the same rows of two tables (a step's features and embedding rows), pulled together in one
exchange (KVClient.pull_many: one batch on the lane) against `pair apart`, one pull after the other
(issue 47, item 2). Beside
them, in the same run, `bare echo`: a pyzmq REQ/REP echo process answering the same request bytes with
the same reply bytes (no table, no protocol), the floor the issue holds the round trip to (<= 2x).
Reported per pull:
the round trip, the server's CPU (user + system, all its threads), and each server thread's share and
voluntary context switches (from /proc: who does the work, and how often threads hand it on). With
--py-spy PATH, `py-spy record --format raw` of the server for the first size goes to PATH (stacks by
thread, on-CPU samples only), to say where the CPU goes (py-spy is not a dependency: `pip install
py-spy`).

    python bench/request_path.py [--rows 64 1024] [--seconds 8] [--dtype bfloat16] [--py-spy /tmp/spy.txt]
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

from graphtrain.runtime import dtypes, kvstore  # noqa: E402

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


def _echo(address: str, reply_bytes: int) -> None:
    """A bare pyzmq REP: each request answered with `reply_bytes` bytes (one reused buffer)."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.connect(address)
    reply = bytes(reply_bytes)
    while True:
        if sock.recv(copy=False).bytes == b"stop":
            sock.send(b"")
            return
        sock.send(reply, copy=False)


def measure_echo(rows: int, seconds: float, itemsize: int = 4) -> str:
    """The bare pyzmq echo of a pull's bytes (ids out, rows back): round trip and the echo's CPU."""
    import multiprocessing as mp

    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    proc = mp.get_context("spawn").Process(
        target=_echo, args=(f"tcp://127.0.0.1:{port}", rows * DIM * itemsize)
    )
    proc.start()
    request = bytes(8 * rows + 64)  # the ids and about a header
    try:
        for _ in range(200):
            sock.send(request)
            sock.recv()
        echo = psutil.Process(proc.pid)
        cpu0, n, start = sum(echo.cpu_times()[:2]), 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            sock.send(request)
            sock.recv(copy=False)
            n += 1
        wall, cpu = time.perf_counter() - start, sum(echo.cpu_times()[:2]) - cpu0
        sock.send(b"stop")
        sock.recv()
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
        sock.close(linger=0)
        ctx.term()
    return f"| {rows:,} | {n:,} | {1000 * wall / n:.3f} | {1000 * cpu / n:.3f} | (one process) |"


def measure(
    client,
    server: psutil.Process,
    rows: int,
    seconds: float,
    spy: str | None,
    op: str = "pull",
    dtype: str = "float32",
) -> str:
    """`op` "pull", or "push": a gradient push of the same rows (deduplicated ids, row-wise Adagrad on
    the server), the other half of a step's embedding traffic. `dtype`: the tables' (a half table's rows
    are pulled, and its gradients pushed, in its type)."""
    rng = np.random.default_rng(rows)
    ids = np.stack([rng.choice(TABLE_ROWS, rows, replace=False) for _ in range(2000)])
    grads = rng.standard_normal((rows, DIM)).astype(np.float32)
    bounds = np.array([0, TABLE_ROWS])
    wire, half = dtypes.NUMPY[dtype], dtype if dtype in dtypes.HALF else None

    def one(i: int) -> None:
        if op == "pull":
            client.pull("t", ids[i % 2000], bounds, (DIM,), wire)
        elif op == "pair":
            client.pull_many([(name, ids[i % 2000], bounds, (DIM,), wire) for name in ("t", "u")])
        elif op == "pair apart":
            for name in ("t", "u"):
                client.pull(name, ids[i % 2000], bounds, (DIM,), wire)
        else:
            client.push_grad("t", ids[i % 2000], grads, bounds, mean=False, half=half)

    for i in range(200):  # warm-up
        one(i)
    recorder = None
    if spy:
        cmd = [shutil.which("py-spy") or "py-spy", "record", "--pid", str(server.pid), "--format", "raw"]
        cmd += ["--threads", "--nonblocking", "--rate", "500", "--duration", str(int(seconds)), "-o", spy]
        recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    before, cpu0 = thread_times(server.pid), sum(server.cpu_times()[:2])
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        one(n)
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
    ap.add_argument(
        "--lanes", nargs="+", choices=["zmq", "fast"], default=["zmq", "fast"], help="the paths to measure"
    )
    ap.add_argument(
        "--push", action=argparse.BooleanOptionalAction, default=True, help="also gradient pushes, per path"
    )
    ap.add_argument(
        "--pairs", action=argparse.BooleanOptionalAction, default=True, help="also two tables' rows, per path"
    )
    ap.add_argument(
        "--dtype", choices=["float32", "float16", "bfloat16"], default="float32", help="the tables' rows"
    )
    ap.add_argument("--py-spy", dest="spy", help="write py-spy's raw stacks of the server here (first size)")
    args = ap.parse_args()
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="gt-bench-rp-") as root:
        proc, address = start_server("tcp://127.0.0.1:0", token, root)
        client = kvstore.connect([address], token, timeout=120, fast=False)
        lanes = {
            lane: kvstore.connect([address], token, timeout=120, fast=lane == "fast") for lane in args.lanes
        }
        try:
            client.create("t", TABLE_ROWS, (DIM,), args.dtype, np.array([0, TABLE_ROWS]), {"kind": "uniform"})
            client.set_optimizer("t", {"kind": "rowwise_adagrad", "lr": 0.01})
            client.create("u", TABLE_ROWS, (DIM,), args.dtype, np.array([0, TABLE_ROWS]), {"kind": "uniform"})
            when = time.strftime("%Y-%m-%d %H:%M")
            print(f"# bench/request_path.py, {when} UTC, {os.cpu_count()} CPUs, {args.dtype} tables")
            columns = ["path", "rows per pull", "pulls", "round trip ms", "server CPU ms per pull"]
            columns.append("busiest threads: CPU ms / voluntary switches per pull")
            print("| " + " | ".join(columns) + " |")
            print("|---|---|---|---|---|---|")
            for k, rows in enumerate(args.rows):
                print("| bare echo " + measure_echo(rows, args.seconds, dtypes.NUMPY[args.dtype].itemsize))
                for lane, c in lanes.items():
                    spy = args.spy if k == 0 and lane == args.lanes[0] else None
                    print(
                        f"| {lane} "
                        + measure(c, psutil.Process(proc.pid), rows, args.seconds, spy, "pull", args.dtype)
                    )
                for lane, c in lanes.items() if args.push else ():
                    print(
                        f"| {lane} push "
                        + measure(c, psutil.Process(proc.pid), rows, args.seconds, None, "push", args.dtype)
                    )
                for lane, c in lanes.items() if args.pairs else ():
                    for op in ("pair", "pair apart"):
                        print(
                            f"| {lane} {op} "
                            + measure(c, psutil.Process(proc.pid), rows, args.seconds, None, op, args.dtype)
                        )
        finally:
            for c in lanes.values():
                c.close()
            client.shutdown()
            client.close()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
