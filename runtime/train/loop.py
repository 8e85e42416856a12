"""One epoch loop for every model (node classification, knowledge-graph embedding)
over the small TrainingTask interface of task.py, in the shape of TorchRec's train pipeline.

The loop owns what every training does alike:
- epochs and steps, resumed from the newest checkpoint that checks out at the very step it was taken,
  inside its epoch (checkpoints.ResumePoint), each step's draws on torch's global generator seeded
  from its place; so a resumed run takes the steps the uninterrupted one would have;
- progress reports (reporter.py): every task.report_every steps, and at the end of each epoch with its
  mean loss over every trainer and the metrics of its validation pass, if it had one;
- checkpoints: at the end of every epoch (training.checkpointInterval 0) or every N steps, and at the
  end of an epoch whose validation pass is the best so far (marked BEST; best.py);
- validation passes every training.evalEvery epochs and after the last, and early stopping
  (training.earlyStopping: rank 0 decides, every rank follows);
- the final test evaluation, of the last model (the one training ended with, early or not), and the
  result: its validation and test metrics, the epoch it ended at, the best pass and its checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.train import best as best_record
from graphtrain.runtime.train.checkpoints import Checkpoints, ResumePoint
from graphtrain.runtime.train.device import device_generator
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.history import MetricsLog
from graphtrain.runtime.train.metrics import TrainerMetrics
from graphtrain.runtime.train.profiling import StepProfiler
from graphtrain.runtime.train.reporter import Reporter, log
from graphtrain.runtime.train.sink_thread import BackgroundSinks
from graphtrain.runtime.train.sinks import progress_sinks
from graphtrain.runtime.train.tally import Throughput, TrainerProgress
from graphtrain.runtime.train.task import Split, TrainingTask

PREFIX: dict[Split, str] = {"valid": "val_", "test": "test_"}


def step_seed(seed: int, rank: int, epoch: int, index: int) -> int:
    """The seed of a step's draws on torch's global generator: a function of its place alone
    (training.seed, rank, epoch, batch index), so a resumed step draws what the uninterrupted one did."""
    return (((seed * 1_000_003 + rank) * 1_000_003 + epoch) * 1_000_003 + index) % 2**63


class EpochLoop:
    """Trains `task` for training.epochs: run() resumes if there is a checkpoint, trains, evaluates and
    returns the result (what result.json holds)."""

    def __init__(
        self,
        task: TrainingTask[Any],
        spec: Any,
        graph: DistGraph,
        dist: Dist,
        run_dir: Path | None = None,
        checkpoint_root: Path | None = None,
        progress_configmap: str | None = None,
        metrics: TrainerMetrics | None = None,
    ):
        self.task, self.spec, self.dist = task, spec, dist
        self.metrics = metrics or TrainerMetrics(dist.rank)
        self.val_names = tuple(PREFIX["valid"] + m for m in task.metric_names)
        self.metrics_log = MetricsLog(run_dir, self.val_names) if run_dir and dist.rank == 0 else None
        self.sinks = BackgroundSinks(progress_sinks(run_dir, dist.rank, progress_configmap))
        self.reporter = Reporter(dist.rank, [self.sinks], metrics=self.metrics, metrics_log=self.metrics_log)
        self.checkpoints = Checkpoints(checkpoint_root, spec, graph, dist, task.collective_tables)
        self.profiler = StepProfiler(spec.training.profile_steps, task.device, dist.rank, run_dir, log)
        self.progress = TrainerProgress(epochs=spec.training.epochs)
        self.epoch = self.step = 0  # done
        self.epoch_step = 0  # steps of the running epoch done
        self.loss_sum, self.loss_steps = 0.0, 0.0  # the running epoch's, on this rank
        self.losses: list[torch.Tensor] = []  # its steps' losses not yet in loss_sum (on the device)
        self.passes: list[best_record.Pass] = []  # this timeline's validation passes
        self.best = best_record.Best()
        self.stopped: str | None = None  # why training stopped early, if it did

    @property
    def lower(self) -> bool:
        """The task's first metric is better when lower (an error)."""
        return bool(getattr(self.task, "lower_is_better", False))

    @property
    def min_delta(self) -> float:
        es = self.spec.training.early_stopping
        return es.min_delta if es is not None else 0.0

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            self.sinks.close()

    def _run(self) -> dict[str, Any]:
        tr = self.spec.training
        resumed = self._resume()
        self.task.start(self.step, resumed)
        if self.metrics_log is not None:
            self.metrics_log.open(self.epoch, self.step)
        validation: dict[str, float] | None = None  # the latest validation pass, and its epoch
        evaluated_at = -1
        while self.epoch < tr.epochs:
            window = Throughput()
            self._train_epoch(window)
            window.stop()
            self.epoch, self.epoch_step = self.epoch + 1, 0
            values, self.progress.eval_seconds = None, None
            if self.epoch % tr.eval_every == 0 or self.epoch == tr.epochs:
                began = time.perf_counter()
                validation, evaluated_at = self._evaluate("valid"), self.epoch
                values = {k: validation[k] for k in self.val_names}
                self.progress.eval_seconds = time.perf_counter() - began
            if self._end_epoch(window, values):
                break
        if validation is None or evaluated_at != self.epoch:  # the last model's, evaluated once
            validation = self._evaluate("valid")
        test = self._evaluate("test")
        self.checkpoints.wait()  # the last checkpoint, written while evaluating, is complete
        return self._finish({**validation, **test})

    # ------------------------------------------------------------------------------------ steps

    def _train_epoch(self, window: Throughput) -> None:
        """The running epoch's remaining steps (all of them, unless resumed inside it)."""
        profiler = self.profiler
        profiler.plan(self.task.steps_per_epoch(), self.epoch_step)
        profiler.before_step(self.epoch_step)
        window.exclude(profiler.take_overhead())
        clock = self.metrics.clock(self.task.device)  # sample: the wait for the task's next batch
        cuda_generator = device_generator(self.task.device)
        self.metrics.steps_begin()
        for batch in self.task.batches(self.epoch, self.epoch_step):
            clock.lap("sample")
            seed = step_seed(self.spec.training.seed, self.dist.rank, self.epoch, self.epoch_step)
            torch.default_generator.manual_seed(seed)  # the CPU one the models draw on: 3 us (all: 250)
            if cuda_generator is not None:  # a GPU model's dropout draws on its device's
                cuda_generator.manual_seed(seed)
            loss, samples = self.task.step(batch, clock)
            clock.done()
            profiler.after_step(self.epoch_step)
            window.exclude(profiler.take_overhead())  # measuring, not training
            self._after_step(window, loss.detach(), samples)
            profiler.before_step(self.epoch_step)
            window.exclude(profiler.take_overhead())
            clock.start()
        clock.flush()  # the epoch's stage line needs every step observed
        self.metrics.steps_end()
        profiler.epoch_end()
        window.exclude(profiler.take_overhead())

    def _after_step(self, window: Throughput, loss: torch.Tensor, samples: int) -> None:
        """Count the step; report every task.report_every steps, checkpoint every checkpointInterval
        (and complete the one being written once the shards have written it)."""
        self.checkpoints.poll()
        self.step += 1
        self.epoch_step += 1
        self.losses.append(loss)  # read when needed: reading it each step would wait for the device
        self.loss_steps += 1
        window.add(samples)
        self.metrics.stepped(samples)
        p = self.progress
        if self.step % self.task.report_every == 0:
            p.epoch, p.step, p.loss = self.epoch, self.step, float(loss)
            p.samples_per_second = window.rate(self.dist.world)
            self.reporter.report(p)
        interval = self.spec.training.checkpoint_interval
        if interval and self.step % interval == 0:
            self._checkpoint()

    def _checkpoint(self, best: bool = False) -> None:
        """Checkpoint here (collective), with the running epoch's loss so far over every trainer."""
        if self.checkpoints.root is None:
            return
        self.task.check_pending()  # before any file of the checkpoint is written
        self.profiler.cut()
        total, steps = self.dist.sum([self._loss_sum(), self.loss_steps])
        point = ResumePoint(self.epoch, self.step, self.epoch_step, total, steps)
        self.checkpoints.save(point, self.task.save_state, best)

    def _loss_sum(self) -> float:
        """The running epoch's loss total on this rank: the steps' losses added in step order, as float64
        (so a resumed run's total is the uninterrupted one's), read from the device in one copy."""
        if self.losses:
            for value in torch.stack(self.losses).double().tolist():
                self.loss_sum += value
            self.losses = []
        return self.loss_sum

    # ----------------------------------------------------------------------------------- epochs

    def _evaluate(self, split: Split) -> dict[str, float]:
        return {PREFIX[split] + k: v for k, v in self.task.evaluate(split).items()}

    def _end_epoch(self, window: Throughput, values: dict[str, float] | None) -> bool:
        """An epoch just ended (self.epoch counts it), evaluated when `values` (its validation metrics) is
        given: report it with its mean loss over every trainer, checkpoint on schedule and whenever it is
        the best so far, and say whether to stop early (rank 0 decides, every rank follows)."""
        tr = self.spec.training
        total, count = self.dist.sum([self._loss_sum(), self.loss_steps])
        self.loss_sum, self.loss_steps = 0.0, 0.0
        p = self.progress
        p.epoch, p.step, p.loss = self.epoch, self.step, total / count if count else None
        p.samples_per_second = window.rate(self.dist.world)
        p.evaluation = dict(values or {})
        improved = False
        if values is not None:
            metric = self.val_names[0]
            p.eval_metric, p.eval_value = metric, values[metric]
            this = best_record.Pass(self.epoch, self.step, values[metric])
            self.passes = [*self.passes, this]
            self.best, improved = best_record.update(self.best, this, self.min_delta, self.lower)
            self.checkpoints.record(self.passes)
        self.reporter.report(p, epoch_end=True, evaluated=values is not None)
        if stages := self.metrics.epoch_stages():
            log(f"[trainer] epoch {self.epoch} per step: {stages}; reads: {self.metrics.epoch_reads()}")
        es = tr.early_stopping
        stop = values is not None and es is not None and best_record.should_stop(self.best, es.patience)
        stopping = self.dist.agree(stop)  # collective: every rank, every epoch
        # the model training ends with is always checkpointed: with checkpointInterval not dividing
        # the run's steps, LATEST was the last interval's, some steps before the model whose test
        # metric the run reports (export, predict and infer read another model; --resume retrained
        # those steps instead of saying the run is complete)
        if (
            tr.checkpoint_interval == 0
            or improved
            or self.epoch >= tr.epochs
            or (stopping and es is not None)
        ):
            self._checkpoint(best=improved)
        if not stopping or es is None:
            return False
        self.stopped = best_record.stop_reason(self.best, self.val_names[0], es.patience, es.min_delta)
        if self.dist.rank == 0:
            log(f"[trainer] stopping early after epoch {self.epoch}: {self.stopped}")
        return True

    def _finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """The final report and result: the test metric (of the last model: the one training ended
        with), the epoch it ended at, the best validation pass and its checkpoint, why it stopped early."""
        result["last_epoch"] = self.epoch
        best = self.best.best
        if best is not None:
            result["best_epoch"] = best.epoch
            result[f"best_{self.val_names[0]}"] = best.value
            if self.checkpoints.complete(best.step):
                result["best_checkpoint"] = best_record.checkpoint_name(best.step)
        if self.stopped:
            result["stopped_early"] = self.stopped
        # the final report carries the test metric: in a pod it is what status.progress (and `kubectl
        # get gtr`) shows, there being no result.json beside it
        test_metric = PREFIX["test"] + self.task.metric_names[0]
        p = self.progress
        p.eval_metric, p.eval_value = test_metric, result[test_metric]
        p.metrics, p.state = result, "Succeeded"
        self.reporter.report(p)
        return result

    # ----------------------------------------------------------------------------------- resume

    def _resume(self) -> bool:
        """Continue from the newest checkpoint that checks out, if there is one (whether there was): the
        task's state, the place inside the epoch, the epoch's loss so far (rank 0 carries the sum over
        every trainer) and the validation passes up to it (best.py), then the shards' tables."""
        found = self.checkpoints.newest()
        if found is None:
            return False
        directory, record = found
        self.task.load_state(directory)
        point = ResumePoint.from_record(record, self.task.steps_per_epoch())
        self.epoch, self.step, self.epoch_step = point.epoch, point.step, point.epoch_step
        if self.dist.rank == 0:
            self.loss_sum, self.loss_steps = point.loss_sum, point.loss_steps
        self.passes = self.checkpoints.passes(self.step, self.epoch)
        self.best = best_record.replay(self.passes, self.min_delta, self.lower)
        if self.dist.rank == 0:
            log(f"[trainer] resuming from step {self.step} (epoch {self.epoch}, checkpoint {directory.name})")
        self.checkpoints.restore(directory, self.step, self.best.best)
        return True
