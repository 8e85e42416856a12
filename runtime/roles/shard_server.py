"""The shard-server role (`graphtrain shard-server`): one shard server, from its description
(ShardServerParams), until a shutdown request, SIGTERM or Ctrl-C.

What the role adds around the server (kvstore/serving/server.py): the shard index of a StatefulSet pod, the
token, the checkpoint it comes back from, the partition's node data it holds, the metrics port with
the liveness and readiness probes, and the one `ready` line a launcher waits for.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import socket
import sys

from graphtrain.contract.roles import ShardServerParams
from graphtrain.runtime import cpus, heap
from graphtrain.runtime.errors import GraphtrainError

log = logging.getLogger("graphtrain.kvstore.server")


def serve(p: ShardServerParams) -> None:
    """Run a shard server: tables, their optimizer state and node data of one partition.

    Clients authenticate with the shared token when they connect (nothing of a connection without it
    is read beyond its handshake). Prints one JSON line {"event": "ready", "address": ...,
    "metrics_port": ...} when it listens, then serves until a shutdown request, SIGTERM or Ctrl-C. The
    metrics port also answers /livez (the liveness probe) and /readyz. With a cuda device, learnable
    tables and their optimizer state live on the GPU and pushes run the CUDA core (runtime/native/cuda.py);
    node data stays in host memory, shared with --shm (storage/placement.py).
    """
    # here, not at the top: the CLI imports this module, and `graphtrain --help` needs no ZMQ
    from graphtrain.runtime.kvstore.wire.auth import read_token

    for sig in (signal.SIGTERM, signal.SIGINT):  # until it serves (its data loading can take minutes)
        signal.signal(sig, _stop_before_serving)
    check_bind(p.bind)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    shard = hostname_ordinal(socket.gethostname()) if p.shard_from_hostname else p.shard
    token = read_token(p.token_file)
    if p.restore and p.checkpoint_root is None:
        raise GraphtrainError("--restore needs --checkpoint-root")
    # after the checks above: a refused argument is said without importing torch (2 s of CPU)
    from graphtrain.contract import httpd
    from graphtrain.runtime import checkpoint as ckpt
    from graphtrain.runtime.kvstore.serving.server import Limits, ShardServer
    from graphtrain.runtime.kvstore.tables.shm import job_prefix
    from graphtrain.runtime.kvstore.tables.state import ShardTensors
    from graphtrain.runtime.native.memory import keep_freed_memory

    if "OMP_NUM_THREADS" not in os.environ:  # torch's default is the node's cores, not the pod's
        import torch

        torch.set_num_threads(cpus.role_threads(None, None))
    keep_freed_memory()
    restore_from = None
    if p.restore:
        # a damaged latest falls back to the one before; a damaged or incomplete one is refused at start
        restore_from = ckpt.restore_point(p.checkpoint_root, p.restore, say=log.warning)
        if restore_from is not None:  # a restarted server: `kubectl logs` says what it came back with
            log.info("restores its tables from checkpoint %s as clients create them", restore_from.name)
    from graphtrain.runtime.checkpoint import verified

    state = ShardTensors(
        shard,
        trusted=verified.read(p.verified),
        use_shm=p.shm,
        shm_prefix=job_prefix(token),
        restore_from=restore_from,
        device=p.device,
        staging_bytes=p.checkpoint_staging_mb << 20,
        checkpoint_rate=p.checkpoint_rate_mb * 2**20,
        full_every=p.checkpoint_full_every,
    )
    if p.partition is not None:
        loaded = state.load_partition(p.partition, shard if p.part is None else p.part)
        log.info("holding %s", ", ".join(loaded) or "no node data")
    limits = Limits(
        max_request_bytes=p.max_request_bytes,
        max_queued_bytes=p.max_queued_bytes,
        stall_seconds=p.stall_seconds,
        deaf_seconds=p.deaf_seconds,
    )
    server = ShardServer(state, token, p.bind, p.workers, p.checkpoint_root, limits, fast_port=p.fast_port)
    address = server.start()
    received: list[int] = []  # the stop signal, logged after the loop (not in the handler: logging locks)

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        server.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):  # from now on a stop drains (server.stop)
        signal.signal(sig, on_signal)
    port = None
    if p.metrics_port is not None:
        probes = {"/livez": server.liveness, "/readyz": server.readiness}
        try:
            port = httpd.serve_metrics(server.metrics.registry, p.metrics_host, p.metrics_port, probes).port
        except OSError as exc:
            server.stop()
            raise GraphtrainError(
                f"metrics endpoint {p.metrics_host}:{p.metrics_port}: {exc.strerror or exc}"
            ) from None
    faulthandler.enable()  # a crash prints where it happened
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack to stderr
    heap.settle()  # no full collection walks what loading built, stalling every request in flight
    announce(address, port)
    try:
        while not server.wait(0.5):
            pass
        if received:  # said, so a stop by an admin or the kubelet is told apart from a crash or a request
            log.info("stopping: %s received", signal.Signals(received[0]).name)
    finally:
        server.stop()


def _stop_before_serving(signum: int, _frame: object) -> None:
    """SIGTERM or Ctrl-C before the server listens ends it at once, with 128 + the signal: nothing is
    served or written yet. Without it, a pod deleted while its server loaded waited out the grace
    period (PID 1 with no handler: the kernel drops the signal)."""
    os.write(2, f"[shard-server] {signal.Signals(signum).name} before it served: stopping now\n".encode())
    raise SystemExit(128 + signum)


def check_bind(bind: str) -> None:
    """A bind address ZMQ would take otherwise than meant: a tcp:// port past 65535 (ZMQ wraps it round).

    Raises:
        GraphtrainError: naming the address.
    """
    port = bind.rsplit(":", 1)[-1] if bind.startswith("tcp://") else ""
    if port.isdigit() and int(port) > 65535:
        raise GraphtrainError(f"--bind {bind}: port {port} is past 65535")


def hostname_ordinal(hostname: str) -> int:
    """The ordinal a StatefulSet gives its pods: `<name>-<ordinal>`.

    Raises:
        GraphtrainError: the name does not end in one.
    """
    head, _, tail = hostname.rpartition("-")
    if not head or not tail.isdigit():
        raise GraphtrainError(f"host name {hostname!r} does not end in -<ordinal> (not a StatefulSet pod?)")
    return int(tail)


def announce(address: str, metrics_port: int | None) -> None:
    """The one line a launcher reads to learn where the server listens (the token is never printed)."""
    sys.stdout.write(json.dumps({"event": "ready", "address": address, "metrics_port": metrics_port}) + "\n")
    sys.stdout.flush()
