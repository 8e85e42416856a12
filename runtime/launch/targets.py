"""The Prometheus file_sd targets of a local run (pure but for the atomic write): every process' metrics
port on 127.0.0.1 with the labels a Kubernetes scrape would give it (job, namespace, training; shard or
rank), so the same dashboards and alerts work on a laptop run. Point a local Prometheus at
<run_dir>/prometheus/targets.json with `file_sd_configs` (honor_labels: true, see the README)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from graphtrain.contract.telemetry import JOB_API, JOB_LAUNCHER, JOB_SHARD, JOB_TRAINER
from graphtrain.runtime.data.cache import atomic_file

__all__ = [
    "JOB_API",
    "JOB_LAUNCHER",
    "JOB_SHARD",
    "JOB_TRAINER",
    "TARGETS_FILE",
    "HOST",
    "document",
    "target",
]

TARGETS_FILE = "prometheus/targets.json"  # relative to the run directory
HOST = "127.0.0.1"

Target = dict[str, object]


def target(
    job: str, port: int, namespace: str, training: str, labels: Mapping[str, str] | None = None
) -> Target:
    """One file_sd entry: the process at HOST:port and its labels."""
    return {
        "targets": [f"{HOST}:{port}"],
        "labels": {"job": job, "namespace": namespace, "training": training, **(labels or {})},
    }


def document(
    namespace: str,
    training: str,
    shards: Sequence[int | None],
    trainers: Sequence[int | None],
    launcher: int | None,
    extra: Sequence[tuple[str, int, Mapping[str, str]]] = (),
) -> list[Target]:
    """The targets file of a run: shard i at shards[i], trainer r at trainers[r], the launcher, then the
    extra targets (job, port, labels) callers added (the API of `graphtrain run --api`). A process whose
    port is not known yet (None) is left out until it is."""
    doc = [target(JOB_SHARD, p, namespace, training, {"shard": str(i)}) for i, p in enumerate(shards) if p]
    doc += [
        target(JOB_TRAINER, p, namespace, training, {"rank": str(r)}) for r, p in enumerate(trainers) if p
    ]
    if launcher:
        doc.append(target(JOB_LAUNCHER, launcher, namespace, training))
    doc += [target(job, port, namespace, training, labels) for job, port, labels in extra]
    return doc


def write(run_dir: Path, doc: list[Target]) -> Path:
    """Replace <run_dir>/prometheus/targets.json atomically (Prometheus never reads half a file)."""
    path = run_dir / TARGETS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write((json.dumps(doc, indent=1) + "\n").encode())
    return path
