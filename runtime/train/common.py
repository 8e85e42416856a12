"""What every trainer needs: seeds, DDP, progress reports, dense checkpoints and resume.

TrainerProgress: after every step window and evaluation, a trainer reports in the spec's Progress schema
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

At the end of each epoch (end_epoch) rank 0 also writes metrics.csv and TensorBoard events (history.py),
the best epoch's checkpoint is marked BEST (best.py) and, with training.earlyStopping, rank 0 decides
whether to stop and every rank follows. A trainer's log lines start with an ISO-8601 timestamp.
A resumed trainer first checks that the checkpoint was trained with the spec's model (model_record):
a changed model.hiddenDim is one line naming it, not a size mismatch deep in torch.
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

from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import Progress
from graphtrain.runtime.data.cache import atomic_file, hash_tree, write_json
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.train import best as best_record
from graphtrain.runtime.train.history import MetricsLog
from graphtrain.runtime.train.metrics import TrainerMetrics
from graphtrain.runtime.train.resumable import check_resumable, model_record


def log(text: str) -> None:
    """One line of a trainer's log (stderr), stamped with the local time in ISO-8601."""
    stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    print(f"{stamp} {text}", file=sys.stderr, flush=True)


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

    def agree(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank: one decision, taken once (early stopping)."""
        return self.broadcast_text("1" if flag else "") == "1"

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
class TrainerProgress:
    """A trainer's running tally, reported in the spec's Progress schema (to_spec()). `metrics` and
    `state` stay in the trainer: the final metrics go to result.json, and `state` marks the final report."""

    epoch: int = 0
    epochs: int = 0
    step: int = 0
    loss: float | None = None
    samples_per_second: float | None = None
    eval_metric: str | None = None
    eval_value: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    state: str = "Training"
    updated_at: str = ""
    evaluation: dict[str, float] = field(default_factory=dict)  # this epoch's validation metrics, if any

    def summary(self) -> str:
        parts = [f"epoch {self.epoch}/{self.epochs}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        if self.eval_value is not None:
            parts.append(f"{self.eval_metric} {self.eval_value:.4f}")
        return "  ".join(parts)

    def to_spec(self) -> Progress:
        """The report every sink writes: the schema of status.progress in both executors. A value that
        is not finite (a diverging loss: NaN, inf) is reported absent, which the schema allows; the
        summary line still shows it (the schema refuses NaN, and a refused report killed the trainer)."""
        return Progress(
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

    def write(self, progress: Progress, final: bool, history: list[Progress] | None = None) -> None: ...

    def load_history(self) -> list[Progress]:
        """The history kept so far (a restarted trainer continues it); [] if none."""
        ...


class FileSink:
    """Rank 0's <run_dir>/progress.json, replaced atomically on every report (the launcher reads it), and
    <run_dir>/progress-history.json at the end of each epoch."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / rundir.PROGRESS_FILE
        self.history_path = run_dir / rundir.HISTORY_FILE

    def write(self, progress: Progress, final: bool, history: list[Progress] | None = None) -> None:
        write_json(self.path, reporting.to_wire(progress))
        if history is not None:
            with atomic_file(self.history_path) as f:
                f.write(reporting.encode_history(history).encode())

    def load_history(self) -> list[Progress]:
        try:
            return reporting.decode_history(self.history_path.read_bytes())
        except OSError:
            return []


class HeartbeatFileSink:
    """Every rank's own latest report, <run_dir>/trainers/rank-<i>.json (its heartbeat in a local run,
    as its `rank-<i>` key is in the progress ConfigMap)."""

    def __init__(self, run_dir: Path, rank: int):
        self.path = run_dir / rundir.rank_file(rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, progress: Progress, final: bool, history: list[Progress] | None = None) -> None:
        write_json(self.path, reporting.to_wire(progress))

    def load_history(self) -> list[Progress]:
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
    """Stamps each report, logs a line for it (rank 0, when asked to), sets the trainer's gauges and
    hands it to every sink; at the end of an epoch, rank 0 appends it to the history first (and to
    metrics.csv and TensorBoard through `metrics_log`)."""

    def __init__(
        self,
        rank: int,
        sinks: list[ProgressSink],
        echo: bool = True,
        metrics: TrainerMetrics | None = None,
        metrics_log: MetricsLog | None = None,
    ):
        self.rank = rank
        self.sinks = sinks
        self.echo = echo and rank == 0
        self.metrics = metrics
        self.metrics_log = metrics_log if rank == 0 else None
        self.history: list[Progress] | None = None  # rank 0's, read from the sinks at the first epoch end

    def report(self, p: TrainerProgress, epoch_end: bool = False, evaluated: bool = False) -> None:
        """`epoch_end`: an epoch just finished (rank 0 appends the report to the history, with its eval
        metric only if `evaluated` this epoch: an epoch between evaluations repeated the last one's)."""
        p.updated_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        report, final = p.to_spec(), p.state != "Training"
        if self.metrics is not None:
            self.metrics.reported(report)
        stale = {"eval_metric": None, "eval_value": None}
        entry = report if evaluated or not epoch_end else report.model_copy(update=stale)
        if self.echo:
            said = reporting.epoch_line(entry) if epoch_end else reporting.in_epoch_line(p)
            log(f"[trainer] {said}")
        history = None
        if epoch_end and self.rank == 0:
            if self.history is None:
                self.history = next((h for h in (s.load_history() for s in self.sinks) if h), [])
            history = self.history = reporting.append_history(self.history, entry)
            if self.metrics_log is not None:
                self.metrics_log.epoch(entry, p.evaluation if evaluated else {})
        if final and self.metrics_log is not None:
            self.metrics_log.final(report.step, p.metrics)
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
    """Restore what save_dense wrote (weights_only: tensors and plain values, nothing else).

    Raises:
        GraphtrainError: the checkpoint's model has other shapes than `model` (one line naming the first
            parameter; a checkpoint with a model record is checked by field before this).
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    mismatch = shape_mismatch(state["model"], model.state_dict())
    if mismatch:
        raise GraphtrainError(
            f"{path}: the checkpoint's dense model does not fit the spec's ({mismatch}): --resume needs the "
            "same model.hiddenDim, model.numLayers, model.useFeatures and embedding dims (or --overwrite)"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def shape_mismatch(saved: dict[str, Any], current: dict[str, Any]) -> str:
    """The first difference between two state dicts' keys or shapes, in words; "" when they fit."""
    for name in sorted(set(saved) | set(current)):
        if name not in current:
            return f"{name} is in the checkpoint, not in the model"
        if name not in saved:
            return f"{name} is in the model, not in the checkpoint"
        a, b = tuple(saved[name].shape), tuple(current[name].shape)
        if a != b:
            return f"{name}: checkpoint {list(a)}, spec {list(b)}"
    return ""


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DistributedDataParallel wrapper (or `model` itself)."""
    inner = getattr(model, "module", model)
    return inner if isinstance(inner, torch.nn.Module) else model


KEEP_CHECKPOINTS = 2  # the latest and the one before it (in case the latest's files are damaged)


def init_spec(table: Any, seed: int = 0) -> dict[str, Any]:
    """The shard servers' init description of a spec's embedding table."""
    i = table.init
    return {"kind": str(i.kind), "low": i.low, "high": i.high, "mean": i.mean, "std": i.std, "seed": seed}


class StepHooks:
    """What every trainer does: set up its place (setup()), resume (begin()), and after a step and after an
    epoch report progress (rank 0 writes it), checkpoint on schedule and when an epoch is the best so far,
    and stop early when training.earlyStopping says so (end_epoch()); finish() writes the final report."""

    EVAL_METRICS: tuple[str, ...] = ()  # a validation pass's metrics, the first one picking the best epoch

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
        self.metrics_log = MetricsLog(run_dir, self.EVAL_METRICS) if run_dir and dist.rank == 0 else None
        self.reporter = Reporter(dist.rank, sinks, metrics=self.metrics, metrics_log=self.metrics_log)
        self.epoch = self.step = 0
        self.passes: list[best_record.Pass] = []  # this timeline's validation passes
        self.best = best_record.Best()
        self.saved_step: int | None = None  # the step of the last checkpoint this trainer took
        self.loss_sum, self.loss_count = 0.0, 0  # this epoch's, on this rank
        self.stopped: str | None = None  # why training stopped early, if it did
        seed_everything(spec.training.seed)

    step: int
    epoch: int
    dist: Dist
    metrics: TrainerMetrics
    reporter: Reporter
    spec: Any

    checkpoint_root: Path | None
    graph: Any  # DistGraph: its client reaches every shard server

    @property
    def min_delta(self) -> float:
        es = self.spec.training.early_stopping
        return es.min_delta if es is not None else 0.0

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

    def checkpoint(self, best: bool = False) -> None:
        """All trainers pause (no pushes in flight) while rank 0 saves its state and the shard servers
        theirs; LATEST moves only once every piece is written, and BEST too when `best` (this epoch is the
        best so far). A step already checkpointed is not saved again: only the BEST marker moves."""
        if self.checkpoint_root is None:
            return
        tag = best_record.checkpoint_name(self.step)
        if self.saved_step == self.step:  # the same on every rank: no barrier is skipped by one alone
            if best and self.dist.rank == 0:
                ckpt.mark_best(self.checkpoint_root, tag)
            return
        self.graph.client.settle()  # this trainer's pushes in flight are applied before the barrier
        self.dist.barrier()
        if self.dist.rank == 0:
            meta = {"epoch": self.epoch, "step": self.step, "model": model_record(self.spec)}
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
            if best:
                ckpt.mark_best(self.checkpoint_root, tag)
            ckpt.prune(self.checkpoint_root, KEEP_CHECKPOINTS)
        self.dist.barrier()
        self.saved_step = self.step

    def resume(self) -> bool:
        """Continue from the latest complete checkpoint that checks out, if there is one: rank 0 picks
        it (saying which damaged ones it skipped) and has every shard restore it (servers that survived a
        failure are ahead of it), every rank its own state, once the checkpoint is known to have been
        trained with the spec's model. The validation passes up to it are replayed (best.py).

        Raises:
            GraphtrainError: the checkpoint was trained with another model (the fields named).
        """
        if self.checkpoint_root is None:
            return False
        name = ""
        if self.dist.rank == 0:  # one rank reads every file, and all take its choice
            latest, skipped = ckpt.latest_verified(self.checkpoint_root)
            for line in skipped:
                log(f"[trainer] {line}")
            name = latest.name if latest is not None else ""
        name = self.dist.broadcast_text(name)
        if not name:
            return False
        directory = self.checkpoint_root / name
        recorded = json.loads((directory / "trainer.json").read_text()).get("model")
        check_resumable(recorded, self.spec, name)  # every rank reads the same file: all stop alike
        meta = self.load_state(directory)
        self.epoch, self.step = int(meta["epoch"]), int(meta["step"])
        self.saved_step = self.step
        self.passes = best_record.until(best_record.load(self.checkpoint_root), self.step)
        self.best = best_record.replay(self.passes, self.min_delta)
        if self.dist.rank == 0:
            log(f"[trainer] resuming from step {self.step} (epoch {self.epoch}, checkpoint {name})")
            self.graph.client.restore(name)
            self._remark_best()
        self.dist.barrier()
        self.resumed()
        return True

    def _remark_best(self) -> None:
        """After a resume, BEST names this timeline's best checkpoint (a pass of an abandoned one, after
        the checkpoint resumed from, may have moved it)."""
        assert self.checkpoint_root is not None
        best = self.best.best
        if best is None:
            (self.checkpoint_root / ckpt.BEST).unlink(missing_ok=True)
        elif (self.checkpoint_root / best_record.checkpoint_name(best.step) / ckpt.TOP).exists():
            ckpt.mark_best(self.checkpoint_root, best_record.checkpoint_name(best.step))

    def begin(self) -> bool:
        """Resume if there is a checkpoint (whether it did), then open metrics.csv and TensorBoard there."""
        resumed = self.resume()
        if self.metrics_log is not None:
            self.metrics_log.open(self.epoch, self.step)
        return resumed

    # ------------------------------------------------------------------------------- progress

    def note(self, progress: TrainerProgress, window: Throughput, loss: torch.Tensor) -> None:
        progress.__dict__.update(
            epoch=self.epoch,
            step=self.step,
            loss=float(loss.detach()),
            samples_per_second=window.rate(self.dist.world),
        )

    def after_step(
        self, progress: TrainerProgress, window: Throughput, loss: torch.Tensor, samples: int, every: int
    ) -> None:
        self.step += 1
        self.loss_sum += float(loss.detach())
        self.loss_count += 1
        window.add(samples)
        self.metrics.stepped(samples)
        if self.step % every == 0:
            self.note(progress, window, loss)
            self.reporter.report(progress)
        interval = self.spec.training.checkpoint_interval
        if interval and self.step % interval == 0:
            self.checkpoint()

    def end_epoch(
        self, progress: TrainerProgress, window: Throughput, values: dict[str, float] | None
    ) -> bool:
        """An epoch just ended (self.epoch counts it), evaluated when `values` (its validation metrics) is
        given: report it with its mean loss over every trainer, checkpoint on schedule and whenever it is
        the best so far, and say whether to stop early (rank 0 decides, every rank follows)."""
        tr = self.spec.training
        total, count = self.dist.sum([self.loss_sum, float(self.loss_count)])
        self.loss_sum, self.loss_count = 0.0, 0
        progress.__dict__.update(
            epoch=self.epoch,
            step=self.step,
            loss=total / count if count else None,
            samples_per_second=window.rate(self.dist.world),
            evaluation=dict(values or {}),
        )
        improved = False
        if values is not None:
            metric = self.EVAL_METRICS[0]
            progress.__dict__.update(eval_metric=metric, eval_value=values[metric])
            this = best_record.Pass(self.epoch, self.step, values[metric])
            self.passes = [*self.passes, this]
            self.best, improved = best_record.update(self.best, this, self.min_delta)
            if self.dist.rank == 0 and self.checkpoint_root is not None:
                best_record.save(self.checkpoint_root, self.passes)
        self.reporter.report(progress, epoch_end=True, evaluated=values is not None)
        if tr.checkpoint_interval == 0 or improved:
            self.checkpoint(best=improved)
        es = tr.early_stopping
        stop = values is not None and es is not None and best_record.should_stop(self.best, es.patience)
        if not self.dist.agree(stop) or es is None:
            return False
        self.stopped = best_record.stop_reason(self.best, self.EVAL_METRICS[0], es.patience, es.min_delta)
        if self.dist.rank == 0:
            log(f"[trainer] stopping early after epoch {self.epoch}: {self.stopped}")
        return True

    def finish(self, progress: TrainerProgress, result: dict[str, Any], test_metric: str) -> dict[str, Any]:
        """The final report and result: the test metric (of the last model: the one training ended
        with), the epoch it ended at, the best validation pass and its checkpoint, why it stopped early."""
        result["last_epoch"] = self.epoch
        best = self.best.best
        if best is not None:
            result["best_epoch"] = best.epoch
            result[f"best_{self.EVAL_METRICS[0]}"] = best.value
            name = best_record.checkpoint_name(best.step)
            if self.checkpoint_root is not None and (self.checkpoint_root / name / ckpt.TOP).exists():
                result["best_checkpoint"] = name
        if self.stopped:
            result["stopped_early"] = self.stopped
        # the final report carries the test metric: in a pod it is what status.progress (and `kubectl
        # get gtr`) shows, there being no result.json beside it
        progress.__dict__.update(
            eval_metric=test_metric, eval_value=result[test_metric], metrics=result, state="Succeeded"
        )
        self.reporter.report(progress)
        return result
