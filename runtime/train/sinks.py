"""Where a trainer's progress reports go, in the spec's Progress schema (contract.reporting): rank 0's
<run_dir>/progress.json and progress-history.json (FileSink, for the local launcher), every rank's
<run_dir>/trainers/rank-<i>.json (HeartbeatFileSink) and, in a pod, the progress ConfigMap
(progress_k8s.ConfigMapSink, for the operator). Each sink decides how often it writes."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import Progress
from graphtrain.runtime.data.cache import atomic_file, write_json


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
