"""What every trainer needs: seeds, DDP, progress reports, dense checkpoints and resume.

Progress: after every step window and evaluation, a trainer reports in the spec's Progress schema
(spec.reporting) through its sinks: rank 0 to <run_dir>/progress.json (FileSink, for the local launcher),
every rank to <run_dir>/trainers/rank-<i>.json (HeartbeatFileSink) and to the progress ConfigMap in a
pod (progress_k8s.ConfigMapSink, for the operator). At the end of each epoch (after its evaluation) rank
0 also appends the report to the progress history, which the same sinks keep (progress-history.json, the
ConfigMap's `history`). Each report also sets the trainer's gauges (train/metrics.py).
Dense checkpoints hold the model and optimizer state as tensors, written with torch.save and read
with torch.load(weights_only=True): no arbitrary object is ever unpickled. Embedding tables are
checkpointed by the shard servers (kvstore.checkpoint); a checkpoint is complete when both are, and its
checkpoint.json records the sha256 of the trainers' files too, so resuming checks every file and skips a
damaged latest checkpoint for the newest one that checks out.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as torch_dist

from graphtrain.runtime import spec as S
from graphtrain.runtime.data.cache import atomic_file, hash_tree, write_json
from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.spec import reporting
from graphtrain.runtime.train.metrics import TrainerMetrics


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class Dist:
    """This trainer's place among the trainers."""

    rank: int = 0
    world: int = 1
    init_method: str | None = None  # tcp://host:port of rank 0 (gloo rendezvous)
    backend: str = "gloo"

    def __enter__(self) -> Dist:
        if self.world > 1:
            if not self.init_method:
                raise ValueError("several trainers need an init method (tcp://host:port of rank 0)")
            torch_dist.init_process_group(
                self.backend,
                init_method=self.init_method,
                rank=self.rank,
                world_size=self.world,
                timeout=dt.timedelta(seconds=600),
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.world > 1 and torch_dist.is_initialized():
            torch_dist.destroy_process_group()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over all trainers (evaluation counts)."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            torch_dist.all_reduce(t)
        return t.tolist()

    def share(self, batch_size: int) -> int:
        """This trainer's part of a global batch: N trainers with DDP take the steps one trainer would
        (same effective batch, same learning rate schedule), so results do not depend on N."""
        return max(1, batch_size // self.world)

    def barrier(self) -> None:
        if self.world > 1:
            torch_dist.barrier()

    def broadcast_text(self, text: str, limit: int = 256) -> str:
        """Rank 0's `text` (at most `limit` bytes of UTF-8) on every rank."""
        if self.world == 1:
            return text
        raw = text.encode()
        if len(raw) > limit:
            raise ValueError(f"{len(raw)} bytes to broadcast, at most {limit}")
        buf = torch.zeros(limit, dtype=torch.uint8)
        buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
        torch_dist.broadcast(buf, src=0)
        return bytes(buf.tolist()).rstrip(b"\0").decode()


def finite_or_none(value: float | None) -> float | None:
    """`value` when it is a finite number, else None."""
    return value if value is not None and math.isfinite(value) else None


@dataclass
class Progress:
    """A trainer's running tally, reported in the spec's Progress schema (to_spec()). `metrics` and
    `state` stay in the trainer: the final metrics go to result.json, and `state` marks the final report."""

    epoch: int = 0
    epochs: int = 0
    step: int = 0
    loss: float | None = None
    samples_per_second: float | None = None
    eval_metric: str | None = None
    eval_value: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    state: str = "Training"
    updated_at: str = ""

    def summary(self) -> str:
        parts = [f"epoch {self.epoch}/{self.epochs}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.3f}")
        if self.eval_value is not None:
            parts.append(f"{self.eval_metric} {self.eval_value:.4f}")
        return ", ".join(parts)

    def to_spec(self) -> S.Progress:
        """The report every sink writes: the schema of status.progress in both executors. A value that
        is not finite (a diverging loss: NaN, inf) is reported absent, which the schema allows; the
        summary line still shows it (the schema refuses NaN, and a refused report killed the trainer)."""
        return S.Progress(
            epoch=self.epoch,
            epochs=self.epochs,
            step=self.step,
            loss=finite_or_none(self.loss),
            samples_per_second=finite_or_none(self.samples_per_second),
            eval_metric=self.eval_metric,
            eval_value=finite_or_none(self.eval_value),
            summary=self.summary(),
            updated_at=self.updated_at or None,
        )


class ProgressSink(Protocol):
    """Where a trainer's reports go: files in the run directory (FileSink, HeartbeatFileSink), the
    progress ConfigMap in a pod (progress_k8s.ConfigMapSink). Same schema in all; each sink decides how
    often it writes. `history`: rank 0's progress history, given at the end of an epoch (else None)."""

    def write(self, progress: S.Progress, final: bool, history: list[S.Progress] | None = None) -> None: ...

    def load_history(self) -> list[S.Progress]:
        """The history kept so far (a restarted trainer continues it); [] if none."""
        ...


class FileSink:
    """Rank 0's <run_dir>/progress.json, replaced atomically on every report (the launcher reads it), and
    <run_dir>/progress-history.json at the end of each epoch."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / reporting.PROGRESS_FILE
        self.history_path = run_dir / reporting.HISTORY_FILE

    def write(self, progress: S.Progress, final: bool, history: list[S.Progress] | None = None) -> None:
        write_json(self.path, reporting.to_wire(progress))
        if history is not None:
            with atomic_file(self.history_path) as f:
                f.write(reporting.encode_history(history).encode())

    def load_history(self) -> list[S.Progress]:
        try:
            return reporting.decode_history(self.history_path.read_bytes())
        except OSError:
            return []


class HeartbeatFileSink:
    """Every rank's own latest report, <run_dir>/trainers/rank-<i>.json (its heartbeat in a local run,
    as its `rank-<i>` key is in the progress ConfigMap)."""

    def __init__(self, run_dir: Path, rank: int):
        self.path = run_dir / reporting.rank_file(rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, progress: S.Progress, final: bool, history: list[S.Progress] | None = None) -> None:
        write_json(self.path, reporting.to_wire(progress))

    def load_history(self) -> list[S.Progress]:
        return []


def progress_sinks(run_dir: Path | None, rank: int, configmap: str | None) -> list[ProgressSink]:
    """A trainer's sinks: with a run directory, progress.json from rank 0 and every rank's heartbeat file;
    the ConfigMap from every rank when one is named (the Kubernetes client is imported only then)."""
    sinks: list[ProgressSink] = []
    if run_dir is not None:
        if rank == 0:
            sinks.append(FileSink(run_dir))
        sinks.append(HeartbeatFileSink(run_dir, rank))
    if configmap:
        from graphtrain.runtime.train.progress_k8s import ConfigMapSink

        sinks.append(ConfigMapSink(configmap, rank))
    return sinks


class Reporter:
    """Stamps each report, prints a line for it (rank 0, when asked to), sets the trainer's gauges and
    hands it to every sink; at the end of an epoch, rank 0 appends it to the history first."""

    def __init__(
        self, rank: int, sinks: list[ProgressSink], echo: bool = True, metrics: TrainerMetrics | None = None
    ):
        self.rank = rank
        self.sinks = sinks
        self.echo = echo and rank == 0
        self.metrics = metrics
        self.history: list[S.Progress] | None = None  # rank 0's, read from the sinks at the first epoch end

    def report(self, p: Progress, epoch_end: bool = False, evaluated: bool = False) -> None:
        """`epoch_end`: an epoch just finished (rank 0 appends the report to the history, with its eval
        metric only if `evaluated` this epoch: an epoch between evaluations repeated the last one's)."""
        p.updated_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        if self.echo:
            rate = f", {p.samples_per_second:,.0f} samples/s" if p.samples_per_second else ""
            print(f"[trainer] step {p.step} {p.summary()}{rate}", flush=True)
        report, final = p.to_spec(), p.state != "Training"
        if self.metrics is not None:
            self.metrics.reported(report)
        history = None
        if epoch_end and self.rank == 0:
            if self.history is None:
                self.history = next((h for h in (s.load_history() for s in self.sinks) if h), [])
            stale = {"eval_metric": None, "eval_value": None}
            entry = report if evaluated else report.model_copy(update=stale)
            history = self.history = reporting.append_history(self.history, entry)
        for sink in self.sinks:
            sink.write(report, final, history)


class Throughput:
    """Samples per second over the last window."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.samples = 0

    def add(self, n: int) -> None:
        self.samples += n

    def rate(self, world: int = 1) -> float:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return self.samples * world / elapsed


def save_dense(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Model and optimizer state (tensors only), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)


def load_dense(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Restore what save_dense wrote (weights_only: tensors and plain values, nothing else)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


KEEP_CHECKPOINTS = 2  # the latest and the one before it (in case the latest's files are damaged)


def init_spec(table: Any, seed: int = 0) -> dict[str, Any]:
    """The shard servers' init description of a spec's embedding table."""
    i = table.init
    return {"kind": str(i.kind), "low": i.low, "high": i.high, "mean": i.mean, "std": i.std, "seed": seed}


class StepHooks:
    """What every trainer does: set up its place (setup()), and after a step and after an epoch count,
    report progress (rank 0 writes it) and checkpoint on schedule."""

    def setup(
        self,
        spec: Any,
        graph: Any,
        dist: Dist,
        run_dir: Path | None,
        checkpoint_root: Path | None,
        progress_configmap: str | None,
        metrics: TrainerMetrics | None = None,
    ) -> None:
        self.spec, self.graph, self.dist = spec, graph, dist
        self.checkpoint_root = checkpoint_root
        self.metrics = metrics or TrainerMetrics(dist.rank)
        sinks = progress_sinks(run_dir, dist.rank, progress_configmap)
        self.reporter = Reporter(dist.rank, sinks, metrics=self.metrics)
        self.epoch = self.step = 0
        seed_everything(spec.training.seed)

    step: int
    epoch: int
    dist: Dist
    metrics: TrainerMetrics
    reporter: Reporter
    spec: Any

    checkpoint_root: Path | None
    graph: Any  # DistGraph: its client reaches every shard server

    # ----------------------------------------------------------------------------- checkpoints

    def save_state(self, directory: Path, meta: dict[str, Any]) -> None:
        """The trainer's own part of a checkpoint (rank 0); dense models add their state."""
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / "trainer.json", meta)

    def load_state(self, directory: Path) -> dict[str, Any]:
        """Restore save_state's part on every rank; returns its metadata (epoch, step)."""
        return json.loads((directory / "trainer.json").read_text())

    def resumed(self) -> None:
        """Called once epoch and step are restored (loaders and tables follow them)."""

    def checkpoint(self) -> None:
        """All trainers pause (no pushes in flight) while rank 0 saves its state and the shard servers
        theirs; LATEST moves only once every piece is written."""
        if self.checkpoint_root is None:
            return
        self.graph.client.settle()  # this trainer's pushes in flight are applied before the barrier
        self.dist.barrier()
        if self.dist.rank == 0:
            tag = f"step-{self.step:09d}"
            meta = {"epoch": self.epoch, "step": self.step}
            directory = self.checkpoint_root / tag
            if directory.exists():  # a damaged one this run resumed from before: nothing of it may stay
                shutil.rmtree(directory)
            self.save_state(directory, meta)
            extra = {
                "trainer": meta,
                "files": hash_tree(directory),  # the trainers' files, checked on resume
                # which partition orders the node-keyed rows: `graphtrain export` reads it
                "partition": ckpt.partition_record(
                    self.graph.config, directory, {t.name: str(t.keys) for t in self.spec.embeddings}
                ),
            }
            self.graph.client.checkpoint(tag, extra=extra, root=self.checkpoint_root)
            ckpt.mark_latest(self.checkpoint_root, tag)
            ckpt.prune(self.checkpoint_root, KEEP_CHECKPOINTS)
        self.dist.barrier()

    def resume(self) -> bool:
        """Continue from the latest complete checkpoint that checks out, if there is one: rank 0 picks
        it (saying which damaged ones it skipped) and has every shard restore it (servers that survived a
        failure are ahead of it), every rank its own state."""
        if self.checkpoint_root is None:
            return False
        name = ""
        if self.dist.rank == 0:  # one rank reads every file, and all take its choice
            latest, skipped = ckpt.latest_verified(self.checkpoint_root)
            for line in skipped:
                print(f"[trainer] {line}", file=sys.stderr, flush=True)
            name = latest.name if latest is not None else ""
        name = self.dist.broadcast_text(name)
        if not name:
            return False
        meta = self.load_state(self.checkpoint_root / name)
        if self.dist.rank == 0:
            said = f"epoch {meta.get('epoch')}, step {meta.get('step')}"
            print(f"[trainer] resuming from {name} ({said})", file=sys.stderr, flush=True)
            self.graph.client.restore(name)
        self.dist.barrier()
        self.epoch, self.step = int(meta["epoch"]), int(meta["step"])
        self.resumed()
        return True

    # ------------------------------------------------------------------------------- progress

    def note(self, progress: Progress, window: Throughput, loss: torch.Tensor) -> None:
        progress.__dict__.update(
            epoch=self.epoch,
            step=self.step,
            loss=float(loss.detach()),
            samples_per_second=window.rate(self.dist.world),
        )

    def after_step(
        self, progress: Progress, window: Throughput, loss: torch.Tensor, samples: int, every: int
    ) -> None:
        self.step += 1
        window.add(samples)
        self.metrics.stepped(samples)
        if self.step % every == 0:
            self.note(progress, window, loss)
            self.reporter.report(progress)
        interval = self.spec.training.checkpoint_interval
        if interval and self.step % interval == 0:
            self.checkpoint()
