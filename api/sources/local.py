"""Trainings read from what `graphtrain run` writes: one run directory, or a directory of them.

A run directory holds graphtraining.json (the document it runs), status.json (GraphTraining status
schema, rewritten by the launcher every half second), progress.json (rank 0's latest report),
progress-history.json (one entry per epoch) and trainers/rank-<i>.json (each rank's latest report, its
heartbeat); spec/rundir.py and spec/reporting.py name them.

Security: a request's namespace and name never reach the filesystem. The source lists the runs
directory itself, reads each run's identity from its own files, and looks a request up in that index;
`../../etc` is a name no run has (and the routes refuse it before).

Speed: every file is parsed once per version. A bounded cache keeps each parsed file with its stat
signature (inode, size, mtime): a request for one training costs a stat per file it reads, and a
launcher's atomic replace (a new inode) is seen at once. It is bounded in files and in their bytes.
Misses of one file version share one read and parse (flights.py): 32 clients opening 300 cold
500-epoch histories in the same order read 1,333 files (up to 16 per history), now 300.
Listing the directory and reading every run's identity costs ~35 us a run, so the list and the name
index are kept for SCAN_SECONDS (1 s): a
training's own endpoints are current, the list and a run just started may be a second late.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from graphtrain.api import models
from graphtrain.api.encoding import GzipAnswer
from graphtrain.api.sources.answers import ENTRY_BYTES
from graphtrain.api.sources.base import ListQuery, NotFound, SourceUnavailable, page
from graphtrain.api.sources.flights import Flights
from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import GraphTraining, GraphTrainingStatus, Progress, SpecError
from graphtrain.contract.spec import parse as parse_document

log = logging.getLogger("graphtrain.api")
T = TypeVar("T")
CACHE_ENTRIES = 8192  # parsed files kept (a run has about 3 + its ranks')
# and at most this many of their bytes (each file's size + ENTRY_BYTES): 8192 files of up to
# MAX_FILE_BYTES each (a history's answer is as large as its file) would be 128 GB; ~1000 histories
CACHE_BYTES = 128 << 20
SCAN_SECONDS = 1.0  # the list and the name -> directory index are at most this old
SOURCE = "graphtrain-run"
MAX_FILE_BYTES = 16 << 20  # a run's largest file, its history of 500 entries, is ~125 KB
FLIGHT_SECONDS = 30.0  # a caller waits at most this long for another's read of the same file


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file, at most MAX_FILE_BYTES, never through a symbolic link and never
    waiting on a FIFO or device swapped in after the lstat.

    Raises:
        OSError: not such a file, or unreadable.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return data


class FileCache:
    """Parsed files, each kept with the stat signature it was read at; least recently used dropped
    beyond `entries`. Thread-safe (the routers run in a thread pool)."""

    def __init__(self, entries: int = CACHE_ENTRIES, max_bytes: int = CACHE_BYTES):
        self.entries, self.max_bytes = entries, max_bytes
        self._items: OrderedDict[tuple[Path, str], tuple[tuple[int, int, int], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0  # the kept files' cost(): at most max_bytes
        self.reads: Flights[Any] = Flights(wait=FLIGHT_SECONDS)  # one read per missed file version

    @staticmethod
    def cost(sig: tuple[int, int, int]) -> int:
        """What a kept file counts against max_bytes: its size (sig[1]) and its entry."""
        return sig[1] + ENTRY_BYTES

    def load(self, path: Path, parse: Callable[[bytes], T]) -> T | None:
        """`parse` of the file's bytes, None when the file is absent or unreadable."""
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None  # a FIFO blocked a reader (every request behind it), a link leads elsewhere
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        key = (path, parse.__qualname__)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] == sig:
                self._items.move_to_end(key)
                return hit[1]
        try:
            return self.reads.run((key, sig), lambda: self._read(path, key, sig, parse))
        except OSError:
            return None

    def _read(
        self, path: Path, key: tuple[Path, str], sig: tuple[int, int, int], parse: Callable[[bytes], T]
    ) -> T:
        """Read, parse and keep the file (one caller per version: its flight's)."""
        value = parse(read_regular(path))
        with self._lock:
            old = self._items.pop(key, None)
            self.nbytes += self.cost(sig) - (self.cost(old[0]) if old else 0)
            self._items[key] = (sig, value)
            while len(self._items) > self.entries or self.nbytes > self.max_bytes:
                dropped, _ = self._items.popitem(last=False)[1]
                self.nbytes -= self.cost(dropped)
        return value


# --------------------------------------------------------------------------- parsers (pure, bytes in)


def parse_spec(data: bytes) -> GraphTraining | None:
    try:
        return parse_document(json.loads(data))
    except (ValueError, RecursionError, SpecError):  # RecursionError: nested too deep
        return None


def parse_status(data: bytes) -> GraphTrainingStatus | None:
    try:
        return GraphTrainingStatus.model_validate(json.loads(data))
    except (ValueError, RecursionError, ValidationError):
        return None


def parse_report(data: bytes) -> Progress | None:
    return reporting.decode(data)


def parse_history(data: bytes) -> GzipAnswer:
    """The /history answer's bytes, kept in place of the decoded entries (~7 x smaller), with their gzip
    form (~10 % more, not counted in CACHE_BYTES: the file's size stands for both)."""
    return GzipAnswer(models.history_answer(data))


@dataclass(frozen=True)
class Scan:
    """The runs directory as last read: which directory holds which training, and their summaries."""

    taken: float
    index: dict[tuple[str, str], Path]
    summaries: list[models.TrainingSummary]


class LocalSource:
    """The runs under `runs_root` (each subdirectory that holds a status.json or a graphtraining.json),
    or the one run in `run_dir` (`graphtrain run --api`: the API may start before the run wrote a file)."""

    def __init__(self, runs_root: Path | None = None, *, run_dir: Path | None = None):
        if (runs_root is None) == (run_dir is None):
            raise ValueError("give runs_root or run_dir")
        self.runs_root, self.run_dir = runs_root, run_dir
        self.files = FileCache()
        self._scanned: Scan | None = None
        self._scan_lock = threading.Lock()

    # ------------------------------------------------------------------------------ discovery

    def _run_dirs(self) -> list[Path]:
        if self.run_dir is not None:
            return [self.run_dir]
        assert self.runs_root is not None
        try:
            entries = list(os.scandir(self.runs_root))
        except OSError as exc:
            raise SourceUnavailable(f"cannot read the runs directory: {exc.strerror}") from None
        found = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                path = Path(entry.path)
                if (path / rundir.STATUS_FILE).exists() or (path / rundir.SPEC_FILE).exists():
                    found.append(path)
        return found

    def _identity(self, path: Path) -> tuple[models.Metadata, GraphTraining | None]:
        gt = self.files.load(path / rundir.SPEC_FILE, parse_spec)
        status = self._status(path)
        meta = models.Metadata(
            namespace=(gt.metadata.namespace if gt else None) or "default",
            name=gt.metadata.name if gt else path.name,
            labels=dict(gt.metadata.labels) if gt else {},
            creation_timestamp=status.start_time,
        )
        return meta, gt

    def _status(self, path: Path) -> GraphTrainingStatus:
        return self.files.load(path / rundir.STATUS_FILE, parse_status) or GraphTrainingStatus()

    def _scan(self) -> Scan:
        """Every run: (namespace, name) -> run directory and its summary; where two directories run
        the same training, the one whose status was written last."""
        found: dict[tuple[str, str], tuple[int, Path, models.TrainingSummary]] = {}
        for path in self._run_dirs():
            meta, _ = self._identity(path)
            if not re.match(models.DNS_LABEL, meta.name):
                continue  # a directory named like no training (Bad_Dir) and no spec naming it
            key = (meta.namespace, meta.name)
            try:
                written = os.stat(path / rundir.STATUS_FILE).st_mtime_ns
            except OSError:
                written = 0
            if key not in found or written > found[key][0]:
                found[key] = (written, path, models.summary(meta, self._status(path)))
        return Scan(time.monotonic(), {k: v[1] for k, v in found.items()}, [v[2] for v in found.values()])

    def _current(self) -> Scan:
        """The last scan, made again once older than SCAN_SECONDS (one thread scans, others wait)."""
        scan = self._scanned
        if scan is None or time.monotonic() - scan.taken > SCAN_SECONDS:
            with self._scan_lock:
                scan = self._scanned
                if scan is None or time.monotonic() - scan.taken > SCAN_SECONDS:
                    scan = self._scanned = self._scan()
        return scan

    def _find(self, namespace: str, name: str) -> Path:
        path = self._current().index.get((namespace, name))
        if path is None:
            raise NotFound(f"no training {namespace}/{name}")
        return path

    # ---------------------------------------------------------------------------------- reads

    def list_trainings(self, query: ListQuery) -> models.TrainingList:
        return page(self._current().summaries, query)

    def get_training(self, namespace: str, name: str) -> models.TrainingResource:
        path = self._find(namespace, name)
        meta, gt = self._identity(path)
        status = self._status(path)
        return models.TrainingResource(
            metadata=meta,
            spec=models.spec_summary(gt.spec) if gt else None,
            status=status,
            trainers=self._trainers(path, gt, status),
        )

    def _trainers(
        self, path: Path, gt: GraphTraining | None, status: GraphTrainingStatus
    ) -> list[models.TrainerStatus]:
        world = gt.spec.trainers.replicas if gt else 1
        trainers = []
        for rank in range(world):
            report = self.files.load(path / rundir.rank_file(rank), parse_report)
            if report is None and rank == 0:  # before the heartbeat files: rank 0's progress.json
                report = self.files.load(path / rundir.PROGRESS_FILE, parse_report)
            trainers.append(
                models.TrainerStatus(
                    rank=rank,
                    state=models.trainer_state(status.phase, report is not None),
                    restarts=status.restarts,  # a local run restarts every trainer together
                    last_heartbeat=report.updated_at if report else None,
                    progress=report,
                )
            )
        return trainers

    def events(self, namespace: str, name: str) -> list[models.TrainingEvent]:
        return models.condition_events(self._status(self._find(namespace, name)), SOURCE)

    def history(self, namespace: str, name: str) -> bytes:
        path = self._find(namespace, name)
        return self.files.load(path / rundir.HISTORY_FILE, parse_history) or models.history_answer(None)

    def check(self) -> None:
        where = self.run_dir if self.run_dir is not None else self.runs_root
        assert where is not None
        if self.run_dir is not None and not where.exists():
            return  # `graphtrain run --api`: the launcher makes it in a moment
        if not os.access(where, os.R_OK | os.X_OK):
            raise SourceUnavailable(f"cannot read {where}")
