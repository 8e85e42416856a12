"""The train role (`graphtrain train`): one trainer of a GraphTraining, from its description
(TrainParams). The launcher and the operator start one per rank; with --standalone it holds the shards
in its own process instead of reaching shard servers.

The training itself is the epoch loop (train/loop.py) over the model's task (train/task.py); this
module connects the trainer to its shards, its peers (the rendezvous) and its metrics endpoint.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from graphtrain.contract import failures
from graphtrain.contract.roles import TrainParams
from graphtrain.contract.spec import load_yaml
from graphtrain.runtime import cpus, heap
from graphtrain.runtime.data.cache import read_text, write_json
from graphtrain.runtime.errors import GraphtrainError, user_message


def train(p: TrainParams) -> None:
    """Run one trainer of a GraphTraining (the launcher and the operator start one per rank).

    With --metrics-port, /metrics answers from the start (steps, samples, step and stage seconds, loss,
    eval metric, epoch); the bound port goes to --metrics-port-file, which is how the local launcher
    learns a port 0 picked. SIGTERM stops it at once, before any thread of torch, gloo or ZMQ starts
    (roles/stop.py).
    """
    from graphtrain.runtime.roles.stop import exit_on_sigterm

    exit_on_sigterm(f"trainer {p.rank}")
    try:
        _train(p)
    except BaseException as exc:  # noqa: BLE001 - reported as the command would, then left at once
        leave_failed(exc)


def _train(p: TrainParams) -> None:
    import torch

    from graphtrain.runtime import kvstore
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.kvstore.tables.shm import close_push_buffers
    from graphtrain.runtime.kvstore.wire.auth import read_token
    from graphtrain.runtime.train.device import process_group_backend, standalone_shard_device, trainer_device
    from graphtrain.runtime.train.dist import Dist, peers_named
    from graphtrain.runtime.train.loop import EpochLoop
    from graphtrain.runtime.train.metrics import TrainerMetrics
    from graphtrain.runtime.train.task import TrainingTask
    from graphtrain.runtime.train.tasks import make_task

    gt = load_yaml(read_text(p.spec_path))
    metrics = TrainerMetrics(p.rank)
    if p.metrics_port is not None:
        serve_metrics(metrics.registry, p.metrics_host, p.metrics_port, p.metrics_port_file)
    torch.set_num_threads(cpus.role_threads(gt.spec.training.threads, p.threads))
    on_gpu = gt.spec.trainers.device == "cuda"
    device = trainer_device(str(gt.spec.trainers.device), p.rank, torch.cuda.device_count() if on_gpu else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if p.standalone:
        shard_device = standalone_shard_device(device, str(gt.spec.shard_servers.device))
        from graphtrain.runtime.checkpoint import verified

        trusted = verified.read(p.verified)
        client = standalone_client(
            p.partition, p.checkpoint_root, shard_device, direct_to=device, trusted=trusted
        )
        connect = lambda: client  # noqa: E731 - in-process shards are shared by the loader thread
    else:
        if not p.servers:
            raise GraphtrainError("--servers is needed unless --standalone")
        token = read_token(p.token_file)
        addresses = [a for a in p.servers.split(",") if a]
        connect = lambda: kvstore.connect(addresses, token, shm=p.shm)  # noqa: E731
        client = connect()
        wait_for_shards(client)
    graph = DistGraph(p.partition, client)
    backend = process_group_backend(str(gt.spec.trainers.dist_backend))
    with Dist(p.rank, p.world, p.init, backend) as dist, peers_named(p.rank):
        task: TrainingTask[Any] = make_task(gt, graph, dist, device, connect)
        heap.settle()  # a full collection walked setup's objects inside a step: 176 ms of a 13 ms one
        if p.infer_from is not None:
            result = _infer(task, graph, dist, p, metrics)
        else:
            loop = EpochLoop(
                task, gt.spec, graph, dist, p.run_dir, p.checkpoint_root, p.progress_configmap, metrics
            )
            result = loop.run()
        # No trainer leaves before all are done: with partition locality a trainer's pod holds a shard
        # server the others may still read, and the pod stops its server when its trainers have ended.
        dist.barrier()
    if p.rank == 0 and p.run_dir is not None:
        write_json(p.run_dir / "result.json", result)
    sys.stdout.write(json.dumps({"event": "done", "rank": p.rank, "metrics": result}) + "\n")
    # Everything is written; leave without interpreter teardown, where the loader's prefetch thread,
    # gloo's and ZMQ's native threads are destroyed in no fixed order ("terminate called without an
    # active exception", SIGABRT after a finished run, seen once in ~20 runs).
    sys.stdout.flush()
    sys.stderr.flush()
    close_push_buffers()  # its own, which no teardown will unlink
    os._exit(0)


def leave_failed(exc: BaseException) -> NoReturn:
    """Say why the trainer failed, as the command would (`error: ` and one line for what a user can act
    on, else the traceback), and leave without the interpreter's teardown, as a finished trainer does.
    There gloo's process group is destroyed, which joins its thread waiting in a collective whose peer is
    gone or cut off: a trainer that had said `error: shard 1 ... did not answer` then sat out gloo's
    timeout (600 s) before its launcher or pod saw it fail."""
    from graphtrain.runtime.kvstore.tables.shm import close_push_buffers

    code = 1
    message = user_message(exc)
    if message is not None:
        sys.stderr.write(f"{failures.ERROR}{message}\n")
    elif isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    else:
        traceback.print_exception(exc)
        code = 128 + signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    close_push_buffers()
    os._exit(code)


SHARDS_WAIT = 900.0  # seconds a trainer waits for every shard server to answer before its first request


def wait_for_shards(client: Any, wait: float = SHARDS_WAIT) -> None:
    """Return once every shard server answers: trainers of a pod group (spec.scheduling) start with
    their servers, which may still be scheduling or loading; otherwise they are up already and this is
    one health round. Bounded: after `wait` seconds, an error naming the silent shard.

    Raises:
        GraphtrainError: a server did not answer within `wait` seconds, or refused the token."""
    import time

    from graphtrain.runtime.kvstore.client.transport import KVTimeout

    deadline, said = time.monotonic() + wait, False
    while True:
        try:
            client.health(timeout=5.0)
            return
        except KVTimeout as exc:
            if time.monotonic() > deadline:
                raise GraphtrainError(f"no answer from the shard servers in {wait:.0f} s: {exc}") from None
            if not said:
                sys.stderr.write("[trainer] waiting for the shard servers to answer\n")
                said = True


def _infer(task: Any, graph: Any, dist: Any, p: TrainParams, metrics: Any) -> dict[str, Any]:
    """Mode inference (train/inference.py): the checkpoint's outputs for every node, instead of training;
    reported as a training's end is (its test metric: status.progress in a pod, progress.json here).

    Raises:
        GraphtrainError: a task without layers to infer (kge), or no output directory."""
    from graphtrain.runtime.train.inference import infer
    from graphtrain.runtime.train.reporter import Reporter
    from graphtrain.runtime.train.sinks import progress_sinks
    from graphtrain.runtime.train.tally import TrainerProgress

    if not hasattr(task, "encoded"):
        raise GraphtrainError("task kge has no layers to infer: its tables are its embeddings (export)")
    out = p.output or (p.run_dir / "inference" if p.run_dir is not None else None)
    if out is None or p.infer_from is None:
        raise GraphtrainError("--infer-from needs --output or --run-dir (where the outputs go)")
    sinks = progress_sinks(p.run_dir, dist.rank, p.progress_configmap)
    reporter = Reporter(dist.rank, sinks, metrics=metrics)
    progress = TrainerProgress()
    reporter.report(progress)  # started: the executors' heartbeat
    result = infer(task, graph, dist, p.infer_from, out)
    metric = f"test_{task.metric_names[0]}"
    progress.eval_metric, progress.eval_value = metric, result[metric]
    progress.metrics, progress.state = result, "Succeeded"
    reporter.report(progress)
    return result


def serve_metrics(registry: Any, host: str, port: int, port_file: Path | None) -> int:
    """Serve `registry` on host:port (0: any free port) from a daemon thread; the bound port is written to
    `port_file` (with this pid, so a reader can tell it from a predecessor's file) once it listens.

    Raises:
        GraphtrainError: the port cannot be bound.
    """
    from graphtrain.contract import httpd

    try:
        bound = httpd.serve_metrics(registry, host, port).port
    except OSError as exc:
        raise GraphtrainError(f"metrics endpoint {host}:{port}: {exc.strerror or exc}") from None
    if port_file is not None:
        port_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(port_file, {"port": bound, "pid": os.getpid()})
    return bound
