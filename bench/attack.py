"""Shard server under attack: a good client's 1,000-row pulls, quiet and under each attack, side by side.

One shard-server process (tcp://, 4 workers, a 200,000 x 128 float32 table), one good client in this
process pulling 1,000 random rows at a time; the attackers run in another process, so they share no
interpreter with the client. For each scenario: the good client's p50 / p99 and its p99 against the
quiet p99 measured just before (issue 14's bar: within 2x), the largest growth of the server's RSS
while the attack lasts (the bar: below 64 MB), and whether every pull succeeded.

Scenarios:
- claims-1GiB: 100 unauthenticated TCP peers, each sending a ZMTP greeting and a frame that claims
  1 GiB, then garbage; refused, they reconnect at once (the issue's acceptance case);
- claims-frame-limit: 100 unauthenticated peers each claiming the largest frame the server reads
  (protocol.MAX_FRAME_BYTES) and sending all of it but one byte, then holding the connection: the
  most an unauthenticated peer can make the server keep;
- wrong-token: 16 ZMQ clients presenting a wrong token, reconnecting, requests queued;
- stuck-readers: 4 authenticated clients that each ask for the whole table and never read.

And against the fast lane (serving/fastlane.py), where the good client's pulls are LANE_ROWS rows (128
KB, within the lane's replies) so that they go over it:
- lane-wrong-token: 100 peers sending a hello with a wrong token, then requests, reconnecting at once;
- lane-garbage: 100 peers sending random bytes, reconnecting at once;
- lane-silent: 300 peers that connect and send nothing, more than the lane's connections (256): the
  good client's pulls go over ZMQ while the lane is full, and none fails;
- lane-stuck-readers: 4 authenticated lane clients pipelining 256 KB pulls and never reading;
- lane-bad-pushes: 8 authenticated lane clients sending 256 KB gradient pushes the lane must refuse
  (a NaN in the last row, so the whole scan runs under the table's lock; an id outside the shard) and
  framing errors (gradient bytes not whole floats: closed, and they reconnect), as fast as they can;
- lane-bad-shared-pushes: 8 authenticated lane clients on the server's host sending pushes from shared
  memory (wire version 3) as fast as they can: 8,192 rows of their own buffer of this job (4 MiB, the
  most one push from shared memory may step) with a NaN in the last row (refused after the whole scan
  under the table's lock), another job's buffer, a path, rows past the buffer's end, one row past the
  bound (all four answered "busy", nothing read);
- lane-stuck-pushers: 4 authenticated lane clients pipelining 256 KB valid pushes and never reading
  the answers (the lane steps one, then stops reading them);
- lane-bad-batches: 8 authenticated lane clients sending batches (wire version 2) as fast as they can:
  8 pulls of 256 KB (replies past the batch's room: all but one answer "busy"), a NaN push beside a
  pull, or a batch whose last request is malformed (closed before any is applied; they reconnect);
- lane-stuck-batchers: 4 authenticated lane clients pipelining batches of two 256 KB pulls and never
  reading (the second answers "busy": a batch's replies hold at most 256 KB).

Also per scenario: the server's CPU per pull, quiet and under attack (what the attack costs the server
itself), and the attackers' CPU per pull. On one small host the attackers compete with the server and
the client for the same cores; `--nice 19` lowers them, standing in for attackers on other hosts.

    python bench/attack.py [--pulls 2000] [--scenarios claims-1GiB,...] [--nice 19]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import platform
import secrets
import socket
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from multiprocessing import shared_memory

import numpy as np
import psutil
import zmq
from servers import start_server

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.tables import shm
from graphtrain.runtime.kvstore.wire import auth, fastwire, protocol

ROWS, DIM = 200_000, 128
LANE_ROWS = 256


def greeting() -> bytes:
    """ZMTP 3.0 greeting (RFC 23) asking for PLAIN, as a client would."""
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"PLAIN".ljust(20, b"\0") + b"\0" + b"\0" * 31


def claiming_peer(port: int, claimed: int, sent: int, stop: mp.Event) -> None:  # type: ignore[valid-type]
    """Connect, claim a frame of `claimed` bytes, send `sent` bytes of garbage, hold; again when closed."""
    garbage = b"\xab" * 65536
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(greeting() + b"\x06" + struct.pack(">Q", claimed))
                left = sent
                while left > 0:
                    n = min(left, len(garbage))
                    s.sendall(garbage[:n])
                    left -= n
                s.settimeout(0.5)
                while not stop.is_set():  # hold it until the server closes it or the scenario ends
                    try:
                        if s.recv(4096) == b"":
                            break
                    except TimeoutError:
                        continue
        except OSError:
            time.sleep(0.01)


def lane_peer(kind: str, port: int, token: str, stop: mp.Event, seed: int) -> None:  # type: ignore[valid-type]
    """One attacker on the fast lane: refused ones reconnect at once, the others hold their connection
    (never reading) until the server closes it or the scenario ends."""
    rng = np.random.default_rng(seed)
    ids = np.arange(fastwire.MAX_REPLY_BYTES // (DIM * 4), dtype=np.int64)
    pull = (
        fastwire.request(1, b"emb", len(ids), fastwire.row_type(np.dtype(np.float32), (DIM,))) + ids.tobytes()
    )
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                if kind in ("lane-wrong-token", "lane-garbage"):
                    s.sendall(
                        fastwire.hello(b"x" * 32) + pull
                        if kind == "lane-wrong-token"
                        else rng.bytes(int(rng.integers(1, 4096)))
                    )
                    with contextlib.suppress(OSError):
                        s.recv(4096)  # the refusal, or the close
                    continue
                if kind == "lane-bad-pushes":
                    s.sendall(fastwire.hello(token.encode()))
                    s.recv(8)
                    s.settimeout(5)
                    while not stop.is_set():
                        s.sendall(bad_push(rng))
                        if not read_reply(s):
                            break  # closed (a framing error): connect again
                    continue
                if kind == "lane-bad-shared-pushes":
                    s.sendall(fastwire.hello(token.encode()))
                    s.recv(8)
                    s.settimeout(5)
                    with bad_buffer(token, seed) as requests:
                        while not stop.is_set():
                            s.sendall(requests[int(rng.integers(len(requests)))])
                            if not read_reply(s):
                                break
                    continue
                if kind == "lane-bad-batches":
                    s.sendall(fastwire.hello(token.encode()))
                    s.recv(8)
                    s.settimeout(5)
                    while not stop.is_set():
                        s.sendall(bad_batch(rng, pull))
                        if not read_reply(s):
                            break  # closed (a malformed batch): connect again
                    continue
                if kind in ("lane-stuck-readers", "lane-stuck-pushers", "lane-stuck-batchers"):
                    stuck = (
                        pull
                        if kind == "lane-stuck-readers"
                        else batch([pull, pull])
                        if kind == "lane-stuck-batchers"
                        else push(np.zeros((len(ids), DIM), np.float32), ids)
                    )
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.sendall(fastwire.hello(token.encode()))
                    s.settimeout(0.5)
                    with contextlib.suppress(TimeoutError):
                        for _ in range(10_000):  # until the server stops reading this connection
                            s.sendall(stuck)
                stop.wait(600)
                return
        except OSError:
            time.sleep(0.01)


def read_reply(s: socket.socket) -> bool:
    """Read one whole lane reply (False: the connection closed first). recv with MSG_WAITALL on a socket
    with a timeout returns what has arrived, so each part is read until complete."""

    def exactly(n: int) -> bytes | None:
        got = bytearray()
        while len(got) < n:
            chunk = s.recv(min(n - len(got), 1 << 20))
            if not chunk:
                return None
            got += chunk
        return bytes(got)

    head = exactly(fastwire.REPLY.size)
    return head is not None and exactly(fastwire.REPLY.unpack(head)[3]) is not None


LANE_PEERS = {
    "lane-wrong-token": 100,
    "lane-garbage": 100,
    "lane-silent": 300,
    "lane-stuck-readers": 4,
    "lane-bad-pushes": 8,
    "lane-bad-shared-pushes": 8,
    "lane-stuck-pushers": 4,
    "lane-bad-batches": 8,
    "lane-stuck-batchers": 4,
}


def push(grads: np.ndarray, ids: np.ndarray, grad_bytes: int | None = None) -> bytes:
    """A gradient push of `emb` on the lane (grad_bytes: what the header claims, if not the truth)."""
    rows = fastwire.row_type(np.dtype(np.float32), (DIM,))
    head = fastwire.push_request(
        1, b"emb", len(ids), rows, grads.nbytes if grad_bytes is None else grad_bytes, 1
    )
    return head + ids.tobytes() + grads.tobytes()


def bad_push(rng: np.random.Generator) -> bytes:
    """256 KB the lane refuses: a NaN in the last row, an id outside the shard, or bytes not whole floats."""
    ids = rng.integers(0, ROWS, fastwire.MAX_REPLY_BYTES // (DIM * 4)).astype(np.int64)
    grads = np.zeros((len(ids), DIM), np.float32)
    kind = int(rng.integers(3))
    if kind == 0:
        grads[-1, -1] = np.nan
    elif kind == 1:
        ids[-1] = ROWS
    else:
        return push(grads, ids, grads.nbytes - 2)
    return push(grads, ids)


@contextlib.contextmanager
def bad_buffer(token: str, seed: int) -> Iterator[list[bytes]]:
    """Pushes from shared memory the lane refuses, and the buffer of this job they read (unlinked after):
    NaN in its last row, another job's name, a path, rows past its end, one row more than a push may step."""
    ids = np.arange(fastwire.MAX_SHARED_BYTES // (DIM * 4) + 1, dtype=np.int64)
    name = f"{shm.job_prefix(token)}-push-{os.getpid()}-attack{seed}"
    seg = shared_memory.SharedMemory(name=name, create=True, size=len(ids) * DIM * 4)
    try:
        grads = np.ndarray((len(ids), DIM), np.float32, buffer=seg.buf)
        grads[:] = 0.0
        grads[-1, -1] = np.nan
        rows = fastwire.row_type(np.dtype(np.float32), (DIM,))

        def request(buffer: str, offset: int, n: int) -> bytes:
            head = fastwire.shared_push_request(1, b"emb", n, rows, buffer.encode(), offset, 1)  # type: ignore[arg-type]
            return head + ids[:n].tobytes()

        other = f"graphtrain-000000000000-push-{os.getpid()}-attack{seed}"
        most = len(ids) - 1
        yield [
            request(name, DIM * 4, most),
            request(other, 0, 64),
            request(f"../{name}", 0, 64),
            request(name, 2 * DIM * 4, most),
            request(name, 0, most + 1),
        ]
    finally:
        seg.close()
        seg.unlink()


def batch(requests: list[bytes]) -> bytes:
    """Whole lane requests (each a multiple of 8 bytes here) as one batch."""
    return fastwire.batch_request(1, len(requests), sum(map(len, requests))) + b"".join(requests)


def bad_batch(rng: np.random.Generator, pull: bytes) -> bytes:
    """A batch the lane answers in part or closes on: 8 pulls of 256 KB (past the batch's room), a NaN
    push beside a pull, or a malformed last request."""
    kind = int(rng.integers(3))
    if kind == 0:
        return batch([pull] * 8)
    ids = rng.integers(0, ROWS, 64).astype(np.int64)
    grads = np.zeros((len(ids), DIM), np.float32)
    grads[-1, -1] = np.nan
    if kind == 1:
        return batch([pull, push(grads, ids)])
    return batch([pull, b"GTRQ" + bytes(28)])  # op 0: malformed


def attacker(kind: str, address: str, token: str, started: mp.Event, stop: mp.Event, nice: int) -> None:  # type: ignore[valid-type]
    os.nice(nice)
    port = int(address.rsplit(":", 1)[1])
    threads: list[threading.Thread] = []
    sockets: list[zmq.Socket] = []
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    if kind == "claims-1GiB":
        threads = [
            threading.Thread(target=claiming_peer, args=(port, 1 << 30, 4 << 20, stop)) for _ in range(100)
        ]
    elif kind == "claims-frame-limit":
        limit = protocol.MAX_FRAME_BYTES
        threads = [
            threading.Thread(target=claiming_peer, args=(port, limit, limit - 1, stop)) for _ in range(100)
        ]
    elif kind == "wrong-token":
        for _ in range(16):
            s = ctx.socket(zmq.DEALER)
            auth.secure_client(s, "not-the-token")
            s.connect(address)
            for _ in range(200):
                try:
                    s.send_multipart(protocol.encode_request("stats", 1), zmq.NOBLOCK)
                except zmq.Again:
                    break
            sockets.append(s)
    elif kind in LANE_PEERS:
        lane = kvstore.connect([address], token, timeout=10).health()[0]["fast_port"]
        threads = [
            threading.Thread(target=lane_peer, args=(kind, lane, token, stop, i))
            for i in range(LANE_PEERS[kind])
        ]
    elif kind == "stuck-readers":
        for _ in range(4):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.RCVHWM, 1)
            s.setsockopt(zmq.RCVBUF, 4096)
            auth.secure_client(s, token)
            s.connect(address)
            ids = protocol.split_rows(np.arange(ROWS, dtype=np.int64))
            s.send_multipart(protocol.encode_request("pull", 1, "emb", ids), copy=False)
            sockets.append(s)
    for t in threads:
        t.start()
    time.sleep(1.0)  # the attack is under way
    started.set()
    stop.wait(600)
    for t in threads:
        t.join(timeout=10)
    for s in sockets:
        s.close()
    ctx.term()


def pull_latencies(client, n: int, seed: int, rows: int = 1000) -> tuple[list[float], int]:
    """Seconds of n pulls of `rows` rows, and how many failed."""
    rng = np.random.default_rng(seed)
    bounds = np.array([0, ROWS])
    out, failed = [], 0
    for _ in range(n):
        ids = rng.integers(0, ROWS, rows)
        t = time.perf_counter()
        try:
            client.pull("emb", ids, bounds, (DIM,), np.float32)
        except Exception:  # noqa: BLE001 - a failed pull is what the scenario counts
            failed += 1
        out.append(time.perf_counter() - t)
    return out, failed


def watch_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pulls", type=int, default=2000, help="1,000-row pulls per scenario")
    ap.add_argument(
        "--scenarios",
        default="claims-1GiB,claims-frame-limit,wrong-token,stuck-readers,"
        "lane-wrong-token,lane-garbage,lane-silent,lane-stuck-readers,lane-bad-pushes,lane-bad-shared-pushes,"
        "lane-stuck-pushers,"
        "lane-bad-batches,lane-stuck-batchers",
        help="comma-separated",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness of the attackers' process: 19 stands in for attackers on other hosts, whose CPU "
        "is not the server's (on one small host they otherwise compete with the server and the client)",
    )
    args = ap.parse_args()
    token = secrets.token_hex(16)
    print(
        f"# bench/attack.py, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} CPUs, "
        f"table {ROWS:,} x {DIM}, {args.pulls} pulls of 1,000 rows per scenario ({LANE_ROWS} for lane-*), "
        f"attackers at nice {args.nice}"
    )
    ctx = mp.get_context("spawn")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gt-bench-attack-") as root:
        proc, address = start_server("tcp://127.0.0.1:0", token, root, "--workers", "4")
        pid = proc.pid
        try:
            client = kvstore.connect([address], token, timeout=10, retries=0)
            client.create("emb", ROWS, (DIM,), "float32", np.array([0, ROWS]), {"kind": "uniform", "seed": 1})
            client.set_optimizer("emb", {"kind": "sgd", "lr": 1e-6})  # the lane-*-push scenarios' target
            pull_latencies(client, 300, 0)  # warm: buffers, allocator, caches
            server = psutil.Process(pid)
            for i, kind in enumerate(args.scenarios.split(",")):
                rows_per_pull = LANE_ROWS if kind in LANE_PEERS else 1000
                c0 = cpu_seconds(server)
                quiet, _ = pull_latencies(client, args.pulls, 100 + i, rows_per_pull)
                quiet_cpu = cpu_seconds(server) - c0
                base = psutil.Process(pid).memory_info().rss
                started, stop = ctx.Event(), ctx.Event()
                att = ctx.Process(
                    target=attacker, args=(kind, address, token, started, stop, args.nice), daemon=True
                )
                att.start()
                started.wait(60)
                a0, c0 = cpu_seconds(psutil.Process(att.pid)), cpu_seconds(server)
                peak, done = [base], threading.Event()
                watcher = threading.Thread(target=watch_rss, args=(pid, done, peak))
                watcher.start()
                under, failed = pull_latencies(client, args.pulls, 200 + i, rows_per_pull)
                under_cpu = cpu_seconds(server) - c0
                attack_cpu = cpu_seconds(psutil.Process(att.pid)) - a0
                done.set()
                watcher.join()
                stop.set()
                att.join(timeout=30)
                if att.is_alive():
                    att.kill()
                health = client.health(timeout=10)[0]
                cpu = (
                    1e3 * quiet_cpu / len(quiet),
                    1e3 * under_cpu / len(under),
                    1e3 * attack_cpu / len(under),
                )
                rows.append((kind, quiet, under, failed, (peak[0] - base) / 2**20, health["live"], cpu))
            client.shutdown()
            client.close()
        finally:
            proc.wait(timeout=30)
    print(
        "\n| scenario | quiet p50 / p99 ms | under attack p50 / p99 ms | p99 vs quiet | failed pulls | "
        "server RSS growth | live after | server CPU ms per pull, quiet / under | "
        "attackers' CPU ms per pull |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, quiet, under, failed, growth, live, cpu in rows:
        q50, q99 = statistics.median(quiet), float(np.percentile(quiet, 99))
        u50, u99 = statistics.median(under), float(np.percentile(under, 99))
        print(
            f"| {kind} | {1e3 * q50:.2f} / {1e3 * q99:.2f} | {1e3 * u50:.2f} / {1e3 * u99:.2f} | "
            f"{u99 / q99:.2f}x | {failed} | {growth:.1f} MB | {live} | "
            f"{cpu[0]:.2f} / {cpu[1]:.2f} | {cpu[2]:.2f} |"
        )


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


if __name__ == "__main__":
    main()
