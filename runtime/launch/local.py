"""`graphtrain run`: a whole GraphTraining on one machine, as processes.

partition (in this process) -> shard-server processes (ipc:// sockets, shared memory) -> trainer
processes (gloo rendezvous on a loopback port) -> monitor. The run directory holds the partition, the
token, each process' log, checkpoints, progress.json (from trainer 0) and status.json in the
GraphTraining status schema. A process that fails stops the run with its name, exit code and the end
of its log; with runPolicy.backoffLimit > 0 the trainers (and any dead shard server) are started again
from the last complete checkpoint instead, up to that many times. Ctrl-C, a deadline or a stall (no
progress for runPolicy.stallTimeoutSeconds) stop every process. Standalone mode runs one trainer whose
shards live in its own process: no servers, no sockets.

One launcher owns a run directory at a time (a lock held for its lifetime), and its children die with
it even when it is SIGKILLed (the kernel's parent-death signal), so a launch never meets the processes
of an earlier one. Each launch writes a fresh token, so its shared-memory names are its own.

It never deletes checkpoints unasked: without --resume or --overwrite, a directory that holds some is
refused.

Each launch starts fresh logs (the previous launches' are kept as <name>.log.1, .2, .3); a failure
shows the end of the failed process' own output and names the signal that killed it, if one did.

Everything the launch creates is private to the user: the launcher's umask is 0o077, and the servers
and trainers inherit it.

What it prints: each line starts with the time (HH:MM:SS); one line per finished epoch, taken from trainer
0's progress history (progress-history.json), so none is missed or repeated however fast epochs go, each
with that epoch's mean loss and its own validation metric (none when it was not evaluated); a line on
the current epoch only when one runs longer than IN_EPOCH_EVERY. A failed process is one line: the
`error: ...` line it printed (a known error), or the last line of its traceback, and where its log is.

Metrics: every process serves Prometheus metrics on 127.0.0.1 on a port it picks (a shard server names
it in its ready line, a trainer writes it to its port file, plan.port_file), the launcher too (the
executor-level training metrics, launch/metrics.py). The launcher keeps <run_dir>/prometheus/targets.json
(Prometheus file_sd, launch/targets.py) up to date: rewritten as ports become known, and when a
restarted process comes back on a new one. Callers add targets of their own with add_target() (the API
of `graphtrain run --api`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphtrain.contract import reporting, rundir
from graphtrain.contract.conditions import Reason
from graphtrain.contract.spec import (
    PLACEMENT_FIELDS,
    Condition,
    Device,
    GraphSource,
    GraphTraining,
    GraphTrainingSpec,
    GraphTrainingStatus,
    Phase,
    Progress,
    ShardState,
    quantity_to_bytes,
)
from graphtrain.runtime.data.cache import atomic_file, write_json
from graphtrain.runtime.data.checks import check_data
from graphtrain.runtime.errors import DataWarning, GraphtrainError
from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.launch import plan, status, targets
from graphtrain.runtime.progress import console
from graphtrain.runtime.train import history
from graphtrain.runtime.train.resumable import check_resumable

READY_TIMEOUT = 300.0
POLL_SECONDS = 0.5
PRIVATE = 0o077  # umask of the launcher and its children: directories 0700, files 0600
KEEP_LOGS = 3  # earlier launches' logs kept beside the current one: <name>.log.1 .. .3
LOCK = "launch.lock"
TERMINAL = (Phase.succeeded.value, Phase.failed.value)
IN_EPOCH_EVERY = 30.0  # seconds between lines on an epoch still running (none for shorter epochs)


def partition_key(spec: GraphTrainingSpec, source: GraphSource, inputs: Mapping[str, str]) -> str:
    """What a run's partition depends on: a partition made for the same key is reused. `source`: the
    spec's graph section with its paths resolved; `inputs`: the content hashes of its files
    (data.inputs.fingerprint), so a rewritten input is partitioned again even under the same name. Where
    the partition Job's pod runs (resources, nodeSelector, ...: Kubernetes only) is not part of it."""
    return json.dumps(
        {
            "graph": source.model_dump(mode="json"),
            "inputs": dict(inputs),
            "partition": spec.partition.model_dump(mode="json", exclude=set(PLACEMENT_FIELDS)),
            "projection": spec.model.feature_projection,
        },
        sort_keys=True,
    )


def partition_changes(before: str, after: str) -> list[str]:
    """What differs between two partition keys, in spec terms: the input files whose contents changed
    (graph.path (contents)), then the graph, partition and projection settings."""
    old, new = json.loads(before), json.loads(after)
    files = sorted(set(old.get("inputs", {})) | set(new.get("inputs", {})))
    out = [f"{f} (contents)" for f in files if old.get("inputs", {}).get(f) != new.get("inputs", {}).get(f)]
    names = {
        "graph": "graph settings",
        "partition": "partition settings",
        "projection": "model.featureProjection",
    }
    out += [name for part, name in names.items() if old.get(part) != new.get(part)]
    return out or ["the partition settings"]


class RunFailed(GraphtrainError):
    """A process of the run failed (named in the message), or the run hit its deadline or stalled;
    `reason`: the Failed condition's reason it gives the status."""

    def __init__(self, message: str, reason: Reason = Reason.process_failed):
        super().__init__(message)
        self.reason = reason


class RunDirLocked(GraphtrainError):
    """Another launcher owns the run directory (its pid in the message)."""


class CheckpointsExist(GraphtrainError):
    """A new run (neither --resume nor --overwrite) in a directory that holds checkpoints."""


def failure_line(text: str) -> str | None:
    """Why a process failed, in one line of its output: its last `error: ...` line (a known error, as the
    CLI prints it), else the exception line that ends its last traceback; None if it printed neither (a
    process killed by a signal)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    if not any(line.startswith("Traceback (most recent call last)") for line in lines):
        return None
    for line in reversed(lines):
        if EXCEPTION_LINE.match(line):
            return line
    return None


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: .*)?$")


def ended(code: int) -> str:
    """How a process ended, from its return code: 'exited with code 1', 'was killed by SIGKILL'."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


@dataclass
class Child:
    plan: plan.ProcessPlan
    proc: subprocess.Popen
    log: Path
    restarts: int = 0
    offset: int = 0  # where this process' output starts in its log (a restart appends to it)
    metrics_port: int | None = None  # once known: a server's ready line, a trainer's port file

    def learn_port(self) -> bool:
        """Read the metrics port from this process' port file, if it wrote it (a predecessor's file,
        another pid, does not count); whether the port became known now."""
        if self.metrics_port is not None or self.plan.port_file is None:
            return False
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            said = json.loads(self.plan.port_file.read_text())
            if said.get("pid") == self.proc.pid:
                self.metrics_port = int(said["port"])
                return True
        return False

    def why(self, when: str = "") -> str:
        """How this process ended (`when`: " before it was ready") and why, in one line (or with the end
        of its log, if it said nothing that tells why)."""
        how = f"{self.plan.name} {ended(self.proc.returncode)}{when}"
        text = self.tail(lines=200)
        line = failure_line(text)
        if line is not None:
            return f"{how}: {line} (log: {self.log})"
        return f"{how}; last lines of {self.log}:\n{self.tail()}"

    def tail(self, lines: int = 25, window: int = 1 << 16) -> str:
        """The last lines this process wrote (not its predecessors' in the same log)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(self.offset, f.seek(0, os.SEEK_END) - window))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def umask(mask: int) -> Iterator[int]:
    """This process' umask is `mask` inside the block (processes started there inherit it); yields the
    one it replaced."""
    old = os.umask(mask)
    try:
        yield old
    finally:
        os.umask(old)


@contextlib.contextmanager
def lock_run_dir(run_dir: Path) -> Iterator[None]:
    """Own `run_dir` while the block runs: an exclusive flock on <run_dir>/launch.lock, which holds the
    owner's pid. The kernel releases it when the owner exits, however it exits.

    Raises:
        RunDirLocked: another process holds it (named by its pid).
    """
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            for _ in range(10):  # the holder writes its pid just after it takes the lock
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                if holder:
                    break
                time.sleep(0.05)
            raise RunDirLocked(
                f"{run_dir} is in use by another graphtrain run (pid {holder or 'unknown'})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def rotate_logs(logs: Path, keep: int = KEEP_LOGS) -> None:
    """One log per launch: each <name>.log moves to <name>.log.1, .1 to .2, ...; beyond `keep`, dropped."""
    for log in logs.glob("*.log"):
        for i in range(keep - 1, 0, -1):
            older = log.with_name(f"{log.name}.{i}")
            if older.exists():
                older.replace(log.with_name(f"{log.name}.{i + 1}"))
        log.replace(log.with_name(f"{log.name}.1"))


def die_with_this_process() -> Callable[[], None]:
    """A preexec_fn: the child gets SIGKILL when the thread that forked it exits (PR_SET_PDEATHSIG; spawn
    from a thread that outlives the children, e.g. the main thread), so no child outlives a SIGKILLed
    launcher. If the launcher died before the call took effect, the child leaves at once. The libc call
    is looked up here, in the parent: the child only calls it."""
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        prctl = None
    args = (ctypes.c_int(1), ctypes.c_ulong(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1

    def child() -> None:
        if prctl is not None:
            prctl(*args)
        if os.getppid() != parent:
            os._exit(1)

    return child


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to the launcher: stop like Ctrl-C. The children run in their own sessions (a
    terminal's Ctrl-C must reach the launcher alone, which then stops them in order), so without this
    a plain `kill` of the launcher would leave every server and trainer running."""


def stop_on_signals() -> None:
    """Turn SIGTERM and SIGHUP into Terminated in the main thread (call it from there), and let SIGINT
    interrupt even when the launcher inherited it ignored (started with `&` from a script or nohup)."""

    def handler(signum: int, _frame: object) -> None:
        raise Terminated(f"terminated ({signal.Signals(signum).name})")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


class LocalRun:
    def __init__(
        self,
        gt: GraphTraining,
        spec_path: Path,
        run_dir: Path,
        standalone: bool = False,
        data_dir: Path | None = None,
        echo: bool = True,
        resume: bool = False,
        overwrite: bool = False,
    ):
        self.gt = gt
        self.spec_path = spec_path.resolve()
        self.run_dir = run_dir.resolve()
        self.standalone = standalone
        self.data_dir = data_dir
        self.echo = echo
        self.resume = resume
        self.overwrite = overwrite
        self.token = ""
        self.user_umask = 0o022  # the caller's (set by run()), for the shared dataset cache
        self.obs = status.RunObserved(start_time=status.now())
        self._conditions: list[Condition] = []
        self.servers: list[Child] = []
        self.trainers: list[Child] = []
        self.addresses: list[str] = []
        self._seen: set[tuple[int, int, str | None]] = set()  # history entries printed (or from before)
        self._history_stat: tuple[int, int] | None = None
        self._last_print = time.monotonic()
        self._last_step = -1
        self.namespace = gt.metadata.namespace or "default"
        self.last_status: GraphTrainingStatus | None = None  # what the launcher's metrics read
        self.metrics_port: int | None = None  # the launcher's own, while it runs
        self._metrics_server: Any = None
        self._extra_targets: list[tuple[str, int, dict[str, str]]] = []
        self._targets_lock = threading.Lock()
        self._targets_written = False
        self.finished: dict[str, Any] | None = None  # --resume of a run already complete: its result

    # --------------------------------------------------------------------------------- metrics

    def add_target(self, job: str, port: int, labels: Mapping[str, str] | None = None) -> None:
        """Scrape 127.0.0.1:`port` too, as `job` (namespace and training labels added): for processes the
        caller runs beside the launch (the API of `graphtrain run --api`). Safe from any thread, before
        or during run(); the targets file is rewritten at once if the run has written it already."""
        with self._targets_lock:
            self._extra_targets.append((job, port, dict(labels or {})))
        if self._targets_written:
            self.write_targets()

    def write_targets(self) -> Path:
        """Replace <run_dir>/prometheus/targets.json with every port known now."""
        with self._targets_lock:
            doc = targets.document(
                self.namespace,
                self.gt.metadata.name,
                [c.metrics_port for c in self.servers],
                [c.metrics_port for c in self.trainers],
                self.metrics_port,
                self._extra_targets,
            )
            self._targets_written = True
            return targets.write(self.run_dir, doc)

    def _serve_metrics(self) -> None:
        from graphtrain.contract import httpd
        from graphtrain.runtime.launch.metrics import registry

        reg = registry(self.namespace, self.gt.metadata.name, lambda: self.last_status)
        self._metrics_server = httpd.serve_metrics(reg, targets.HOST, 0)
        self.metrics_port = self._metrics_server.port

    def _stop_metrics(self) -> None:
        """The launch is over: no process of it serves metrics, so its targets file lists none (a port
        it named may be another process' by the next scrape)."""
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        with self._targets_lock:
            if self._targets_written:
                targets.write(self.run_dir, [])

    # ---------------------------------------------------------------------------------- status

    def write_status(self) -> None:
        if self.run_dir.exists():
            st = status.build(self.gt, self.obs, self._conditions, status.now())
            self._conditions = st.conditions
            self.last_status = st
            write_json(
                self.run_dir / "status.json", st.model_dump(by_alias=True, exclude_none=True, mode="json")
            )

    def say(self, text: str) -> None:
        """One line of the launcher's, after the time of day."""
        if self.echo:
            console.print(
                f"{time.strftime('%H:%M:%S')} {text}", highlight=False, markup=False, soft_wrap=True
            )

    # ------------------------------------------------------------------------------- partition

    def partition(self) -> Path:
        """Partition the spec's graph into <run_dir>/partition, or reuse the partition there when the
        graph and partition settings and the input files' contents are unchanged. Relative input paths are
        the spec's directory's. What the data says that the run should know (isolated nodes dropped, a
        directed graph without reverseEdges) is said; what the spec needs that the data lacks stops the
        run here, naming the field, before any server starts."""
        from graphtrain.runtime import partition as partitioning
        from graphtrain.runtime.data import datasets, inputs

        spec = self.gt.spec
        source = inputs.resolve(spec.graph, self.spec_path.parent)
        cached = None
        if source.dataset is not None:
            with umask(self.user_umask):  # the dataset cache is shared, not the run's
                cached = datasets.fetch(str(source.dataset), self.data_dir)
        key = partition_key(spec, source, inputs.fingerprint(source, cached))
        out = self.run_dir / "partition"
        settings = self.run_dir / "partition.settings"  # beside, not inside: a partition has one .json
        before = settings.read_text() if settings.exists() else None
        if before == key:
            with contextlib.suppress(Exception):
                cfg = partitioning.load_config(out)
                self.obs.partition = cfg.data
                self.say(f"[run] reusing the partition in {out} (same settings, same input files)")
                return cfg.path
        if (
            before is not None
            and before != key
            and self.resume
            and (self.run_dir / "checkpoints" / ckpt.LATEST).exists()
        ):
            raise GraphtrainError(
                f"cannot resume: {', '.join(partition_changes(before, key))} changed since the checkpoints "
                "were written, and a new partition gives the nodes other rows of the tables; start over "
                "with --overwrite, or put back what changed"
            )
        self.say(f"[run] partitioning {source.described} into {spec.partition.parts}")
        settings.unlink(missing_ok=True)  # a partition replaced halfway is never taken for the old one
        with umask(self.user_umask), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", DataWarning)
            graph = datasets.load_source(source, self.data_dir)
            check_data(self.gt, graph)
        for w in said:
            if issubclass(w.category, DataWarning):
                self.say(f"[run] warning: {w.message}")
        if spec.model.feature_projection:
            from graphtrain.runtime.data.transform import project_graph_features

            project_graph_features(graph, spec.model.feature_projection, seed=0)
        limit = quantity_to_bytes(spec.partition.memory_limit) if spec.partition.memory_limit else None
        result = partitioning.partition_graph(
            graph,
            spec.partition.parts,
            str(spec.partition.algorithm),
            [str(b) for b in spec.partition.balance],
            spec.partition.max_imbalance,
            spec.partition.seed,
            limit,
        )
        config = partitioning.write(graph, result, out, overwrite=True)
        settings.write_text(key)
        self.obs.partition = partitioning.load_config(config).data
        return config

    # ------------------------------------------------------------------------------- processes

    def _spawn(self, p: plan.ProcessPlan, announces: bool = False) -> Child:
        """Start a process, its output into <run_dir>/logs/<name>.log. Only servers keep stdout as a pipe,
        for the one ready line they print; anyone else's stdout in an unread pipe would block it once the
        pipe's 64 KB filled. The child is in its own session (a terminal's Ctrl-C reaches the launcher
        alone, which stops the children in order) and dies with the launcher."""
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{p.name}.log"
        offset = log.stat().st_size if log.exists() else 0
        env = {
            **os.environ,
            "GRAPHTRAIN_QUIET": "1",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
        env.pop("GRAPHTRAIN_TOKEN", None)  # processes read the token file
        if p.port_file is not None:  # a predecessor's port is no longer this process'
            p.port_file.unlink(missing_ok=True)
        handle = open(log, "ab")  # noqa: SIM115 - owned by the child
        stdout = subprocess.PIPE if announces else handle
        proc = subprocess.Popen(
            p.argv,
            stdout=stdout,
            stderr=handle,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_this_process(),  # the child runs only a prctl call and getppid
        )
        handle.close()
        return Child(p, proc, log, offset=offset)

    @property
    def device(self) -> str:
        """Where the shard servers keep their tables (spec shardServers.device): cpu or cuda."""
        return Device(self.gt.spec.shard_servers.device).value

    def start_servers(self, partition: Path) -> None:
        n = self.gt.spec.num_shards
        where = plan.files(self.run_dir, self.spec_path, partition)
        self.servers = [
            self._spawn(plan.shard_server(i, where, self.run_dir, self.device), announces=True)
            for i in range(n)
        ]
        self.addresses = [self._wait_ready(c) for c in self.servers]
        self.write_targets()
        self.obs.shards = [
            {"index": i, "state": ShardState.ready.value, "address": a, "restarts": 0}
            for i, a in enumerate(self.addresses)
        ]

    def _wait_ready(self, c: Child) -> str:
        deadline = time.monotonic() + READY_TIMEOUT
        assert c.proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([c.proc.stdout], [], [], 0.5)
            if ready:
                line = c.proc.stdout.readline()
                if line:
                    with contextlib.suppress(json.JSONDecodeError):
                        event = json.loads(line)
                        if event.get("event") == "ready":
                            port = event.get("metrics_port")
                            c.metrics_port = int(port) if port else None
                            return str(event["address"])
            if c.proc.poll() is not None:
                raise RunFailed(c.why(" before it was ready"))
        raise RunFailed(f"{c.plan.name} was not ready within {READY_TIMEOUT:g} s")

    def start_trainers(self, partition: Path) -> None:
        where = plan.files(self.run_dir, self.spec_path, partition)
        if self.standalone:
            self.trainers = [self._spawn(plan.standalone_trainer(where, self.run_dir))]
            return
        world = self.gt.spec.trainers.replicas
        init = f"tcp://127.0.0.1:{free_port()}"
        self.trainers = [
            self._spawn(
                plan.trainer(r, world, where, self.run_dir, self.addresses, init, shm=self.device == "cpu")
            )
            for r in range(world)
        ]

    def _restart_dead_servers(self) -> None:
        for i, c in enumerate(self.servers):
            if c.proc.poll() is not None:
                fresh = self._spawn(c.plan, announces=True)
                fresh.restarts = c.restarts + 1
                self.servers[i] = fresh
                self.addresses[i] = self._wait_ready(fresh)
                self.obs.shards[i].update(state=ShardState.ready.value, restarts=fresh.restarts)
                self.write_targets()  # on its new port

    def stop_all(self, grace: float = 10.0) -> None:
        alive = [c for c in [*self.trainers, *self.servers] if c.proc.poll() is None]
        for c in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for c in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait(timeout=10)

    def _shutdown_servers(self) -> None:
        if not self.servers:
            return
        from graphtrain.runtime import kvstore

        with contextlib.suppress(Exception):
            client = kvstore.connect(self.addresses, self.token, timeout=10, retries=0)
            client.shutdown()
            client.close()
        for c in self.servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=15)

    # ---------------------------------------------------------------------------------- monitor

    def _progress(self) -> None:
        """Take trainer 0's latest report (a missing or unreadable one keeps the last), print a line for
        each epoch its history gained, and one on the running epoch when no line came for IN_EPOCH_EVERY."""
        report = reporting.decode(read_if_present(self.run_dir / rundir.PROGRESS_FILE))
        if report is not None:
            self.obs.progress = report
        for entry in self._new_epochs():
            self.say(f"[run] {reporting.epoch_line(entry)}")
            self._last_print, self._last_step = time.monotonic(), entry.step
        if report is None or report.step <= self._last_step or report.epoch >= report.epochs:
            return
        if time.monotonic() - self._last_print >= IN_EPOCH_EVERY and not (
            report.eval_metric or ""
        ).startswith("test_"):
            self.say(f"[run] {reporting.in_epoch_line(report)}")
            self._last_print, self._last_step = time.monotonic(), report.step

    def _new_epochs(self) -> list[Progress]:
        """The history's entries not printed yet (the file is read again only when it changed)."""
        path = self.run_dir / rundir.HISTORY_FILE
        try:
            st = path.stat()
        except OSError:
            return []
        if (st.st_mtime_ns, st.st_size) == self._history_stat:
            return []
        self._history_stat = (st.st_mtime_ns, st.st_size)
        fresh = reporting.unseen(reporting.decode_history(read_if_present(path)), self._seen)
        self._seen.update(reporting.entry_key(p) for p in fresh)
        return fresh

    def _failed(self) -> Child | None:
        for c in [*self.servers, *self.trainers]:
            code = c.proc.poll()
            if code is not None and code != 0:
                return c
        for c in self.servers:
            if c.proc.poll() == 0 and any(t.proc.poll() is None for t in self.trainers):
                return c  # a server left while trainers still need it
        return None

    def monitor(self, partition: Path) -> None:
        policy = self.gt.spec.run_policy
        deadline = (
            time.monotonic() + policy.active_deadline_seconds if policy.active_deadline_seconds else None
        )
        last_change, last_seen = time.monotonic(), None
        while True:
            if any([c.learn_port() for c in self.trainers]):  # every one read, not the first only
                self.write_targets()
            self._progress()
            stamp = self.obs.progress.updated_at if self.obs.progress else None
            if stamp != last_seen:
                last_seen, last_change = stamp, time.monotonic()
            self.write_status()
            bad = self._failed()
            if bad is not None:
                if self.obs.restarts < policy.backoff_limit:
                    self.obs.restarts += 1
                    self.obs.phase = Phase.restarting.value
                    self.say(
                        f"[run] {bad.plan.name} {ended(bad.proc.returncode)}; restart "
                        f"{self.obs.restarts}/{policy.backoff_limit} from the last checkpoint"
                    )
                    self.write_status()
                    for t in self.trainers:
                        if t.proc.poll() is None:
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(t.proc.pid, signal.SIGKILL)
                            t.proc.wait(timeout=10)
                    self._restart_dead_servers()
                    self.start_trainers(partition)
                    self.obs.phase = Phase.training.value
                    last_change = time.monotonic()
                    continue
                raise RunFailed(bad.why())
            if all(t.proc.poll() == 0 for t in self.trainers):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise RunFailed(
                    f"the run exceeded runPolicy.activeDeadlineSeconds ({policy.active_deadline_seconds} s)",
                    Reason.deadline_exceeded,
                )
            if time.monotonic() - last_change > policy.stall_timeout_seconds:
                raise RunFailed(
                    f"no progress for {policy.stall_timeout_seconds} s (runPolicy.stallTimeoutSeconds); "
                    "trainer-0 stopped reporting"
                )
            time.sleep(POLL_SECONDS)

    # --------------------------------------------------------------------------------------- run

    def run(self) -> dict:
        """The whole run; its result (result.json of trainer 0). Call it from a thread that lives until it
        returns (the main thread in the CLI): children die when the thread that started them exits.

        Raises:
            RunDirLocked: another launcher owns the run directory.
            CheckpointsExist: the directory holds checkpoints and neither resume nor overwrite was asked.
            RunFailed: a process failed, the run hit its deadline or stalled (status.json says so too).
        """
        if self.resume and self.overwrite:
            raise GraphtrainError("--resume continues the checkpoints, --overwrite deletes them: pick one")
        with umask(PRIVATE) as self.user_umask:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.run_dir.chmod(0o700)  # a directory from before keeps nothing readable to others
            with lock_run_dir(self.run_dir):
                self._prepare()
                return self.finished if self.finished is not None else self._launch()

    def _prepare(self) -> None:
        """What the launcher does before the run: refuse to delete checkpoints unasked (changing nothing),
        say how the previous launch ended if it could not say so itself, and start afresh the token, the
        logs and the run's files."""
        checkpoints = self.run_dir / "checkpoints"
        held = checkpoints.is_dir() and any(checkpoints.iterdir())
        if held and not (self.resume or self.overwrite):
            raise CheckpointsExist(
                f"{self.run_dir} holds checkpoints ({describe_checkpoints(checkpoints)}): continue them with "
                "--resume, or delete them with --overwrite"
            )
        with contextlib.suppress(OSError, ValueError, AttributeError):
            phase = json.loads((self.run_dir / "status.json").read_text()).get("phase")
            if phase not in TERMINAL:  # and its launcher is gone: we hold the lock
                self.say(f"[run] the previous launch ended without a final status (killed?); it was {phase}")
        if self.resume:
            self._choose_checkpoint(checkpoints)
            if self.finished is not None:  # nothing to start: the previous launch's files stay as they are
                return
        elif held:
            self.say(f"[run] --overwrite: deleting {checkpoints} ({describe_checkpoints(checkpoints)})")
            shutil.rmtree(checkpoints)
        checkpoints.mkdir(exist_ok=True)
        token = self.run_dir / "token"
        with contextlib.suppress(OSError):  # what the previous launch's killed processes left in /dev/shm
            self._remove_segments(token.read_text().strip())
        self.token = secrets.token_hex(24)  # fresh shared-memory names for this launch's processes
        with atomic_file(token, mode=0o600) as f:
            f.write(self.token.encode())
        if (self.run_dir / "logs").is_dir():
            rotate_logs(self.run_dir / "logs")
        for stale in (rundir.PROGRESS_FILE, "result.json"):
            (self.run_dir / stale).unlink(missing_ok=True)
        if not self.resume:  # a resumed run continues its history; a new one starts its own
            (self.run_dir / rundir.HISTORY_FILE).unlink(missing_ok=True)
            (self.run_dir / history.METRICS_FILE).unlink(missing_ok=True)
            shutil.rmtree(self.run_dir / history.TENSORBOARD_DIR, ignore_errors=True)
        # the epochs of earlier launches were printed by them
        before = reporting.decode_history(read_if_present(self.run_dir / rundir.HISTORY_FILE))
        self._seen = {reporting.entry_key(p) for p in before}
        shutil.rmtree(self.run_dir / "trainers", ignore_errors=True)  # the previous launch's heartbeats
        # what readers of the directory (the REST API's local source) take the training's identity from
        write_json(
            self.run_dir / rundir.SPEC_FILE, self.gt.model_dump(by_alias=True, exclude_none=True, mode="json")
        )

    def _choose_checkpoint(self, root: Path) -> None:
        """On --resume, say which checkpoint the servers and trainers will take: the newest whose files
        all check out (a damaged latest is skipped, each with its reason)."""
        if not (root / ckpt.LATEST).exists():
            self.say(f"[run] no checkpoint in {root}: starting from the beginning")
            return
        try:
            path, skipped = ckpt.latest_verified(root)
        except GraphtrainError as exc:
            raise RunFailed(f"cannot resume: {exc}") from None
        for line in skipped:
            self.say(f"[run] {line}")
        if path is None:
            return
        meta = trainer_record(path)
        try:
            check_resumable(meta.get("model"), self.gt.spec, path.name)
        except GraphtrainError as exc:
            raise RunFailed(f"cannot resume: {exc}") from None
        self.finished = finished_result(self.run_dir, meta, self.gt.spec.training.epochs)
        if self.finished is not None:
            self.say(
                f"[run] the run is complete: checkpoint {path.name} ends epoch {meta['epoch']} of "
                f"{self.gt.spec.training.epochs}, nothing to train (raise training.epochs to train on, "
                "or --overwrite to start over); its result:"
            )
            return
        said = f"step {meta['step']} (epoch {meta['epoch']}, " if {"step", "epoch"} <= set(meta) else "("
        self.say(f"[run] resuming from {said}checkpoint {path.name})")

    def _launch(self) -> dict:
        try:
            self._serve_metrics()
            self.obs.phase = Phase.partitioning.value
            self.write_status()
            self.write_targets()
            partition = self.partition()
            st = self.obs.partition["stats"]
            self.say(
                f"[run] edge cut {100 * st['edge_cut_fraction']:.2f} %, balance "
                + ", ".join(f"{k} {v:.3f}" for k, v in st["balance"].items())
            )
            self.obs.phase = Phase.starting.value
            self.write_status()
            if not self.standalone:
                self.say(f"[run] starting {self.gt.spec.num_shards} shard server(s)")
                self.start_servers(partition)
            n = 1 if self.standalone else self.gt.spec.trainers.replicas
            self.say(f"[run] starting {n} trainer(s){' (standalone)' if self.standalone else ''}")
            self.start_trainers(partition)
            self.obs.phase = Phase.training.value
            self.monitor(partition)
            self._progress()
            self._shutdown_servers()
            self.obs.phase = Phase.succeeded.value
            self.obs.completion_time = status.now()
            result = json.loads((self.run_dir / "result.json").read_text())
            if result.get("stopped_early"):
                self.say(
                    f"[run] stopped early after epoch {result.get('last_epoch')}: {result['stopped_early']}"
                )
            return result
        except BaseException as exc:
            self.obs.phase = Phase.failed.value
            self.obs.failure = (
                str(exc)
                if not isinstance(exc, KeyboardInterrupt)
                else (str(exc) if isinstance(exc, Terminated) else "interrupted (Ctrl-C)")
            )
            if isinstance(exc, RunFailed):
                self.obs.failure_reason = exc.reason
            self.obs.completion_time = status.now()
            raise
        finally:
            self.stop_all()
            self._remove_segments(self.token)
            self.write_status()
            self._stop_metrics()

    @staticmethod
    def _remove_segments(token: str) -> None:
        """Shared memory that killed processes of the launch with `token` could not unlink (call it once
        every one of them has exited)."""
        from graphtrain.runtime.kvstore.shm import job_prefix, remove_leftovers

        with contextlib.suppress(OSError):
            remove_leftovers(job_prefix(token))


def read_if_present(path: Path) -> str | None:
    """A file's text, or None if it cannot be read (not written yet)."""
    try:
        return path.read_text()
    except OSError:
        return None


def trainer_record(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer record (epoch, step, model), {} when it has none that reads."""
    try:
        meta = ckpt.read_top(path).get("trainer") or json.loads((path / "trainer.json").read_text())
    except (GraphtrainError, OSError, ValueError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def finished_result(run_dir: Path, meta: dict[str, Any], epochs: int) -> dict[str, Any] | None:
    """The result of the run in `run_dir` when there is nothing left to train: the newest checkpoint
    (trainer record `meta`) ends the last of `epochs`, and the launch that wrote it succeeded and left
    its result.json for that epoch. None otherwise (then --resume starts the processes as usual)."""
    if meta.get("epoch") != epochs:
        return None
    try:
        phase = json.loads((run_dir / "status.json").read_text()).get("phase")
        result = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError, AttributeError):
        return None
    if phase != Phase.succeeded.value or not isinstance(result, dict):
        return None
    return result if result.get("last_epoch") == epochs else None


def describe_checkpoint(path: Path) -> str:
    """'epoch 3, step 120' from a checkpoint's trainer record, or 'incomplete'."""
    meta = trainer_record(path)
    if "epoch" in meta and "step" in meta:
        return f"epoch {meta['epoch']}, step {meta['step']}"
    return "incomplete"


def describe_checkpoints(root: Path) -> str:
    """What a checkpoint directory holds, in a few words: its latest checkpoint and how many there are."""
    dirs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    try:
        latest = ckpt.resolve_latest(root)
    except GraphtrainError:
        latest = None
    count = f"{len(dirs)} checkpoint{'s' if len(dirs) != 1 else ''}"
    if latest is None:
        return count + (f", the newest {dirs[-1]}" if dirs else "")
    return f"latest {latest.name}: {describe_checkpoint(latest)}; {count}"
