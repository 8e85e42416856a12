"""Each runtime role's parameters (`partition`, `shard-server`, `train`), described once, and the command
lines both executors build from them.

One description per role: a frozen dataclass whose fields are the role's parameters, each with its type,
default (none: required), help and command-line flags. Three readers, so the three never drift (they
did: each role's parameters were listed in the argv builders, in the CLI's options and in the shard
server's 13 positional parameters):

- `argv()` writes a command line from an instance (these builders call it for each executor);
- the runtime's CLI generates its role commands' options from the fields (runtime/roles/options.py);
- each role's entry point takes the instance (runtime/roles/: `partition(PartitionParams, ...)`,
  `serve(ShardServerParams)`, `train(TrainParams)`).

Both executors run the same entry points (docs/architecture.md §2): the local launcher as processes
(`python -m graphtrain.runtime.cli <role> ...`), the operator as container args (`graphtrain <role> ...`).
They differ only in values: where the files live, ipc:// or tcp://, shared memory or not, where progress
goes. So each builder takes those values as parameters and no executor spells a CLI option itself;
tests/contract/test_roles.py parses every argv built here, for both executors, with the real CLI, and
checks that the CLI's options are the fields described here, flag for flag.

Pure and a leaf like the rest of the contract: values in, a list of strings out; no runtime import.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

PROGRAM = "graphtrain"  # the console script ([project.scripts]); the operator's container command
# Set (to anything but "" or "0"): no dataset is ever downloaded; a missing one is an error saying how to
# pre-seed it. The operator sets it on every pod when its configuration says storage.offline.
ENV_OFFLINE = "GRAPHTRAIN_OFFLINE"
ENV_TOKEN = "GRAPHTRAIN_TOKEN"  # the shard servers' shared token, when no --token-file names it
OPTION = "graphtrain.option"  # the key of a role field's Option in its dataclass field metadata

# The process settings every role runs with, under both executors (the launcher's child_env, the
# operator's containers): an OpenMP thread spins 30k iterations at a barrier before it sleeps, not
# libgomp's 300k. Beside other load on its cores (a shared node, a CPU-limited pod) the long spin took a
# 15 s Nations TransE run past 150 s (2026-11-30). 10k spins, tried first, put the trainer's OpenMP
# worker to sleep in the gaps between a step's ops, and a VM wakes a sleeping vCPU slowly: 30k trains
# WordNet GraphSAGE 6-7 % faster quiet, for a Nations run beside two busy loops 51 s against 43-45 s
# (bench/RESULTS.md, "OpenMP teams beside outside load" and the forty-seventh session).
PROCESS_ENV = {"GOMP_SPINCOUNT": "30000"}


def process_env(environ: typing.Mapping[str, str]) -> dict[str, str]:
    """The variables to add to `environ` for a role's process: PROCESS_ENV's, where the user has not set
    them."""
    return {k: v for k, v in PROCESS_ENV.items() if k not in environ}


@dataclass(frozen=True)
class Option:
    """How a role parameter reads on the command line: its help, and its flags when they are not the
    field's name (`--<name>`; a bool also `--no-<name>`)."""

    help: str
    flags: tuple[str, ...] = ()
    min: float | None = None  # the least value a number takes
    max: float | None = None  # the most (a port, a thread count: never a traceback past it)


PORT = 65535  # the highest TCP port
MAX_THREADS = 4096
# the trainers' rendezvous on one host (--init portfile:PATH): rank 0's store binds a port of the kernel's
# choosing and writes it to PATH (runtime/train/dist.py); a port picked ahead by the launcher may be taken
# before rank 0 binds it
PORT_FILE = "portfile:"
# how a trainer whose peer went away mid-collective begins its error (runtime/train/dist.py): the
# operator names another failed trainer first, the one whose failure was its own (operator/stages.py)
PEER_LOST = "another trainer went away"
MAX_SECONDS = 86400.0  # a day: past it a timeout is no timeout (and inf overflows the C timers)


def opt(help: str, *flags: str, min: float | None = None, max: float | None = None) -> dict[str, Option]:
    """A role field's metadata: `field(default=..., metadata=opt("help", "--flag"))`."""
    return {OPTION: Option(help, flags, min, max)}


@dataclass(frozen=True)
class Param:
    """One described parameter, as a command line builder or a CLI generator needs it."""

    name: str
    type: Any  # the field's type, resolved (Path | None, int, bool, ...)
    default: Any  # dataclasses.MISSING: required
    option: Option

    @property
    def flags(self) -> tuple[str, ...]:
        """Its flags, the first the one a command line uses: explicit ones, else `--<name>`."""
        return self.option.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def negative(self) -> str | None:
        """The flag that sets a bool to False: `--no-<name>` unless its flags are explicit (`--json`)."""
        if self.option.flags or not is_bool(self.type):
            return None
        return "--no-" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING


def is_bool(tp: Any) -> bool:
    """`bool` or `bool | None`."""
    return tp is bool or set(typing.get_args(tp)) == {bool, type(None)}


@dataclass(frozen=True, kw_only=True)
class RoleParams:
    """Base of the role descriptions: COMMAND names the command, stated() what argv() always writes."""

    COMMAND: ClassVar[str] = ""

    def stated(self) -> frozenset[str]:
        """Parameters a command line states even at their default (a reader of a pod spec or a process
        list looks for them)."""
        return frozenset()


def params(cls: type[RoleParams]) -> list[Param]:
    """The parameters `cls` describes, in the order of its fields (its CLI options and argv follow it)."""
    hints = typing.get_type_hints(cls)
    return [
        Param(f.name, hints[f.name], f.default, f.metadata[OPTION])
        for f in dataclasses.fields(cls)
        if OPTION in f.metadata
    ]


def argv(role: RoleParams) -> list[str]:
    """The command line giving `role` to its command: the command, then, in field order, each parameter
    that is required, stated, or set to other than its default (None: not given).

    Raises:
        ValueError: a value the command line cannot express (False for a flag without a --no- form).
    """
    stated = role.stated()
    out = [role.COMMAND]
    for p in params(type(role)):
        value = getattr(role, p.name)
        if value is None or (not p.required and p.name not in stated and value == p.default):
            continue
        if not is_bool(p.type):
            out += [p.flags[0], str(value)]
        elif value:
            out.append(p.flags[0])
        elif p.negative is not None:
            out.append(p.negative)
        else:
            raise ValueError(f"{p.flags[0]} has no form that says false")
    return out


# ------------------------------------------------------------------------------------ the roles

DATA_DIR_HELP = "dataset cache (default: $GRAPHTRAIN_DATA or ~/.cache/graphtrain)"
METRICS_HOST_HELP = "address the metrics endpoint binds"


@dataclass(frozen=True, kw_only=True)
class PartitionParams(RoleParams):
    """`graphtrain partition`: a graph (a spec's, a dataset or a file) into a partition directory; the
    operator's partition Job runs it with --spec and --report-file."""

    COMMAND: ClassVar[str] = "partition"

    spec_path: Path | None = field(
        default=None, metadata=opt("take graph and partition settings from a spec", "--spec")
    )
    out_dir: Path = field(metadata=opt("output directory (created atomically)", "--out", "-o"))
    dataset: str | None = field(default=None, metadata=opt("bundled dataset name"))
    input_path: Path | None = field(
        default=None,
        metadata=opt("edge list (.csv/.tsv; a first line of names is a header) or .npz", "--input"),
    )
    fmt: str = field(default="auto", metadata=opt("auto | csv | tsv | npz", "--format"))
    num_nodes: int | None = field(default=None, metadata=opt("node count of an --input graph"))
    node_ids: str | None = field(
        default=None, metadata=opt("ids of an --input edge list: auto | integer | string", "--node-ids")
    )
    reverse_edges: bool | None = field(
        default=None, metadata=opt("add the reverse of every edge (undirected graphs)")
    )
    parts: int | None = field(
        default=None, metadata=opt("number of partitions [default: 1]", "--parts", "-k")
    )
    algorithm: str | None = field(
        default=None,
        metadata=opt("metis | random | fennel (streams a --dataset's stored edges) | auto [default: metis]"),
    )
    balance: str | None = field(
        default=None, metadata=opt("comma-separated constraints: nodes,degree,train,val,test")
    )
    max_imbalance: float | None = field(
        default=None, metadata=opt("allowed max/mean - 1 per constraint [default: 0.05]")
    )
    seed: int | None = field(default=None, metadata=opt("random seed [default: 0]"))
    memory_limit: str | None = field(
        default=None,
        metadata=opt("refuse if the estimate exceeds this, e.g. 8Gi (auto: METIS must fit it, else fennel)"),
    )
    overwrite: bool = field(
        default=False,
        metadata=opt("replace an earlier partition in --out (never a directory of other files)"),
    )
    as_json: bool = field(default=False, metadata=opt("print the partition config as JSON", "--json"))
    data_dir: Path | None = field(default=None, metadata=opt(DATA_DIR_HELP, "--data-dir"))
    base_dir: Path | None = field(
        default=None,
        metadata=opt(
            "where relative paths of the spec's graph section start (default: the spec's directory)"
        ),
    )
    report_file: Path | None = field(
        default=None,
        metadata=opt("also write the partition status (compact JSON) here, e.g. /dev/termination-log"),
    )


# Request threads of a shard server whose host (a machine, a worker pod) runs its trainers too: they
# share the cores (`graphtrain run`'s servers, a worker pod's sidecar); alone in its pod it keeps 4.
SHARED_HOST_WORKERS = 2


@dataclass(frozen=True, kw_only=True)
class ShardServerParams(RoleParams):
    """`graphtrain shard-server`: one shard server (its tables, their optimizer state and a partition's
    node data)."""

    COMMAND: ClassVar[str] = "shard-server"

    bind: str = field(
        default="tcp://127.0.0.1:0", metadata=opt("tcp://host:port or ipc://path (port 0: any free port)")
    )
    fast_port: int = field(
        default=0,
        metadata=opt(
            "also answer small pulls of host tables, and the same host's gradient pushes, natively on this "
            "TCP port of the bind host (the fast lane; 0: any free port, -1: none; beside an ipc:// bind a "
            "Unix socket next to it, on any port but -1)",
            min=-1,
            max=PORT,
        ),
    )
    shard: int = field(default=0, metadata=opt("this server's shard index"))
    shard_from_hostname: bool = field(
        default=False,
        metadata=opt("take the shard index from the host name's ordinal (StatefulSet pods)"),
    )
    partition: Path | None = field(
        default=None, metadata=opt("partition config: hold this shard's node data")
    )
    part: int | None = field(default=None, metadata=opt("partition index to hold (default: --shard)"))
    token_file: Path | None = field(
        default=None, metadata=opt(f"file holding the shared token (else ${ENV_TOKEN})")
    )
    checkpoint_root: Path | None = field(
        default=None, metadata=opt("directory checkpoints are written under")
    )
    restore: str | None = field(
        default=None, metadata=opt("checkpoint (relative to the root) or 'latest' to restore from")
    )
    verified: Path | None = field(
        default=None,
        metadata=opt(
            "record of the checkpoint files the launcher hashed before start: those unchanged since are not"
            " hashed again"
        ),
    )
    workers: int = field(default=4, metadata=opt("request worker threads", min=1, max=MAX_THREADS))
    metrics_port: int | None = field(
        default=None, metadata=opt("serve Prometheus metrics on this port (0: any)", min=0, max=PORT)
    )
    metrics_host: str = field(default="127.0.0.1", metadata=opt(METRICS_HOST_HELP))
    max_request_bytes: int = field(
        default=64 << 20, metadata=opt("refuse requests with more bytes of arrays than this", min=1 << 20)
    )
    max_queued_bytes: int = field(
        default=512 << 20,
        metadata=opt("stop reading new requests while queued ones hold this many bytes", min=1 << 20),
    )
    stall_seconds: float = field(
        default=30.0,
        metadata=opt(
            "drop a connection that reads none of its pending replies for this long", min=1.0, max=MAX_SECONDS
        ),
    )
    deaf_seconds: float = field(
        default=300.0,
        metadata=opt(
            "not live (/livez, health) when requests wait this long and no worker finishes one",
            min=1.0,
            max=MAX_SECONDS,
        ),
    )
    device: str = field(
        default="cpu",
        metadata=opt(
            "where learnable tables and their optimizer state live: cpu, or cuda[:N] (pushes run the CUDA "
            "core; node data stays in host memory)"
        ),
    )
    shm: bool = field(
        default=False, metadata=opt("hold host tables in shared memory for clients on this host")
    )
    checkpoint_staging_mb: int = field(
        default=256,
        metadata=opt("extra memory a checkpoint written in the background may hold (MiB)", min=0),
    )
    checkpoint_rate_mb: float = field(
        default=0.0, metadata=opt("bound on a background checkpoint's writes (MiB/s; 0: none)", min=0.0)
    )
    checkpoint_full_every: int = field(
        default=5,
        metadata=opt(
            "write a host table's checkpoint in full every N checkpoints; the ones between hold only the "
            "rows changed since the one before (incremental; 1: always full)",
            min=1,
        ),
    )

    def stated(self) -> frozenset[str]:
        return frozenset({"bind", "shm"} | (set() if self.shard_from_hostname else {"shard"}))


@dataclass(frozen=True, kw_only=True)
class TrainParams(RoleParams):
    """`graphtrain train`: one trainer of a GraphTraining, with shard servers or standalone."""

    COMMAND: ClassVar[str] = "train"

    spec_path: Path = field(metadata=opt("GraphTraining YAML", "--spec"))
    partition: Path = field(metadata=opt("partition config (<out>/<graph>.json)"))
    standalone: bool = field(default=False, metadata=opt("hold the shards in this process (no servers)"))
    rank: int = field(default=0, metadata=opt("this trainer's rank"))
    world: int = field(default=1, metadata=opt("number of trainers"))
    threads: int | None = field(
        default=None,
        metadata=opt(
            "torch intra-op threads (the spec's training.threads wins; unset: this process' cores)",
            min=1,
            max=MAX_THREADS,
        ),
    )
    init: str | None = field(
        default=None,
        metadata=opt(
            f"rendezvous of the trainers: tcp://host:port of rank 0, or {PORT_FILE}PATH (one host: rank 0 "
            "binds a port of the kernel's choosing and writes it to PATH)"
        ),
    )
    servers: str | None = field(
        default=None, metadata=opt("comma-separated shard-server addresses, shard order")
    )
    token_file: Path | None = field(default=None, metadata=opt(f"shared token file (else ${ENV_TOKEN})"))
    shm: bool = field(default=True, metadata=opt("read shards on this host from shared memory"))
    run_dir: Path | None = field(default=None, metadata=opt("where progress.json and result.json go"))
    checkpoint_root: Path | None = field(
        default=None, metadata=opt("checkpoint directory (resume from its LATEST)")
    )
    progress_configmap: str | None = field(
        default=None,
        metadata=opt("also report progress and a heartbeat into this ConfigMap (in a pod, for the operator)"),
    )
    metrics_port: int | None = field(
        default=None,
        metadata=opt("serve Prometheus metrics on this port (0: any free port)", min=0, max=PORT),
    )
    metrics_host: str = field(default="127.0.0.1", metadata=opt(METRICS_HOST_HELP))
    metrics_port_file: Path | None = field(
        default=None,
        metadata=opt('once the metrics port is bound, write {"port": N, "pid": PID} here (atomically)'),
    )
    infer_from: Path | None = field(
        default=None,
        metadata=opt(
            "infer every node's outputs from this checkpoint instead of training (spec.mode inference): a "
            "checkpoint directory, a LATEST/BEST marker or a checkpoints directory"
        ),
    )
    verified: Path | None = field(
        default=None,
        metadata=opt(
            "--standalone: record of the checkpoint files the launcher hashed before start: those unchanged"
            " since are not hashed again"
        ),
    )
    output: Path | None = field(
        default=None, metadata=opt("where inference writes its parquet parts (default: <run-dir>/inference)")
    )

    def stated(self) -> frozenset[str]:
        return frozenset() if self.standalone else frozenset({"rank", "world", "shm"})


ROLES: tuple[type[RoleParams], ...] = (PartitionParams, ShardServerParams, TrainParams)

# ------------------------------------------------------------------------- the executors' builders


@dataclass(frozen=True)
class Files:
    """Where an executor puts what the roles read and write: run-directory paths for the local launcher,
    mount paths for the operator's pods."""

    spec: str  # the GraphTraining YAML
    partition: str  # the partition: its directory (written by `partition --out`) or its <graph>.json
    token: str  # the shard servers' shared token
    checkpoints: str  # the checkpoint root (servers and trainers restore from its LATEST)
    infer_from: str | None = None  # mode inference: the checkpoint inferred from (under `checkpoints`)
    output: str | None = None  # mode inference: where the outputs go (None: the trainers' default)
    verified: str | None = None  # mode inference: the record of its files hashed before start


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def _given(**values: Any) -> dict[str, Any]:
    """The values a builder was given: None there keeps the CLI's default."""
    return {k: v for k, v in values.items() if v is not None}


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
    return argv(
        PartitionParams(
            spec_path=Path(files.spec),
            out_dir=Path(files.partition),
            overwrite=True,
            data_dir=_path(data_dir),
            base_dir=_path(base_dir),
            report_file=_path(report_file),
        )
    )


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
    fast_port: int | None = None,
) -> list[str]:
    """One shard server. `shard`: its index, or None to take it from the host name's ordinal (a
    StatefulSet pod); `bind`: ipc://path on one host, tcp://host:port across pods; `shm`: hold the host
    tables in shared memory for trainers on the same host (with a cuda `device` the node data: learnable
    tables live on the GPU and are pulled over the socket); `workers`/`metrics_*`: None keeps the CLI's
    default; `device`: where learnable tables live (cpu, cuda[:N]); `fast_port`: the fast lane's port
    (None: the CLI's default, any free port).
    """
    return argv(
        ShardServerParams(
            bind=bind,
            shard=0 if shard is None else shard,
            shard_from_hostname=shard is None,
            partition=Path(files.partition),
            token_file=Path(files.token),
            checkpoint_root=Path(files.checkpoints),
            restore=None if files.infer_from else restore,  # inference: the trainers name the checkpoint
            verified=_path(files.verified),
            metrics_port=metrics_port,
            device=device,
            shm=shm,
            **_given(workers=workers, metrics_host=metrics_host, fast_port=fast_port),
        )
    )


def train(
    files: Files,
    *,
    servers: Sequence[str] | None,
    rank: int = 0,
    world: int = 1,
    threads: int | None = None,
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
    rendezvous (tcp://host:port of rank 0) when `world` > 1; `threads`: its torch threads where a launcher
    shares a machine's cores out (None: the trainer's own cores); `shm`: read co-located shards from shared
    memory; progress goes to `run_dir`/progress.json and/or the `progress_configmap` (in a pod);
    `metrics_port` (0: any) and `metrics_host`: its Prometheus endpoint, None: none (host: the CLI's
    default); `metrics_port_file`: where it writes the port it bound (how a launcher learns a port 0).

    Raises:
        ValueError: standalone with more than one trainer, or several trainers without a rendezvous.
    """
    if servers is None and world != 1:
        raise ValueError(f"standalone mode runs one trainer, not {world}")
    if servers is not None and world > 1 and not init:
        raise ValueError(f"{world} trainers need a rendezvous (init)")
    alone = servers is None
    return argv(
        TrainParams(
            spec_path=Path(files.spec),
            partition=Path(files.partition),
            standalone=alone,
            rank=rank,
            world=world,
            threads=threads,
            init=None if alone else init or None,
            servers=None if alone else ",".join(servers or ()),
            token_file=None if alone else Path(files.token),
            shm=True if alone else shm,
            run_dir=_path(run_dir),
            checkpoint_root=Path(files.checkpoints),
            progress_configmap=progress_configmap,
            metrics_port=metrics_port,
            metrics_port_file=_path(metrics_port_file),
            infer_from=_path(files.infer_from),
            verified=_path(files.verified) if alone else None,
            output=_path(files.output),
            **_given(metrics_host=metrics_host),
        )
    )
