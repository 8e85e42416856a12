"""What a launch takes over from the launches before it in the same run directory: the partition,
while the graph and partition settings and the input files' contents are unchanged, and on --resume
the newest checkpoint whose files all check out.

The partition is kept beside a settings file (partition.settings) holding the key it was made for;
a partition replaced halfway has none, so it is never taken for the old one. A --resume whose
partition would change is refused: a new partition gives the nodes other rows of the tables.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from graphtrain.contract import rundir
from graphtrain.contract.spec import (
    PLACEMENT_FIELDS,
    GraphSource,
    GraphTrainingSpec,
    PartitionSpec,
    Phase,
)
from graphtrain.runtime import partition as partitioning
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch.processes import RunFailed
from graphtrain.runtime.train.resumable import check_resumable

# checkpoint/'s name of the latest checkpoint's marker: that module imports torch (its tables
# are tensors), and `graphtrain run` starts its processes without it (1.9 s of CPU per run saved)
LATEST = "LATEST"

SETTINGS = "partition.settings"  # beside the partition, not inside: a partition has one .json


class CheckpointsExist(GraphtrainError):
    """A new run (neither --resume nor --overwrite) in a directory that holds checkpoints."""


def partition_key(spec: GraphTrainingSpec, source: GraphSource, inputs: Mapping[str, str]) -> str:
    """What a run's partition depends on: a partition made for the same key is reused. `source`: the
    spec's graph section with its paths resolved; `inputs`: the content hashes of its files
    (data.inputs.fingerprint), so a rewritten input is partitioned again even under the same name. Where
    the partition Job's pod runs (resources, nodeSelector, ...: Kubernetes only) is not part of it."""
    return key_of(source, spec.partition, spec.model.feature_projection, inputs)


def key_of(
    source: GraphSource, settings: PartitionSpec, projection: int | None, inputs: Mapping[str, str]
) -> str:
    """partition_key from its parts: the partition Job has the partition settings and the projection
    its options and spec give (launch/work.py), not always a spec's."""
    return json.dumps(
        {
            "graph": source.model_dump(mode="json"),
            "inputs": dict(inputs),
            "partition": settings.model_dump(mode="json", exclude=set(PLACEMENT_FIELDS)),
            "projection": projection,
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


UNKNOWN = ("unfetched", "missing")  # an input whose contents cannot be told: not compared
"""inference_changes' contents of an input it cannot read: a dataset not in the cache, a file moved
away since the training (inference reads the partition, not the inputs)."""

WHERE = ("path", "features", "labels", "triples", "nodes", "edges")
"""The graph settings that say where the inputs are: an inference compares what they hold instead."""


def inference_changes(trained: str, given: str) -> list[str]:
    """What an inference's partition key `given` changes of the key the checkpoint's partition was made
    for (`trained`), by spec field; [] when nothing does. Inputs are compared by their
    contents, not where they are (a spec and its data moved elsewhere are the same graph), and one
    whose contents are UNKNOWN on either side is left out."""
    old, new = parse_key(trained), parse_key(given)
    for key in (old, new):
        for field in WHERE:
            key.get("graph", {}).pop(field, None)
    before, after = old.get("inputs", {}), new.get("inputs", {})
    out = [
        f"{f} (contents)"
        for f in sorted(set(before) | set(after))
        if before.get(f) != after.get(f) and not {before.get(f), after.get(f)} & set(UNKNOWN)
    ]
    for part in ("graph", "partition"):
        was, now = old.get(part) or {}, new.get(part) or {}
        out += [f"{part}.{_camel(k)}" for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
    if old.get("projection") != new.get("projection"):
        out.append("model.featureProjection")
    return out


def parse_key(text: str) -> dict[str, Any]:
    """A partition key (partition_key's JSON) read back, its shape checked: a made_for is copied into a
    checkpoint.json and a partition config that no hash covers, and a hand-edited one reached
    inference_changes as a TypeError or a RecursionError.

    Raises:
        ValueError: naming what is not a partition key's."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    for part in ("graph", "partition"):
        if not isinstance(doc.get(part, {}), dict):
            raise ValueError(f"its {part} is not a map")
    inputs = doc.get("inputs", {})
    if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
        raise ValueError("its inputs are not a map of content hashes")
    return doc  # the graph's and partition's values are compared with != only: any JSON will do


def _camel(name: str) -> str:
    """A spec field's name as the spec writes it (the key holds the models' snake_case names)."""
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


LEFTOVER = re.compile(r"\.partition\.(tmp|scratch|old)-.+")
"""What a launch killed while it partitioned (SIGKILL, the OOM killer, a power cut) leaves in the run
directory: the output's temporary and replaced directories (data/cache.py atomic_dir) and the streaming
partitioner's scratch files, as big as the edge list. (atomic_dir removes those of a killed writer too,
data/leftovers.py, where a lock says it is gone; a launch holds the run's lock and removes them all.)"""


def clear_leftovers(run_dir: Path) -> list[str]:
    """Remove what earlier launches killed while they partitioned left in `run_dir` (LEFTOVER): this
    launch holds the run's lock, so no other writes them, and no later launch would. Returns their names."""
    gone = sorted(p.name for p in run_dir.glob(".partition.*") if LEFTOVER.fullmatch(p.name) and p.is_dir())
    for name in gone:
        shutil.rmtree(run_dir / name, ignore_errors=True)
    for lock in run_dir.glob(".partition.tmp-*.lock"):  # their writers' locks (data/leftovers.py)
        if lock.is_file():
            lock.unlink(missing_ok=True)
    return gone


def reusable_partition(
    run_dir: Path, key: str, resume: bool, say: Callable[[str], None] = lambda _: None
) -> partitioning.PartitionConfig | None:
    """The partition in <run_dir>/partition when it was made for `key` (and still loads); None when it
    must be made (again): then the settings file is gone until partitioned_for() writes it anew. What
    killed launches left while they partitioned goes first (clear_leftovers), each `say`-ed.

    Raises:
        GraphtrainError: a --resume over checkpoints whose partition was made for another key (naming
            what changed).
    """
    for name in clear_leftovers(run_dir):
        say(f"[run] removed {run_dir / name}: left by a launch stopped while it partitioned")
    settings = run_dir / SETTINGS
    before = settings.read_text() if settings.exists() else None
    if before == key:
        with contextlib.suppress(Exception):  # an unreadable partition is made again
            return partitioning.load_config(run_dir / "partition")
    if before is not None and before != key and resume and (run_dir / "checkpoints" / LATEST).exists():
        raise GraphtrainError(
            f"cannot resume: {', '.join(partition_changes(before, key))} changed since the checkpoints "
            "were written, and a new partition gives the nodes other rows of the tables; start over "
            "with --overwrite, or put back what changed"
        )
    settings.unlink(missing_ok=True)  # a partition replaced halfway is never taken for the old one
    return None


def partitioned_for(run_dir: Path, key: str) -> None:
    """Record that <run_dir>/partition was made for `key`."""
    (run_dir / SETTINGS).write_text(key)


def choose_checkpoint(
    root: Path, run_dir: Path, spec: GraphTrainingSpec, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """On --resume, say which checkpoint the servers and trainers will take: the newest whose files
    all check out (a damaged latest is skipped, each with its reason). Returns the run's result when
    that checkpoint ends its last epoch (nothing left to train), else None.

    Raises:
        RunFailed: no checkpoint checks out, or the spec changed the model's shapes since.
    """
    if not (root / LATEST).exists():
        say(f"[run] no checkpoint in {root}: starting from the beginning")
        return None
    from graphtrain.runtime import checkpoint as ckpt  # torch: only when there is one to read

    try:
        path, skipped = ckpt.latest_verified(root)
    except GraphtrainError as exc:
        raise RunFailed(f"cannot resume: {exc}") from None
    for line in skipped:
        say(f"[run] {line}")
    if path is None:
        return None
    meta = trainer_record(path)
    try:
        check_resumable(meta.get("model"), spec, path.name)
    except GraphtrainError as exc:
        raise RunFailed(f"cannot resume: {exc}") from None
    tr = spec.training
    finished = finished_result(run_dir, meta, tr.epochs, early_stopping=tr.early_stopping is not None)
    if finished is not None:
        why = (
            f"it stopped early after epoch {meta['epoch']}: {finished['stopped_early']};"
            if meta.get("epoch") != tr.epochs
            else f"checkpoint {path.name} ends epoch {meta['epoch']} of {tr.epochs},"
        )
        more = "remove training.earlyStopping" if meta.get("epoch") != tr.epochs else "raise training.epochs"
        say(
            f"[run] the run is complete: {why} nothing to train ({more} to train on, or --overwrite "
            "to start over); its result:"
        )
        return finished
    said = f"step {meta['step']} (epoch {meta['epoch']}, " if {"step", "epoch"} <= set(meta) else "("
    say(f"[run] resuming from {said}checkpoint {path.name})")
    return None


def trainer_record(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer record (epoch, step, model), {} when it has none that reads."""
    from graphtrain.runtime import checkpoint as ckpt

    try:
        meta = ckpt.read_top(path).get("trainer") or json.loads((path / "trainer.json").read_text())
    except (GraphtrainError, OSError, ValueError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def finished_result(
    run_dir: Path, meta: dict[str, Any], epochs: int, early_stopping: bool = False
) -> dict[str, Any] | None:
    """The result of the run in `run_dir` when there is nothing left to train: the newest checkpoint
    (trainer record `meta`) ends the last of `epochs`, or (`early_stopping`: the spec still stops
    early) the epoch the run stopped early after, and the launch that wrote it succeeded and left its
    result.json for that epoch. None otherwise (then --resume starts the processes as usual). A
    stopped run resumed trained on to its next validation pass and stopped again, each --resume
    replacing the result with a later, worse last model."""
    epoch = meta.get("epoch")
    if epoch != epochs and not early_stopping:
        return None
    try:
        phase = json.loads((run_dir / "status.json").read_text()).get("phase")
        result = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError, AttributeError):
        return None
    if phase != Phase.succeeded.value or not isinstance(result, dict) or result.get("last_epoch") != epoch:
        return None
    return result if epoch == epochs or result.get("stopped_early") else None


RUN_MARKERS = ("launch.lock", rundir.SPEC_FILE, "checkpoints", "partition", "inference.yaml")
"""What a directory graphtrain has run in holds (a launcher's lock, the spec it wrote, its checkpoints
or partition, `infer`'s spec): one holding none of them and other files is someone else's."""


def foreign_run_dir(run_dir: Path, spec: Path | None = None) -> str | None:
    """Why `run_dir` may not be a run directory: it exists, holds files, and none of RUN_MARKERS. A
    launch deletes and replaces its own files there (tensorboard/, metrics.csv, the token, the logs'
    rotation), so a directory of other files lost them, even to a launch refused later. The `spec` the
    launch runs may lie there (a directory made for the run, its spec copied in)."""
    if not run_dir.is_dir():
        return None
    own = spec.resolve() if spec is not None else None
    held = sorted(p.name for p in run_dir.iterdir() if p.resolve() != own)
    if not held or any(m in held for m in RUN_MARKERS) or _run_status(run_dir / rundir.STATUS_FILE):
        return None
    shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
    return (
        f"--run-dir {run_dir}: holds files that are not a graphtrain run's ({shown}), and a run replaces "
        "files of its own there (tensorboard/, metrics.csv, logs/): give an empty or new directory"
    )


def _run_status(path: Path) -> bool:
    """Whether `path` is a launcher's status.json (a GraphTraining status: its phase and conditions).
    A run directory deleted while the run went on can come back holding that and a few other files the
    launcher wrote during the deletion (`rm -rf` then fails: "Directory not empty"): a run's leftovers,
    not someone else's files."""
    try:
        if path.stat().st_size > 1 << 20:
            return False
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("phase"), str)
        and isinstance(doc.get("conditions"), list)
    )


def describe_checkpoint(path: Path) -> str:
    """'epoch 3, step 120' from a checkpoint's trainer record, or 'incomplete'."""
    meta = trainer_record(path)
    if "epoch" in meta and "step" in meta:
        return f"epoch {meta['epoch']}, step {meta['step']}"
    return "incomplete"


def describe_checkpoints(root: Path) -> str:
    """What a checkpoint directory holds, in a few words: its latest checkpoint and how many there are."""
    from graphtrain.runtime import checkpoint as ckpt

    dirs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    try:
        latest = ckpt.resolve_latest(root)
    except GraphtrainError:
        latest = None
    count = f"{len(dirs)} checkpoint{'s' if len(dirs) != 1 else ''}"
    if latest is None:
        return count + (f", the newest {dirs[-1]}" if dirs else "")
    return f"latest {latest.name}: {describe_checkpoint(latest)}; {count}"
