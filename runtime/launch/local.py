"""`graphtrain run`: a whole GraphTraining on one machine, as processes.

partition (in this process) -> shard-server processes (ipc:// sockets, shared memory) -> trainer
processes (gloo rendezvous on a loopback port) -> monitor. The run directory holds the partition, the
token, each process' log, checkpoints, progress.json (from trainer 0) and status.json in the
GraphTraining status schema. A process that fails stops the run with its name, exit code and the end
of its log; with runPolicy.backoffLimit > 0 the trainers (and any dead shard server) are started again
from the last complete checkpoint instead, up to that many times. A stall (no progress for
runPolicy.stallTimeoutSeconds) is reported as the operator reports it (Stalled in status.json, a line),
or with runPolicy.stallPolicy Restart restarts the trainers as a failure does. Ctrl-C or a deadline stop every
process. Standalone mode runs one trainer whose shards live in its own process: no servers, no sockets.

One launcher owns a run directory at a time (a lock held for its lifetime), and its children die with
it even when it is SIGKILLed (the kernel's parent-death signal), so a launch never meets the processes
of an earlier one. Each launch writes a fresh token, so its shared-memory names are its own.

It never deletes checkpoints unasked: without --resume or --overwrite, a directory that holds some is refused.

Each launch starts fresh logs (the previous launches' are kept as <name>.log.1, .2, .3); a failure
shows the end of the failed process' own output and names the signal that killed it, if one did.

Everything the launch creates is private to the user: the launcher's umask is 0o077, and the servers
and trainers inherit it.

What it prints (progress_lines.py): each line starts with the time (HH:MM:SS); one line per finished
epoch, taken from trainer 0's progress history (progress-history.json), so none is missed or repeated
however fast epochs go, each with that epoch's mean loss and its own validation metric (none when it was
not evaluated); a line on the current epoch only when one runs longer than IN_EPOCH_EVERY; trainer 0's
log warnings. A failed process is one line: the
`error: ...` line it printed (a known error), or the last line of its traceback, and where its log is.

Its parts: processes.py starts, watches and stops the processes and owns the run directory, forking
them from zygote.py's process, which imported torch once for all of them (and their restarts);
partition_step.py is the partition pipeline the operator's partition Job runs too; reuse.py decides
what a launch takes over from the one before (an unchanged partition, the checkpoint to resume);
preparation.py readies the run directory (token, logs, stale files) before anything starts.

Metrics: every process serves Prometheus metrics on 127.0.0.1 on a port it picks (a shard server names
it in its ready line, a trainer writes it to its port file, plan.port_file), the launcher too (the
executor-level training metrics, launch/metrics.py). The launcher keeps <run_dir>/prometheus/targets.json
(Prometheus file_sd, launch/targets.py) up to date: rewritten as ports become known, and when a
restarted process comes back on a new one. Callers add targets of their own with add_target() (the API
of `graphtrain run --api`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphtrain.contract.conditions import Reason
from graphtrain.contract.roles import Files
from graphtrain.contract.spec import (
    Condition,
    Device,
    GraphTraining,
    GraphTrainingStatus,
    Phase,
    ShardState,
    StallPolicy,
)
from graphtrain.runtime import cpus
from graphtrain.runtime.data.cache import reason, write_json
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch import (
    inference,
    partition_step,
    plan,
    preparation,
    reuse,
    status,
    targets,
)
from graphtrain.runtime.launch.hosts import HostLayout
from graphtrain.runtime.launch.processes import (
    Child,
    RunFailed,
    answers_livez,
    child_env,
    culprit,
    die_with_this_process,
    ended,
    free_port,
    lock_run_dir,
    port_file_init,
    remove_sockets,
    spawn,
    stop,
    umask,
    wait_ready,
)
from graphtrain.runtime.launch.progress_lines import ProgressLines
from graphtrain.runtime.launch.zygote import Zygote
from graphtrain.runtime.progress import console
from graphtrain.runtime.stopping import Terminated

POLL_SECONDS = 0.5
SERVER_GRACE = 15.0  # seconds the shard servers have to stop at the end of a run
PRIVATE = 0o077  # umask of the launcher and its children: directories 0700, files 0600


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
        hosts: HostLayout | None = None,
    ):
        self.gt = gt
        self.spec_path = spec_path.resolve()
        self.run_dir = run_dir.resolve()
        self.standalone = standalone
        self.data_dir = data_dir
        self.echo = echo
        self.resume = resume
        self.overwrite = overwrite
        self.overwritten: Path | None = None  # checkpoints --overwrite deletes once the input is in
        self.hosts = hosts  # simulated hosts (tests, bench/hosts.py): None runs every process here
        self.token = ""
        self.user_umask = 0o022  # the caller's (set by run()), for the shared dataset cache
        self.obs = status.RunObserved(start_time=status.now())
        self._conditions: list[Condition] = []
        self.servers: list[Child] = []
        self.trainers: list[Child] = []
        self.addresses: list[str] = []
        self.lines = ProgressLines(self.run_dir, self.say)
        self.namespace = gt.metadata.namespace or "default"
        self.last_status: GraphTrainingStatus | None = None  # what the launcher's metrics read
        self.metrics_port: int | None = None  # the launcher's own, while it runs
        self._metrics_server: Any = None
        self.zygote: Zygote | None = None
        self._extra_targets: list[tuple[str, int, dict[str, str]]] = []
        self._targets_lock = threading.Lock()
        self._targets_written = False
        self.finished: dict[str, Any] | None = None  # --resume of a run already complete: its result
        self.cancelled: Terminated | None = None  # cancel(): the monitor stops the run with it
        self.started = False  # whether a server or trainer was started (a run's logs are worth keeping)

    # --------------------------------------------------------------------------------- metrics

    def add_target(self, job: str, port: int, labels: Mapping[str, str] | None = None) -> None:
        """Scrape 127.0.0.1:`port` too, as `job` (namespace and training labels added): for processes the
        caller runs beside the launch (the API of `graphtrain run --api`). Safe from any thread, before
        or during run(); the targets file is rewritten at once if the run has written it already."""
        with self._targets_lock:
            self._extra_targets.append((job, port, dict(labels or {})))
        if self._targets_written and self.run_dir.is_dir():  # a run directory deleted mid-run stays gone
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
        it named may be another process' by the next scrape). A run directory deleted mid-run is not
        made again for it: a prometheus/ alone there was taken for someone else's files, and the
        next `graphtrain run` into it was refused."""
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        with self._targets_lock:
            if self._targets_written and self.run_dir.is_dir():
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

    def final_status(self) -> None:
        """The last status.json. A failed run whose disk is full keeps its own error (this one is said,
        not raised in its place: it hid the cause); a run that succeeded fails, naming the file."""
        try:
            self.write_status()
        except OSError as exc:
            where = f"{self.run_dir / 'status.json'}: the final status cannot be written ({reason(exc)})"
            if self.obs.phase != Phase.failed.value:
                raise GraphtrainError(where) from None
            self.say(f"warning: {where}; it keeps an earlier one")

    def say(self, text: str) -> None:
        """One line of the launcher's, after the time of day."""
        if self.echo:
            console.print(
                f"{time.strftime('%H:%M:%S')} {text}", highlight=False, markup=False, soft_wrap=True
            )

    # ------------------------------------------------------------------------------- partition

    def partition(self) -> Path:
        """Partition the spec's graph into <run_dir>/partition (launch/partition_step.py, as the partition
        Job), or reuse the partition there when the graph and partition settings and the input files'
        contents are unchanged, before and after they were read (launch/reuse.py). Relative input paths
        are the spec's directory's. What the data says that the run should know is said; what the spec
        needs that the data lacks stops the run here, naming the field, before any server starts."""
        from graphtrain.runtime.data import datasets, inputs

        if inference.inferring(self.gt):  # the checkpoint's own: its rows are in that node order
            return inference.partition(
                self.gt,
                self.spec_path.parent,
                self.run_dir,
                self.data_dir,
                lambda m: self.say(f"[run] warning: {m}"),
                self.run_dir / inference.VERIFIED,
            )
        work = partition_step.from_spec(self.gt, self.spec_path.parent)
        cached = None
        if work.source.dataset is not None:
            with umask(self.user_umask):  # the dataset cache is shared, not the run's
                cached = datasets.fetch(str(work.source.dataset), self.data_dir)
        key = reuse.partition_key(self.gt.spec, work.source, inputs.fingerprint(work.source, cached))
        out = self.run_dir / "partition"
        cfg = reuse.reusable_partition(self.run_dir, key, self.resume, self.say)
        if cfg is not None:
            self.say(f"[run] reusing the partition in {out} (same settings, same input files)")
        else:
            self.say(f"[run] partitioning {work.source.described} into {work.settings.parts}")
            cfg = partition_step.partition(
                work,
                out,
                overwrite=True,
                data_dir=self.data_dir,
                warn=lambda message: self.say(f"[run] warning: {message}"),
                loading=lambda: umask(self.user_umask),
                key=key,
            )
            if reuse.partition_key(self.gt.spec, work.source, inputs.fingerprint(work.source, cached)) == key:
                reuse.partitioned_for(self.run_dir, key)  # else an input changed while it was being read
            else:
                self.say(
                    "[run] warning: an input changed while it was partitioned; the next run partitions again"
                )
        self.obs.partition = cfg.data
        return cfg.path

    # ------------------------------------------------------------------------------- processes

    def _spawn(self, p: plan.ProcessPlan, announces: bool = False) -> Child:
        return spawn(p, self.run_dir / "logs", announces, self.zygote)

    def _start_zygote(self) -> None:
        """The process the servers and trainers fork from (launch/zygote.py), started first so that its
        torch import overlaps the partitioning (an inference's after its checks). None with simulated
        hosts (each in its host's namespace) or GRAPHTRAIN_ZYGOTE=0; one that fails leaves the plain start."""
        if self.hosts is not None or os.environ.get("GRAPHTRAIN_ZYGOTE", "1") == "0":
            return
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            log, dies = logs / "zygote.log", die_with_this_process()
            preload = plan.zygote_preload(self.gt.spec.task_kind, self.gt.spec.trainers.replicas)
            self.zygote = Zygote.start(plan.entry(), child_env(), log, dies, preload)

    @property
    def device(self) -> str:
        """Where the shard servers keep their learnable tables (spec shardServers.device): cpu or cuda."""
        return Device(self.gt.spec.shard_servers.device).value

    def files(self, partition: Path) -> Files:
        if inference.inferring(self.gt):
            return inference.files(self.gt, self.spec_path, self.run_dir, partition)
        return plan.files(self.run_dir, self.spec_path, partition)

    def start_servers(self, partition: Path) -> None:
        n = self.gt.spec.num_shards
        where = self.files(partition)
        gpus = visible_gpus() if self.device == "cuda" else 0
        plans = [
            plan.shard_server(
                i,
                where,
                self.run_dir,
                plan.shard_device(self.device, i, gpus),
                bind=self.hosts.bind(i) if self.hosts else None,
                fast_lane=self.gt.spec.shard_servers.fast_lane,
            )
            for i in range(n)
        ]
        if self.hosts:
            plans = [self.hosts.on_host(p, self.hosts.shard_host(i)) for i, p in enumerate(plans)]
        self.servers = [self._spawn(p, announces=True) for p in plans]
        self.addresses = [wait_ready(c) for c in self.servers]
        self.write_targets()
        self.obs.shards = [
            {"index": i, "state": ShardState.ready.value, "address": a, "restarts": 0}
            for i, a in enumerate(self.addresses)
        ]

    def start_trainers(self, partition: Path) -> None:
        where = self.files(partition)
        if self.standalone:
            self.trainers = [self._spawn(plan.standalone_trainer(where, self.run_dir))]
            return
        world = self.gt.spec.trainers.replicas
        h = self.hosts
        init = h.rendezvous(free_port()) if h else port_file_init(self.run_dir)
        threads = cpus.host_threads(cpus.available_cores(), world, len(self.servers), h.count if h else 1)
        plans = [
            plan.trainer(r, world, where, self.run_dir, self.addresses, init, threads=threads[r])
            for r in range(world)
        ]
        plans = [h.on_host(p, h.trainer_host(r)) for r, p in enumerate(plans)] if h else plans
        self.trainers = [self._spawn(p) for p in plans]

    def _restart_lost_servers(self) -> None:
        """Restart the servers that ended, and those here whose /livez does not answer: a stopped or hung
        server left running met the restarted trainers again, until every retry was spent."""
        for i, c in enumerate(self.servers):
            port, here = c.metrics_port, self.hosts is None  # a simulated host's loopback is its own
            if c.proc.poll() is None and here and port is not None and not answers_livez(port):
                self.say(f"{c.plan.name} does not answer /livez: stopped, to be restarted")
                stop([c], grace=0.0)
            if c.proc.poll() is not None:
                fresh = self._spawn(c.plan, announces=True)
                fresh.restarts = c.restarts + 1
                self.servers[i] = fresh
                self.addresses[i] = wait_ready(fresh)
                self.obs.shards[i].update(state=ShardState.ready.value, restarts=fresh.restarts)
                self.write_targets()  # on its new port

    def cancel(self, why: str) -> None:
        """Stop the run from another thread (a harness's timeout) as Ctrl-C stops it. stop_all from there
        is no stop: the monitor takes the trainers it ends for failed ones, and restarts them."""
        self.cancelled = Terminated(why)

    def stop_all(self, grace: float = 10.0) -> None:
        stop([*self.trainers, *self.servers], grace)

    def _shutdown_servers(self, grace: float = SERVER_GRACE) -> None:
        """Stop the shard servers once the trainers are done: SIGTERM, which a server takes as it takes a
        shutdown request (roles/shard_server.py), SIGKILL after `grace` seconds. No kvstore client: its
        import is torch's (~2 s of CPU at the end of every run, and the launcher's own exit slower)."""
        stop(self.servers, grace)

    # ---------------------------------------------------------------------------------- monitor

    def _progress(self, final: bool = False) -> None:
        """Print what trainer 0's progress gained (progress_lines.py; `final`: every warning left) and
        keep its latest report (a missing or unreadable one keeps the last)."""
        report = self.lines.poll(final)
        if report is not None:
            self.obs.progress = report

    def _failed(self) -> Child | None:
        """The process whose failure to name (processes.culprit: a killed trainer, not the peer whose
        collective then broke), None while that is not yet known, or a server that left while trainers
        still need it."""
        failed = [c for c in [*self.servers, *self.trainers] if c.proc.poll() not in (None, 0)]
        if failed:
            return culprit(failed, any(t.proc.poll() is None for t in self.trainers), time.monotonic())
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
            if self.cancelled is not None:
                raise self.cancelled
            if any([c.learn_port() for c in self.trainers]):  # every one read, not the first only
                self.write_targets()
            self._progress()
            stamp = self.obs.progress.updated_at if self.obs.progress else None
            if stamp != last_seen:
                last_seen, last_change = stamp, time.monotonic()
            silent = status.stall_note(time.monotonic() - last_change, policy.stall_timeout_seconds)
            if (silent is None) != (self.obs.stalled is None):  # as the operator: Stalled, and back
                self.say(f"[run] stalled: {silent}" if silent else "[run] trainer 0 reports again")
                self.obs.stalled = silent
            self.write_status()
            bad = self._failed()
            # runPolicy.stallPolicy Restart: a stall restarts the trainers as a failure does
            restart = silent if policy.stall_policy == StallPolicy.restart else None
            if bad is not None or restart is not None:
                what = f"{bad.plan.name} {ended(bad.proc.returncode)}" if bad is not None else restart
                if self.obs.restarts < policy.backoff_limit:
                    self.obs.restarts += 1
                    self.obs.phase, self.obs.stalled = Phase.restarting.value, None
                    self.say(
                        f"[run] {what}; restart {self.obs.restarts}/{policy.backoff_limit} from the last "
                        "checkpoint"
                    )
                    self.write_status()
                    for t in self.trainers:
                        if t.proc.poll() is None:
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(t.proc.pid, signal.SIGKILL)
                            t.proc.wait(timeout=10)
                    self._restart_lost_servers()
                    self.start_trainers(partition)
                    self.obs.phase = Phase.training.value
                    last_change = time.monotonic()
                    continue
                raise RunFailed(
                    bad.why() if bad is not None else f"{restart}; runPolicy.stallPolicy is Restart"
                )
            if all(t.proc.poll() == 0 for t in self.trainers):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise RunFailed(
                    f"the run exceeded runPolicy.activeDeadlineSeconds ({policy.active_deadline_seconds} s)",
                    Reason.deadline_exceeded,
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
        tr = self.gt.spec.trainers
        trainers = Device(tr.device).value
        on_gpu = "cuda" in (self.device, trainers)
        replicas = 1 if self.standalone else tr.replicas
        gpus = visible_gpus() if on_gpu else 0
        if why := plan.missing_gpus(self.device, trainers, gpus, str(tr.dist_backend), replicas):
            raise GraphtrainError(why)
        if why := reuse.foreign_run_dir(self.run_dir, self.spec_path):
            raise GraphtrainError(why)
        if not inference.inferring(self.gt):  # a path's typo: refused before the run directory changes
            from graphtrain.runtime.data import inputs

            inputs.require_readable(inputs.resolve(self.gt.spec.graph, self.spec_path.parent))
        with umask(PRIVATE) as self.user_umask:
            made = preparation.make_run_dir(self.run_dir)
            with lock_run_dir(self.run_dir):
                fresh = preparation.fresh(self.run_dir)
                try:
                    self._prepare()
                    return self.finished if self.finished is not None else self._launch()
                except Exception:
                    if fresh and not self.started:  # nothing ran: no Failed run left for the next to take
                        preparation.remove_fresh(self.run_dir, made)
                    raise

    def _prepare(self) -> None:
        """The run directory made ready for this launch (preparation.py); nothing starts here."""
        done = preparation.prepare(
            self.run_dir,
            self.gt,
            resume=self.resume,
            overwrite=self.overwrite,
            say=self.say,
            skip_earlier=self.lines.skip_earlier,
        )
        self.token, self.finished, self.overwritten = done.token, done.finished, done.overwritten

    def _drop_checkpoints(self) -> None:
        preparation.drop_checkpoints(self.overwritten, self.say)
        self.overwritten = None

    def _launch(self) -> dict:
        try:
            if not inference.inferring(self.gt):  # at once: its torch import overlaps the partitioning
                self._start_zygote()
            self._serve_metrics()
            self.obs.phase = Phase.partitioning.value
            self.write_status()
            self.write_targets()
            partition = self.partition()
            if inference.inferring(self.gt):  # after its checks (inference.partition): a refusal starts none
                self._start_zygote()
            self._drop_checkpoints()
            if st := (self.obs.partition or {}).get("stats"):
                self.say(
                    f"[run] edge cut {100 * st['edge_cut_fraction']:.2f} %, balance "
                    + ", ".join(f"{k} {v:.3f}" for k, v in st["balance"].items())
                )
            self.started = True
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
            self._progress(final=True)
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
            if self.zygote is not None:  # idle, it exits at once; still importing (a Ctrl-C at the
                self.zygote.close(timeout=1.0)  # start) it reads no socket until done: killed, not awaited
            preparation.remove_segments(self.token)
            remove_sockets(self.run_dir)
            try:
                self.final_status()
            finally:
                self._stop_metrics()


def visible_gpus() -> int:
    """The GPUs this process sees (CUDA_VISIBLE_DEVICES applies): a cuda run spreads its shards over
    them (plan.shard_device)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
