"""Real shard-server processes for the runtime tests: ports picked by the test, loopback only, every
wait bounded, every process stopped (shutdown request, then SIGKILL) whatever the test's outcome. Each
is a new process forked from tests/forked.py's forkserver, which imported torch and the CLI once (a
CUDA one is started as `python -m graphtrain.runtime.cli`)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphtrain.runtime.launch.processes import die_with_this_process
from tests import forked

# One per pytest process (each xdist worker): ZMQ delivers what a client queued for a server that died
# to whatever server next listens at that address, and ports are reused, so another worker's test
# request must be refused at the handshake rather than served (the kvstore client drops a given-up
# call's queue since 94da935; this keeps one worker's strays out of another's servers).
TOKEN = f"test-token-{secrets.token_hex(8)}"
READY_TIMEOUT = 60.0


@dataclass
class Server:
    shard: int
    port: int
    proc: subprocess.Popen | forked.Forked
    log: Path
    address: str = ""
    metrics_port: int | None = None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_server(shard: int, root: Path, *extra: str, port: int = 0, token: str = TOKEN) -> Server:
    """Start a shard server on 127.0.0.1: port 0 lets the kernel pick a free port, which the server
    announces (no window in which another process takes a port chosen beforehand); a given port is
    for a restart at the address its clients already know."""
    cmd = [
        "shard-server",
        "--shard",
        str(shard),
        "--bind",
        f"tcp://127.0.0.1:{port}",
        "--checkpoint-root",
        str(root),
        "--workers",
        "4",
        *extra,
    ]
    env = {"GRAPHTRAIN_TOKEN": token, "GRAPHTRAIN_QUIET": "1", "OMP_NUM_THREADS": "1"}
    # a file, not a pipe: nobody reads stderr while it runs
    log = root / f"server-{shard}-{port or os.urandom(4).hex()}.log"
    proc: subprocess.Popen | forked.Forked
    if "cuda" in extra:  # its own process: whether a fork of the forkserver may use the GPU is not
        # something this machine can check (CUDA refuses a process forked after its driver was set up)
        with open(log, "ab") as err:
            proc = subprocess.Popen(  # dies with this thread: a killed test run leaves no server behind
                [sys.executable, "-m", "graphtrain.runtime.cli", *cmd],
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                preexec_fn=die_with_this_process(),
            )
    else:  # forked from tests/forked.py's forkserver (torch imported once, not ~2 s a server); it dies
        # with the forkserver, which ends with this test process: a killed test run leaves no server behind
        proc = forked.start_cli(cmd, env, log)
    server = Server(shard, port, proc, log)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            if event.get("event") == "ready":
                server.address = event["address"]
                server.port = int(server.address.rsplit(":", 1)[1])
                server.metrics_port = event.get("metrics_port")
                return server
        if proc.poll() is not None:
            break
    server.kill()
    raise RuntimeError(f"shard server {shard} did not start: {server.log_text()[-2000:]}")


@contextlib.contextmanager
def servers(n: int, root: Path, *extra: str) -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        for s in range(n):
            started.append(start_server(s, root, *extra))
        yield started
    finally:
        if started:
            from graphtrain.runtime import kvstore

            alive = [s for s in started if s.proc.poll() is None]
            if alive:
                with contextlib.suppress(Exception):
                    c = kvstore.connect([s.address for s in alive], TOKEN, timeout=5, retries=0)
                    c.shutdown()
                    c.close()
            for s in started:
                try:
                    s.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    s.kill()


def dealer(address: str, token: str | None = TOKEN, **options: int):
    """A raw DEALER on `address`, presenting `token` (None: no credentials at all), with extra socket
    options (e.g. RCVHWM=1 for a client that stops reading)."""
    import zmq

    from graphtrain.runtime.kvstore.wire import auth

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    if token is not None:
        auth.secure_client(sock, token)
    sock.connect(address)
    return sock


def request(sock, frames: list, timeout_ms: int = 5000) -> dict | None:
    """Send frames; the reply's header, or None if nothing came back in time."""
    import msgpack

    sock.send_multipart(frames)
    if not sock.poll(timeout_ms):
        return None
    return msgpack.unpackb(sock.recv_multipart()[0], raw=False)


def rss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


@pytest.fixture
def ckroot(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoints"
    root.mkdir()
    return root


def segments_of(pids: list[int], token: str = TOKEN) -> list[str]:
    """The /dev/shm segments of this token's job made by `pids` (a server's tables: <prefix>-<shard>-<pid>-
    <name>; a client's push buffers: <prefix>-push-<pid>-<n>). Tests on other xdist workers run servers
    under the same token at the same time: their live segments are not this test's leftovers."""
    from graphtrain.runtime.kvstore.tables.shm import job_prefix

    prefix = job_prefix(token)
    marks = tuple(f"-{pid}-" for pid in pids)
    return [f for f in os.listdir("/dev/shm") if f.startswith(prefix) and any(m in f for m in marks)]
