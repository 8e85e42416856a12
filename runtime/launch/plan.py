"""Command lines of a local run's processes (pure): the roles' argv from `spec.roles`, the one builder
the operator's pods use too, with a local run's values (run-directory paths, ipc:// sockets, shared
memory, progress.json). The local launcher partitions in its own process (it reuses an unchanged
partition), so it has no `partition` process.

Every process serves Prometheus metrics on 127.0.0.1, on a port it picks itself (0): a shard server
announces it in its ready line, a trainer writes it to its port file (port_file()), so no port is
chosen ahead and lost to a race."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from graphtrain.contract import roles
from graphtrain.contract.spec.task import EDGE_TASKS, LINK_PREDICTION, NODE_CLASSIFICATION

SHARD_WORKERS = roles.SHARED_HOST_WORKERS  # request threads per shard server: trainers share the cores


@dataclass(frozen=True)
class ProcessPlan:
    name: str  # shard-0, trainer-1, ...
    argv: list[str]
    port_file: Path | None = None  # where it writes its metrics port (trainers; servers announce theirs)


def entry() -> list[str]:
    """This interpreter running the CLI: the venv's packages, whether or not its scripts are on PATH."""
    # -P: the working directory stays off sys.path (with -m it comes first): a `graphtrain/` folder
    # where the user runs (an old checkout, or one planted in a shared /tmp) must not be what runs
    return [sys.executable, "-P", "-m", "graphtrain.runtime.cli"]


def zygote_preload(task_kind: str, trainers: int) -> tuple[str, ...]:
    """What the zygote imports for the trainers beside torch, once, where each trainer would import it
    on its own: torch._dynamo when several trainers take dense optimizer steps (a GNN's node
    classification, link prediction or edge tasks), whose first step imports it (torch.optim in torch
    2.13: ~1.3 s of CPU a trainer, the larger part of a trainer's start). A single trainer pays it once
    either way; the KGE trainers (sparse steps only) and the shard servers never import it, and are not
    made to."""
    dense = task_kind in (NODE_CLASSIFICATION, LINK_PREDICTION, *EDGE_TASKS)
    return ("torch._dynamo",) if dense and trainers > 1 else ()


def files(run_dir: Path, spec_path: Path, partition: Path) -> roles.Files:
    """Where a local run keeps what its processes read: all in the run directory but the spec."""
    return roles.Files(
        spec=str(spec_path),
        partition=str(partition),
        token=str(run_dir / "token"),
        checkpoints=str(run_dir / "checkpoints"),
    )


def port_file(run_dir: Path, rank: int) -> Path:
    """Where trainer `rank` writes the metrics port it bound ({"port": N, "pid": PID})."""
    return run_dir / "prometheus" / f"trainer-{rank}.port.json"


def shard_device(device: str, index: int, gpus: int) -> str:
    """Where shard server `index` of a local run keeps its learnable tables: the CPU, or with device cuda
    GPU `index mod gpus` of the `gpus` visible ones (without any: "cuda", which the server refuses
    saying so). Every shard on cuda:0 gave one GPU N contexts while the others idled."""
    if device == "cpu" or gpus < 1:
        return device
    return f"cuda:{index % gpus}"


def missing_gpus(
    shards: str, trainers: str, gpus: int, backend: str = "gloo", replicas: int = 1
) -> str | None:
    """Why a local run cannot start its roles on their devices (None: it can): checked before anything
    is partitioned or started, rather than a process failing after the partition step. NCCL refuses two
    ranks on one GPU ("Duplicate GPU detected" at the first all-reduce, after the data is loaded): nccl
    trainers need a GPU each, where gloo trainers share one."""
    roles_on_gpu = [r for r, d in (("shardServers", shards), ("trainers", trainers)) if d == "cuda"]
    if roles_on_gpu and gpus < 1:
        names = " and ".join(f"{r}.device" for r in roles_on_gpu)
        return f"{names} cuda, but this machine shows no GPU (torch.cuda.device_count() is 0)"
    if trainers == "cuda" and backend == "nccl" and replicas > gpus:
        return (
            f"trainers.backend nccl (the default on cuda) needs a GPU per trainer: trainers.replicas is "
            f"{replicas} and this machine shows {gpus} GPU(s); set trainers.backend: gloo (the trainers "
            f"share the GPUs) or trainers.replicas: {gpus}"
        )
    return None


def shard_server(
    index: int,
    where: roles.Files,
    run_dir: Path,
    device: str = "cpu",
    bind: str | None = None,
    fast_lane: bool = True,
) -> ProcessPlan:
    """Shard server `index` on an ipc:// socket in the run directory (or `bind`: tcp on a simulated
    host, launch/hosts.py, with a fast lane on any free port unless `fast_lane` is off), its host tables
    in shared memory (with device cuda[:N] its learnable tables are on the GPU; trainers pull those over
    the socket)."""
    argv = roles.shard_server(
        where,
        bind=bind or f"ipc://{run_dir / f'shard-{index}.sock'}",
        shard=index,
        shm=True,
        workers=SHARD_WORKERS,
        metrics_port=0,
        device=device,
        fast_port=None if fast_lane else -1,
    )
    return ProcessPlan(f"shard-{index}", [*entry(), *argv])


def trainer(
    rank: int,
    world: int,
    where: roles.Files,
    run_dir: Path,
    servers: Sequence[str],
    init: str,
    shm: bool = True,
    threads: int | None = None,
) -> ProcessPlan:
    """Trainer `rank` of `world`, reading co-located shards from shared memory (`shm`: the servers'
    tables are in host memory), with `threads` torch threads (None: its cores); rank 0 writes
    progress.json and result.json into the run directory."""
    argv = roles.train(
        where,
        servers=servers,
        rank=rank,
        world=world,
        threads=threads,
        init=init,
        shm=shm,
        run_dir=str(run_dir),
        metrics_port=0,
        metrics_port_file=str(port_file(run_dir, rank)),
    )
    return ProcessPlan(f"trainer-{rank}", [*entry(), *argv], port_file(run_dir, rank))


def standalone_trainer(where: roles.Files, run_dir: Path) -> ProcessPlan:
    """The one trainer of a standalone run: the shards live in its process."""
    argv = roles.train(
        where,
        servers=None,
        run_dir=str(run_dir),
        metrics_port=0,
        metrics_port_file=str(port_file(run_dir, 0)),
    )
    return ProcessPlan("trainer-0", [*entry(), *argv], port_file(run_dir, 0))
