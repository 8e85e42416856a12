"""A training's checkpoints, seen from the trainers: taking one, finding the one to resume from, and the
BEST marker and validation record beside them.

A checkpoint is the shard servers' tables (runtime/checkpoint) plus the trainers' part, written by rank 0
into the same directory: trainer.json (the ResumePoint and the model record) and the task's own state
(a dense model's, dense.py). It is complete when both are; its checkpoint.json records the sha256 of
the trainers' files too, so resuming checks every file and skips a damaged latest checkpoint for the
newest one that checks out. A resumed trainer first checks that the checkpoint was trained with the
spec's model (resumable.model_record): a changed model.hiddenDim is one line naming it, not a size
mismatch deep in torch.

A ResumePoint says where in training a checkpoint was taken, down to the step inside the running epoch
and that epoch's loss so far, so one taken mid-epoch (training.checkpointInterval in steps) resumes at
the next batch of that epoch and reports the epoch's whole mean loss.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.collective import checkpoint as collective_ckpt
from graphtrain.runtime.data.cache import hash_tree, write_json
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.storage import placement
from graphtrain.runtime.train import best as best_record
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.reporter import log
from graphtrain.runtime.train.resumable import check_resumable, model_record

TRAINER_FILE = "trainer.json"
KEEP_CHECKPOINTS = 2  # the latest and the one before it (in case the latest's files are damaged)
POLL_SECONDS = 0.25  # how often rank 0 asks the shards, between steps, whether a checkpoint is written
WRITE_TIMEOUT = 600.0  # the longest rank 0 waits for a checkpoint's background write to end
FREEZE_SHARE = 0.5  # of the host's available memory the trainers' frozen collective pieces may take


REPLACED = ".replaced"  # complete checkpoints a resumed run wrote again: kept, hidden from the choice


def set_aside(directory: Path) -> None:
    """Make room for a checkpoint at `directory`'s step. One that is complete there was skipped on resume
    (damaged: a changed byte, rows of NaN) or never marked LATEST: it moves to <root>/.replaced/, kept for
    the user to look into (resuming never deletes what a run wrote); an incomplete one (a write cut
    short) is removed, since nothing reads it."""
    if not (directory / ckpt.TOP).exists():
        shutil.rmtree(directory)
        return
    aside = directory.parent / REPLACED
    aside.mkdir(exist_ok=True)
    kept = aside / directory.name
    n = 0
    while kept.exists():  # replaced before, by an earlier resume
        n += 1
        kept = aside / f"{directory.name}.{n}"
    directory.rename(kept)
    log(f"[trainer] checkpoint {directory.name} is taken again: the one there before is kept as {kept}")


@dataclass
class Pending:
    """A checkpoint whose tables the shard servers are writing in the background (rank 0's): made
    complete (checkpoint.json, LATEST, BEST when `best`, pruning) once every shard says done and every
    trainer's piece of a collective table is in place."""

    tag: str
    extra: dict[str, Any]
    pieces: list[dict[str, Any]]  # written by the trainers (collective tables), some beside training
    best: bool
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class ResumePoint:
    """Where a checkpoint was taken: epochs and steps done, the steps of the running epoch done (0 at an
    epoch's end) and that epoch's loss so far, summed over every trainer, with its count of steps."""

    epoch: int
    step: int
    epoch_step: int = 0
    loss_sum: float = 0.0
    loss_steps: float = 0.0

    def record(self, spec: Any) -> dict[str, Any]:
        """trainer.json: this point and the model it was trained with."""
        return {
            "epoch": self.epoch,
            "step": self.step,
            "epoch_step": self.epoch_step,
            "epoch_loss": [self.loss_sum, self.loss_steps],
            "model": model_record(spec),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any], steps_per_epoch: int) -> ResumePoint:
        """The point a trainer.json records. A record from before epoch_step was kept places the step by
        `steps_per_epoch` (the epochs done took that many each), its loss so far unknown."""
        epoch, step = int(record["epoch"]), int(record["step"])
        within = record.get("epoch_step")
        if within is None:
            within = min(max(step - epoch * steps_per_epoch, 0), steps_per_epoch)
        loss_sum, loss_steps = record.get("epoch_loss") or (0.0, 0.0)
        return cls(epoch, step, int(within), float(loss_sum), float(loss_steps))


class Checkpoints:
    """The checkpoints under `root` (None: a training that takes none). save() and resume() are
    collective: every rank calls them at the same point, rank 0 writes and reads for all."""

    def __init__(
        self,
        root: Path | None,
        spec: Any,
        graph: DistGraph,
        dist: Dist,
        collective: Sequence[CollectiveEmbedding] = (),
    ):
        self.root, self.spec, self.graph, self.dist = root, spec, graph, dist
        self.collective = list(collective)  # tables on the trainers: every rank writes its piece
        self.saved_step: int | None = None  # the step of the last checkpoint this trainer took
        self.pending: Pending | None = None  # rank 0: the checkpoint being written in the background
        self.writer: collective_ckpt.Writer | None = None  # this rank's collective pieces being written
        self._next_poll = 0.0

    def save(self, point: ResumePoint, write_state: Callable[[Path], None], best: bool = False) -> None:
        """All trainers pause (no pushes in flight) while rank 0 writes the trainers' part (trainer.json,
        then `write_state` into the directory) and the shard servers snapshot their tables; training goes
        on while the servers write them (copy-on-write: checkpoint/snapshot.py). Each trainer's pieces of
        its collective tables are redealt into host memory in the pause and written by a thread of its
        own beside training (where memory allows; else in the pause). LATEST moves only once
        every piece is written (poll, finish), and BEST too when `best` (the best validation pass so
        far). A step already checkpointed is not saved again: only the BEST marker moves. One checkpoint
        is written at a time: rank 0 completes the previous one first."""
        if self.root is None:
            return
        tag = best_record.checkpoint_name(point.step)
        if self.saved_step == point.step:  # the same on every rank: no barrier is skipped by one alone
            if best and self.dist.rank == 0:
                if self.pending is not None and self.pending.tag == tag:
                    self.pending.best = True  # marked once it is complete
                else:
                    ckpt.mark_best(self.root, tag)
            return
        paused = time.perf_counter()
        self._join_writer()  # one checkpoint's frozen copy at a time
        if self.dist.rank == 0:
            self.finish()
        self.graph.client.settle()  # this trainer's pushes in flight are applied before the barrier
        self.dist.barrier()
        directory = self.root / tag
        extra: dict[str, Any] = {}
        if self.dist.rank == 0:
            meta = point.record(self.spec)
            if directory.exists():  # one this run resumed from before, or a write cut short
                set_aside(directory)
            directory.mkdir(parents=True)
            write_json(directory / TRAINER_FILE, meta)
            write_state(directory)
            extra = {
                "trainer": meta,
                "files": hash_tree(directory),  # the trainers' files, checked on resume
                # which partition orders the node-keyed rows: `graphtrain export` reads it
                "partition": ckpt.partition_record(
                    self.graph.config,
                    directory,
                    {t.name: str(t.keys) for t in self.spec.embeddings},
                    {t.name: t.node_types for t in self.spec.embeddings if t.node_types},
                ),
            }
        pieces: list[dict[str, Any]] = []
        background = self.graph.client.background_checkpoints
        if self.collective:  # every rank writes its piece of each, once rank 0 has made the directory
            self.dist.barrier()
            jobs: list[collective_ckpt.Job] = []
            if background:  # redealt into host memory now, written on a thread beside training
                # every trainer may be on this host, each freezing its share at once
                room = int(FREEZE_SHARE * placement.free_bytes(placement.CPU)) // self.dist.world
                pieces, jobs = collective_ckpt.freeze(self.collective, directory, room)
            else:
                pieces = collective_ckpt.save(self.collective, directory)
            self.dist.barrier()
            if jobs:
                self.writer = collective_ckpt.Writer(directory, jobs)
        if self.dist.rank == 0 and background:
            # the snapshot is taken before the barrier lets any trainer push again
            self.graph.client.checkpoint_begin(tag)
            self.pending = Pending(tag, extra, pieces, best)
        elif self.dist.rank == 0:  # standalone's host tables: written before training goes on
            self.graph.client.checkpoint(tag, extra=extra, root=self.root, pieces=pieces)
            ckpt.mark_latest(self.root, tag)
            if best:
                ckpt.mark_best(self.root, tag)
            ckpt.prune(self.root, KEEP_CHECKPOINTS)
        self.dist.barrier()
        self.saved_step = point.step
        if self.dist.rank == 0:  # what a checkpoint costs training (bench/checkpoint.py reads it)
            log(f"[trainer] checkpoint {tag}: training paused {1000 * (time.perf_counter() - paused):.1f} ms")

    def poll(self) -> None:
        """Between steps (rank 0; a no-op elsewhere and when nothing is being written): complete the
        checkpoint being written once every shard has written its part; asks at most every
        POLL_SECONDS."""
        if self.pending is None or time.monotonic() < self._next_poll:
            return
        self._next_poll = time.monotonic() + POLL_SECONDS
        self._complete_if_written()

    def finish(self) -> None:
        """Rank 0: wait for the checkpoint being written (if any) and complete it.

        Raises:
            GraphtrainError: a shard could not write it, or it took over WRITE_TIMEOUT seconds.
        """
        deadline = time.monotonic() + WRITE_TIMEOUT
        while self.pending is not None and not self._complete_if_written():
            if time.monotonic() > deadline:
                raise GraphtrainError(
                    f"checkpoint {self.pending.tag}: not written after {WRITE_TIMEOUT:.0f} s"
                )
            time.sleep(0.02)

    def wait(self) -> None:
        """Every checkpoint taken is complete (collective: rank 0 finishes, the others wait for it)."""
        if self.root is None:
            return
        self._join_writer()
        if self.dist.rank == 0:
            self.finish()
        self.dist.barrier()

    def _join_writer(self) -> None:
        """Wait for this rank's collective pieces being written, if any.

        Raises:
            GraphtrainError: they could not be written, or not within WRITE_TIMEOUT seconds.
        """
        writer, self.writer = self.writer, None
        if writer is None:
            return
        if not writer.join(WRITE_TIMEOUT):
            raise GraphtrainError(f"checkpoint: collective pieces not written after {WRITE_TIMEOUT:.0f} s")
        if writer.error:
            raise GraphtrainError(f"checkpoint: collective pieces {writer.error}")

    def _complete_if_written(self) -> bool:
        """Complete the pending checkpoint if every shard has written its part: checkpoint.json listing
        every piece, then LATEST, BEST and pruning. Whether it is complete."""
        p = self.pending
        assert p is not None and self.root is not None
        written = self.graph.client.checkpoint_done(p.tag)
        if written is None or not collective_ckpt.written(self.root / p.tag, p.pieces):
            return False
        ckpt.write_top(self.root / p.tag, written + p.pieces, self.graph.client.num_shards, p.extra)
        ckpt.mark_latest(self.root, p.tag)
        if p.best:
            ckpt.mark_best(self.root, p.tag)
        ckpt.prune(self.root, KEEP_CHECKPOINTS)
        self.pending = None
        took = time.monotonic() - p.started
        log(f"[trainer] checkpoint {p.tag} complete: written in {took:.2f} s beside training")
        return True

    def newest(self) -> tuple[Path, dict[str, Any]] | None:
        """The latest complete checkpoint that checks out and its trainer record, on every rank (rank 0
        picks it, saying which damaged ones it skipped); None when there is none.

        Raises:
            GraphtrainError: the checkpoint was trained with another model (the fields named).
        """
        if self.root is None:
            return None
        name = ""
        if self.dist.rank == 0:  # one rank reads every file, and all take its choice
            latest, skipped = ckpt.latest_verified(self.root)
            for said in skipped:
                log(f"[trainer] {said}")
            name = latest.name if latest is not None else ""
        name = self.dist.broadcast_text(name)
        if not name:
            return None
        directory = self.root / name
        record = json.loads((directory / TRAINER_FILE).read_text())
        check_resumable(record.get("model"), self.spec, name)  # every rank reads one file: all stop alike
        return directory, record

    def restore(self, directory: Path, step: int, best: best_record.Pass | None) -> None:
        """Every shard restores the checkpoint in `directory`, of `step` (servers that survived a failure
        are ahead of it), and BEST names this timeline's best checkpoint (`best`: a pass of an abandoned
        timeline, after the checkpoint resumed from, may have moved it). Collective."""
        assert self.root is not None
        self.saved_step = step
        for table in self.collective:  # every rank its own rows, whatever world size wrote them
            if not collective_ckpt.restore(table, directory, verify=False):  # newest() verified it
                raise GraphtrainError(f"checkpoint {directory.name} holds no table {table.name!r}")
        if self.dist.rank == 0:
            self.graph.client.restore(directory.name)
            if best is None:
                (self.root / ckpt.BEST).unlink(missing_ok=True)
            elif self.complete(best.step):
                ckpt.mark_best(self.root, best_record.checkpoint_name(best.step))
        self.dist.barrier()

    def complete(self, step: int) -> bool:
        """Whether the checkpoint of `step` is there, whole."""
        return self.root is not None and (self.root / best_record.checkpoint_name(step) / ckpt.TOP).exists()

    def passes(self, step: int, epoch: int | None = None) -> list[best_record.Pass]:
        """The validation passes recorded up to `step` and `epoch` epochs done (a resumed timeline's)."""
        return [] if self.root is None else best_record.until(best_record.load(self.root), step, epoch)

    def record(self, passes: Sequence[best_record.Pass]) -> None:
        """Keep this timeline's validation passes beside the checkpoints (rank 0)."""
        if self.root is not None and self.dist.rank == 0:
            best_record.save(self.root, passes)
