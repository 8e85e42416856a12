"""Checkpoints written while training goes on: a copy-on-write snapshot of a shard's host tables, written
by a background thread within a bounded extra memory.

Why: a checkpoint that writes every row before it answers pauses every trainer for the whole write
(WordNet 2x2: ~1.6 s per checkpoint, a fifth of the run). Here the checkpoint op only arms a snapshot
(no row is copied) and answers; the rows reach disk from a writer thread while pushes go on, and the
checkpoint still holds every table as it was at the one step the trainers paused at:

- a table's rows (and their optimizer state) are cut into chunks; a chunk is PENDING (its live rows are
  still the snapshot's), STAGED (a push was about to change it: its rows were copied aside first),
  WRITING, or WRITTEN (on disk: the live rows may change freely);
- a push, under the table's lock and before it changes a row, preserves every PENDING chunk it touches:
  into staging while the staged bytes stay within the budget, else straight into the file (so the
  extra memory never passes the budget; only such a push pays for writing that chunk);
- the writer writes staged chunks first (to free the budget), then PENDING ones, each copied under the
  lock into one chunk-sized buffer and written outside it, at most `rate` bytes/s when one is set.

Files go into the piece's temporary directory (checkpoint.atomic_dir, entered when the snapshot is
armed), are fsynced, hashed into the manifest and renamed into place only when whole: a piece is
complete or absent, and the checkpoint complete only once the client writes checkpoint.json after every
shard said done. A GPU table is copied on its device under its lock (gpu.freeze) and that copy written
by the same thread after the host tables; where the device has no room for the copy, it is written
within the op (gpu.save_chunked).
An incremental piece (increment.py) is the same, of the changed rows alone: its chunks are of those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.checkpoint import increment
from graphtrain.runtime.checkpoint.chain import ROWS
from graphtrain.runtime.data.cache import atomic_dir
from graphtrain.runtime.dtypes import to_numpy
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.shard import TensorShard

CHUNK_BYTES = 4 << 20  # rows of all of a table's files per chunk: ~1 ms of copy under the lock
STAGING_BYTES = 256 << 20  # default bound on a shard's extra memory for one checkpoint

PENDING, STAGED, WRITING, WRITTEN = 0, 1, 2, 3
FULL = increment.PieceRows()  # a piece of every row

log = logging.getLogger("graphtrain.kvstore.snapshot")


class Aborted(GraphtrainError):
    """The snapshot was abandoned (a restore, a newer checkpoint's failure): its piece is not written."""


def chunk_rows(row_bytes: int, chunk_bytes: int) -> int:
    """Rows per chunk: about `chunk_bytes` of a table's rows and state together, at least one row."""
    return max(1, chunk_bytes // max(1, row_bytes))


def touched(local: np.ndarray, rows_per_chunk: int, chunks: int) -> np.ndarray:
    """Which chunks hold the local rows `local` (a mask: O(ids), no sort)."""
    mask = np.zeros(chunks, dtype=bool)
    if len(local):
        mask[local // rows_per_chunk] = True
    return mask


class StagingBudget:
    """Bytes of staging a snapshot may hold at once (shared by a checkpoint's tables), and the peak."""

    def __init__(self, limit: int):
        self.limit, self.used, self.peak = limit, 0, 0
        self._lock = threading.Lock()

    def take(self, nbytes: int, force: bool = False) -> bool:
        with self._lock:
            if not force and self.used + nbytes > self.limit:
                return False
            self.used += nbytes
            self.peak = max(self.peak, self.used)
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


def _pwrite(fd: int, data: np.ndarray, offset: int) -> None:
    view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _npy_file(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[int, int]:
    """An .npy file of `shape` (its rows to be written in place): (open fd, offset of the first byte)."""
    with open(path, "wb") as f:
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(f, header)
        offset = f.tell()
        f.truncate(offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return os.open(path, os.O_WRONLY), offset


def _width(v: torch.Tensor) -> int:
    """Elements per row of a table or its per-row state (1 for a 1-D one)."""
    return int(np.prod(v.shape[1:], dtype=np.int64))


def _is_global_step(name: str, t: TensorShard) -> bool:
    """The table-wide Adam step: one element, whatever the table's rows (gpu._scalar's rule)."""
    return name == "state.step" and t.config is not None and t.config.step_count == "global"


class TableSnapshot:
    """One table's copy-on-write snapshot into its piece's temporary directory. Armed under the table's
    lock; `preserve` is called by every writer of the table's rows, under that lock, before it writes.
    `plan`: every row, or the changed ones alone (an incremental piece, increment.plan)."""

    def __init__(
        self,
        root: Path,
        t: TensorShard,
        budget: StagingBudget,
        chunk_bytes: int = CHUNK_BYTES,
        plan: increment.PieceRows = FULL,
    ):
        self.t, self.budget, self.root, self.plan = t, budget, root, plan
        self.held = plan.rows  # the local rows the piece holds, ascending (None: all)
        self.keys = None if t.keyed is None else t.keyed.keys()  # a dynamic table's, as its rows now
        # a dynamic table's piece holds its rows in use (0..len(keys)-1), not its whole capacity
        self.n = (t.rows if self.keys is None else len(self.keys)) if plan.rows is None else len(plan.rows)
        # this moment's tensors, config and rounding count (the live table goes on stepping)
        self.view = dataclasses.replace(t, state=dict(t.state), round_steps=t.round_steps.copy())
        named = {"data": t.data, **{f"state.{k}": v for k, v in t.state.items()}}
        self.whole = {n: v.clone() for n, v in named.items() if _is_global_step(n, t) or v.dim() == 0}
        rowed = {n: v for n, v in named.items() if n not in self.whole}
        self.live = {n: to_numpy(v).reshape(t.rows, _width(v)) for n, v in rowed.items()}  # views: no copy
        row_bytes = sum(a.shape[1] * a.itemsize for a in self.live.values())
        self.rows_per_chunk = chunk_rows(row_bytes, chunk_bytes)
        self.chunks = max(1, -(-self.n // self.rows_per_chunk))
        self.state = np.full(self.chunks, PENDING, dtype=np.int8)
        self.staged: dict[int, dict[str, np.ndarray]] = {}
        self.cond = threading.Condition()
        self.cursor = 0  # the writer's next PENDING candidate
        self.preserved = {STAGED: 0, WRITTEN: 0}  # chunks pushes staged, and wrote through (tests, logs)
        self.aborted = False
        self._stack = contextlib.ExitStack()
        self.tmp = self._stack.enter_context(atomic_dir(ckpt.piece_dir(root, t.name, t.lo, t.hi), True))
        self.fds: dict[str, tuple[int, int]] = {}  # name -> (fd, offset of row 0)
        try:
            for n, a in self.live.items():
                self.fds[n] = _npy_file(self.tmp / f"{n}.npy", a.dtype, (self.n, *rowed[n].shape[1:]))
        except BaseException:
            self._close_files()
            self._stack.__exit__(*sys.exc_info())
            raise

    def _span(self, i: int) -> tuple[int, int]:
        a = i * self.rows_per_chunk
        return a, min(self.n, a + self.rows_per_chunk)

    def _bytes(self, i: int) -> int:
        a, b = self._span(i)
        return sum((b - a) * x.shape[1] * x.itemsize for x in self.live.values())

    def _write(self, i: int, rows: dict[str, np.ndarray]) -> None:
        a, _ = self._span(i)
        for n, arr in rows.items():
            fd, offset = self.fds[n]
            _pwrite(fd, arr, offset + a * self.live[n].shape[1] * self.live[n].itemsize)

    def _rows(self, i: int, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Chunk i's live rows: views (copies into `out`, or of an incremental piece's rows)."""
        a, b = self._span(i)
        if self.held is None and out is None:
            return {n: x[a:b] for n, x in self.live.items()}
        if out is None:
            return {n: x[self.held[a:b]] for n, x in self.live.items()}
        for n, x in self.live.items():
            if self.held is None:
                np.copyto(out[n][: b - a], x[a:b])
            else:
                np.take(x, self.held[a:b], axis=0, out=out[n][: b - a])
        return {n: buf[: b - a] for n, buf in out.items()}

    def preserve(self, local: np.ndarray) -> None:
        """Keep the snapshot's rows of every chunk `local` touches (call under the table's lock, before
        writing those rows): staged in memory within the budget, else written to the file now."""
        if self.held is not None:
            local = increment.positions(self.held, local)
        elif self.keys is not None:
            local = local[local < self.n]  # rows keys took since the snapshot: not the snapshot's
        mask = touched(local, self.rows_per_chunk, self.chunks)
        through: list[int] = []
        with self.cond:
            for i in np.flatnonzero(mask & (self.state == PENDING)).tolist():
                if self.budget.take(self._bytes(i)):
                    self.staged[i] = {n: r.copy() for n, r in self._rows(i).items()}
                    self.state[i] = STAGED
                    self.preserved[STAGED] += 1
                else:
                    self.state[i] = WRITING
                    self.preserved[WRITTEN] += 1
                    through.append(i)
        try:
            for i in through:  # the rows are the snapshot's: the caller holds the lock and writes after
                self._write(i, self._rows(i))
        finally:
            with self.cond:
                self.state[through] = WRITTEN
                self.cond.notify_all()

    def _next(self) -> tuple[int, dict[str, np.ndarray] | None] | None:
        """The writer's next chunk: a staged one (with its rows) first, else the next PENDING one (None
        rows); None when every chunk is written."""
        with self.cond:
            while True:
                if self.aborted:
                    raise Aborted(f"checkpoint of {self.t.name!r} abandoned")
                if self.staged:
                    i, rows = self.staged.popitem()
                    self.state[i] = WRITING
                    return i, rows
                while self.cursor < self.chunks and self.state[self.cursor] != PENDING:
                    self.cursor += 1
                if self.cursor < self.chunks:
                    return self.cursor, None
                if (self.state == WRITTEN).all():
                    return None
                self.cond.wait(0.05)  # a push is writing a chunk through, or staging one

    def drain(self, buffers: dict[str, np.ndarray], pace: Pace) -> None:
        """Write every chunk (the writer thread), then detach from the table: pushes stop preserving."""
        while (item := self._next()) is not None:
            i, rows = item
            if rows is not None:
                self._write(i, rows)
                self.budget.give(self._bytes(i))
            else:
                with self.t.lock:
                    with self.cond:
                        if self.state[i] != PENDING:
                            continue  # a push took it meanwhile
                        self.state[i] = WRITING
                    rows = self._rows(i, buffers)
                self._write(i, rows)
            with self.cond:
                self.state[i] = WRITTEN
            pace.wrote(self._bytes(i))
        with self.t.lock:
            if self.t.snapshot is self:
                self.t.snapshot = None

    def commit(self) -> dict[str, Any]:
        """The table-wide values, the manifest and the rename into place (after drain)."""
        for n, v in self.whole.items():
            np.save(self.tmp / f"{n}.npy", v.numpy())
        if self.held is not None:
            np.save(self.tmp / ROWS, self.held)
        ckpt.save_keys(self.tmp, self.t, self.keys)
        self._close_files()
        ckpt.finish_piece(self.tmp, self.view, self.plan.delta)
        self._stack.close()  # fsync every file, rename the piece into place
        entry = ckpt.piece_entry(self.root, self.t.name, self.t.lo, self.t.hi)
        return entry if self.plan.delta is None else {**entry, "base": self.plan.delta["base"]}

    def nbytes(self) -> int:
        """Bytes of rows the piece holds (its files less headers and table-wide values)."""
        return sum(self.n * x.shape[1] * x.itemsize for x in self.live.values())

    def abandon(self) -> None:
        """Remove the temporary directory; the table no longer preserves for this snapshot."""
        with self.cond:
            self.aborted = True
            self.cond.notify_all()
        with self.t.lock:
            if self.t.snapshot is self:
                self.t.snapshot = None
        self._close_files()
        with contextlib.suppress(Exception):
            self._stack.__exit__(Aborted, Aborted("abandoned"), None)

    def _close_files(self) -> None:
        for fd, _ in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = {}


class Pace:
    """The writer's bytes/s bound (`rate` 0: none): sleeps after a chunk that put it ahead."""

    def __init__(self, rate: float):
        self.rate, self.start, self.bytes = rate, time.monotonic(), 0

    def wrote(self, nbytes: int) -> None:
        self.bytes += nbytes
        if self.rate > 0:
            ahead = self.bytes / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                time.sleep(ahead)


@dataclasses.dataclass
class Status:
    """What a background checkpoint's status request answers."""

    path: str
    state: str = "writing"  # writing | done | failed
    error: str = ""
    pieces: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    staged_peak: int = 0
    row_bytes: int = 0  # bytes of rows and state written (host tables)
    incremental: int = 0  # host tables written as deltas (of all the snapshot's)

    def reply(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class BackgroundCheckpoint:
    """One checkpoint of a shard's host tables, armed now (every table's snapshot under its lock) and
    written by a thread; `status` says how it went. `pieces`: those already written within the op (GPU
    tables that could not be frozen), listed with the rest once done. `frozen`: GPU tables' frozen copies
    (gpu.freeze) with the writer of each one's piece (given a check of abort() it polls per chunk),
    written after the host tables and let go as each is written. `full_every`: the longest chain of
    incremental pieces (increment.py; 1: every piece full)."""

    def __init__(
        self,
        label: str,
        root: Path,
        tables: list[TensorShard],
        pieces: list[dict[str, Any]],
        staging_bytes: int = STAGING_BYTES,
        rate: float = 0.0,
        full_every: int = increment.FULL_EVERY,
        chunk_bytes: int = CHUNK_BYTES,
        frozen: list[tuple[TensorShard, Callable[[TensorShard, Callable[[], bool]], dict[str, Any]]]]
        | None = None,
    ):
        self.status = Status(label, pieces=list(pieces))
        self.frozen = list(frozen or [])
        self.aborted = False
        self.budget = StagingBudget(staging_bytes)
        self.rate = rate
        self.snaps: list[TableSnapshot] = []
        try:
            for t in tables:
                with t.lock:
                    plan = increment.plan(t, root, full_every)
                    snap = TableSnapshot(root, t, self.budget, chunk_bytes, plan)
                    t.snapshot = snap
                self.snaps.append(snap)
        except BaseException:
            for snap in self.snaps:
                snap.abandon()
            raise
        self.status.row_bytes = sum(s.nbytes() for s in self.snaps) + sum(
            gpu.table_bytes(t) for t, _ in self.frozen
        )
        self.status.incremental = sum(s.held is not None for s in self.snaps)
        self.thread = threading.Thread(target=self._run, name=f"checkpoint {label}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        start, pace = time.monotonic(), Pace(self.rate)
        done = 0
        try:
            for snap in self.snaps:
                buffers = {
                    n: np.empty((snap.rows_per_chunk, x.shape[1]), x.dtype) for n, x in snap.live.items()
                }
                held = sum(b.nbytes for b in buffers.values())
                self.budget.take(held, force=True)  # the writer's own chunk counts against the bound
                try:
                    snap.drain(buffers, pace)
                finally:
                    self.budget.give(held)
                    del buffers
                self.status.pieces.append(snap.commit())
                done += 1
            while self.frozen:
                if self.aborted:
                    raise Aborted("the checkpoint was abandoned")
                table, write = self.frozen[0]
                self.status.pieces.append(write(table, lambda: self.aborted))  # checked per chunk
                self.frozen.pop(0)  # its copy on the device is let go
        except BaseException as exc:  # noqa: BLE001 - reported by the status request
            self.frozen.clear()
            for snap in self.snaps[done:]:
                snap.abandon()
            self.status.error = " ".join(str(exc).split()) or type(exc).__name__
            self.status.state = "failed"
        else:
            self.status.state = "done"
        self.status.seconds = time.monotonic() - start
        self.status.staged_peak = self.budget.peak
        s = self.status
        if s.state == "done":
            log.info(
                "checkpoint %s written in the background: %.2f s, staged peak %d bytes, %d bytes of rows, "
                "%d of %d tables incremental",
                s.path,
                s.seconds,
                s.staged_peak,
                s.row_bytes,
                s.incremental,
                len(self.snaps),
            )
        else:
            log.warning("checkpoint %s not written: %s", s.path, s.error)

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def wait(self, timeout: float) -> bool:
        """Whether the write ended within `timeout` seconds."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def abort(self, timeout: float = 30.0) -> None:
        """Abandon the write (no piece of it stays) and wait for the thread."""
        self.aborted = True
        for snap in self.snaps:
            with snap.cond:
                snap.aborted = True
                snap.cond.notify_all()
        self.wait(timeout)
