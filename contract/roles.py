"""The command line of each runtime role (`partition`, `shard-server`, `train`), built once for both
executors.

Both executors run the same entry points (docs/architecture.md §2): the local launcher as processes
(`python -m graphtrain.runtime.cli <role> ...`), the operator as container args (`graphtrain <role> ...`).
They differ only in values: where the files live, ipc:// or tcp://, shared memory or not, where progress
goes. So each builder takes those values as parameters and no executor spells a CLI option itself; a
unit test parses every argv built here, for both executors, with the real CLI, so an option renamed or
made required there fails at once instead of in a pod.

Pure and a leaf like the rest of the spec package: values in, a list of strings out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PROGRAM = "graphtrain"  # the console script ([project.scripts]); the operator's container command
# Set (to anything but "" or "0"): no dataset is ever downloaded; a missing one is an error saying how to
# pre-seed it. The operator sets it on every pod when its configuration says storage.offline.
ENV_OFFLINE = "GRAPHTRAIN_OFFLINE"


@dataclass(frozen=True)
class Files:
    """Where an executor puts what the roles read and write: run-directory paths for the local launcher,
    mount paths for the operator's pods."""

    spec: str  # the GraphTraining YAML
    partition: str  # the partition: its directory (written by `partition --out`) or its <graph>.json
    token: str  # the shard servers' shared token
    checkpoints: str  # the checkpoint root (servers and trainers restore from its LATEST)


def partition(
    files: Files,
    *,
    data_dir: str | None = None,
    report_file: str | None = None,
    base_dir: str | None = None,
) -> list[str]:
    """Partition the spec's graph into `files.partition` (an earlier partition there is replaced: a
    retried job starts over). `report_file`: where the compact partition status also goes (a pod's
    termination message); `base_dir`: where the spec's relative input paths start (None: the spec's
    directory; a pod's spec is a mounted ConfigMap, so the operator names the data volume)."""
    args = ["partition", "--spec", files.spec, "--out", files.partition, "--overwrite"]
    if data_dir is not None:
        args += ["--data-dir", data_dir]
    if base_dir is not None:
        args += ["--base-dir", base_dir]
    if report_file is not None:
        args += ["--report-file", report_file]
    return args


def shard_server(
    files: Files,
    *,
    bind: str,
    shard: int | None,
    shm: bool,
    restore: str | None = "latest",
    workers: int | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    device: str = "cpu",
) -> list[str]:
    """One shard server. `shard`: its index, or None to take it from the host name's ordinal (a
    StatefulSet pod); `bind`: ipc://path on one host, tcp://host:port across pods; `shm`: hold the tables
    in shared memory for trainers on the same host (host memory: not with a cuda `device`);
    `workers`/`metrics_*`: None keeps the CLI's default; `device`: where the tables live (cpu, cuda).

    Raises:
        ValueError: shared memory asked for with tables on a GPU.
    """
    if shm and device != "cpu":
        raise ValueError(f"shared memory holds host memory: no --shm with device {device}")
    args = ["shard-server", "--bind", bind]
    args += ["--shard-from-hostname"] if shard is None else ["--shard", str(shard)]
    args += [
        "--partition",
        files.partition,
        "--token-file",
        files.token,
        "--checkpoint-root",
        files.checkpoints,
    ]
    if restore is not None:
        args += ["--restore", restore]
    if workers is not None:
        args += ["--workers", str(workers)]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    if metrics_host is not None:
        args += ["--metrics-host", metrics_host]
    if device != "cpu":
        args += ["--device", device]
    args.append("--shm" if shm else "--no-shm")
    return args


def train(
    files: Files,
    *,
    servers: Sequence[str] | None,
    rank: int = 0,
    world: int = 1,
    init: str | None = None,
    shm: bool = True,
    run_dir: str | None = None,
    progress_configmap: str | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    metrics_port_file: str | None = None,
) -> list[str]:
    """One trainer. `servers`: the shard servers' addresses in shard order, or None for standalone mode
    (one trainer holding the shards in its process: no servers, no token, no rendezvous); `init`: the
    rendezvous (tcp://host:port of rank 0) when `world` > 1; `shm`: read co-located shards from shared
    memory; progress goes to `run_dir`/progress.json and/or the `progress_configmap` (in a pod);
    `metrics_port` (0: any) and `metrics_host`: its Prometheus endpoint, None: none (host: the CLI's
    default); `metrics_port_file`: where it writes the port it bound (how a launcher learns a port 0).

    Raises:
        ValueError: standalone with more than one trainer, or several trainers without a rendezvous.
    """
    args = ["train", "--spec", files.spec, "--partition", files.partition]
    if servers is None:
        if world != 1:
            raise ValueError(f"standalone mode runs one trainer, not {world}")
        args.append("--standalone")
    else:
        if world > 1 and not init:
            raise ValueError(f"{world} trainers need a rendezvous (init)")
        args += ["--rank", str(rank), "--world", str(world)]
        if init:
            args += ["--init", init]
        args += ["--servers", ",".join(servers), "--token-file", files.token]
        args.append("--shm" if shm else "--no-shm")
    if run_dir is not None:
        args += ["--run-dir", run_dir]
    args += ["--checkpoint-root", files.checkpoints]
    if progress_configmap is not None:
        args += ["--progress-configmap", progress_configmap]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    if metrics_host is not None:
        args += ["--metrics-host", metrics_host]
    if metrics_port_file is not None:
        args += ["--metrics-port-file", metrics_port_file]
    return args
