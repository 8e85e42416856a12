"""Where a local run of mode inference (`graphtrain infer`, or `graphtrain run` of such a spec) reads
and writes: the checkpoint named by spec.inference (relative paths are the spec file's directory's),
the checkpoints directory holding it (the shard servers' checkpoint root: the trainers ask them to
restore that checkpoint by name), the partition it was trained on (the one its checkpoint.json names,
so rows are read in the order they were trained in: nothing is partitioned again) and the output."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from graphtrain.contract import roles
from graphtrain.contract.spec import GraphSource, GraphTraining, Mode
from graphtrain.contract.spec.inference import checkpoint_root
from graphtrain.runtime.errors import DataError, GraphtrainError

if TYPE_CHECKING:
    from graphtrain.runtime.partition import PartitionConfig

VERIFIED = "checkpoint-verified.json"  # the record of the checkpoint's files check_intact hashed


def inferring(gt: GraphTraining) -> bool:
    return gt.spec.mode == Mode.inference


def _checkpoint(gt: GraphTraining, spec_dir: Path) -> Path:
    assert gt.spec.inference is not None  # the spec's inference-checkpoint rule
    return spec_dir / gt.spec.inference.checkpoint


def output(gt: GraphTraining, spec_dir: Path, run_dir: Path) -> Path:
    """spec.inference.output (relative: the spec's directory's), else <run_dir>/inference."""
    assert gt.spec.inference is not None
    given = gt.spec.inference.output
    if not given:
        return run_dir / "inference"
    p = Path(os.path.abspath(spec_dir / given))  # its parents resolved, not its name: a symlink there is
    return p.parent.resolve() / p.name  # refused (check_output), not followed


def partition(
    gt: GraphTraining,
    spec_dir: Path,
    run_dir: Path,
    data_dir: Path | None = None,
    warn: Callable[[str], None] | None = None,
    record: Path | None = None,
) -> Path:
    """The partition config the checkpoint was trained on, after checking (before any process starts)
    that the checkpoint's files check out (a damaged one was found by the shard servers, ~10 s later),
    that the partition and the spec are of the graph it was trained on, and that the output may be
    written. `warn`: told once of a checkpoint or partition too old to carry its graph's identity;
    `record`: where the files that checked out are recorded for the processes (check_intact).

    Raises:
        DataError: no complete checkpoint there, or one whose files do not check out; GraphtrainError:
            its partition is gone or of another graph, the spec's graph differs, or the output is a path
            an inference may not replace."""
    from graphtrain.runtime.checkpoint import resolve_checkpoint  # imported here: the
    from graphtrain.runtime.outputs import checkpoint_partition  # launcher's own imports stay torch-free
    from graphtrain.runtime.train.inference_output import (
        check_output,
        check_outside,
        clear_staging,
        staging_of,
    )

    root = resolve_checkpoint(_checkpoint(gt, spec_dir))
    check_intact(root, record)
    cfg = checkpoint_partition(root, warn=warn)
    check_files_there(cfg)
    check_same_model(gt, root)
    refuse_changes(graph_changes(gt, spec_dir, cfg, data_dir, root), root, cfg, gt)
    check_outside(output(gt, spec_dir, run_dir), root)
    check_output(output(gt, spec_dir, run_dir))
    clear_staging(staging_of(output(gt, spec_dir, run_dir)), remove=False)
    return cfg.path


def check_intact(root: Path, record: Path | None = None) -> None:
    """Refuse checkpoint `root` unless its manifest and every file it lists check out (sha256 of each
    piece's files, their tiling, an incremental piece's chain): before the shard servers start. `record`:
    where the files that checked out are recorded for the servers (checkpoint/verified.py: they do not
    hash a file again that is unchanged since; an earlier record there is removed first).

    Raises:
        DataError: one line naming the checkpoint and the first file missing or changed."""
    from graphtrain.runtime.checkpoint import verified, verify_checkpoint

    seen: dict[str, tuple[int, int, int, int, int]] = {}
    if record is not None:
        record.unlink(missing_ok=True)
    started = verified.now()
    try:
        verify_checkpoint(root, seen)
    except (DataError, OSError) as exc:
        said = " ".join(str(exc).split())
        raise DataError(f"checkpoint {root.name} does not check out: {said}") from None
    if record is not None:
        verified.write(record, root, seen, started)


def check_files_there(cfg: PartitionConfig) -> None:
    """Refuse partition `cfg` unless each file its config records is a regular file (a stat each, no
    hash: the processes verify what they read): a FIFO or a file gone was found by a trainer once
    started, or, a FIFO read by np.load, never (the run hung).

    Raises:
        DataError: naming the first file missing or not a regular file."""
    for rel in cfg.data["files"]:
        if not (cfg.root / rel).is_file():
            raise DataError(f"partition {os.path.normpath(cfg.root)}: {rel} is missing or not a regular file")


def check_same_model(gt: GraphTraining, root: Path) -> None:
    """Refuse a spec whose model differs from the one checkpoint `root` was trained with (its record,
    resumable.check_inferable), before any process starts; the trainers check again.

    Raises:
        GraphtrainError: naming every changed field with both values."""
    from graphtrain.runtime.checkpoint import read_top
    from graphtrain.runtime.train.resumable import check_inferable

    trainer = read_top(root).get("trainer")
    check_inferable(trainer.get("model") if isinstance(trainer, dict) else None, gt.spec, root.name)


def made_for(cfg: PartitionConfig, root: Path | None = None) -> tuple[str, str] | None:
    """The partition key (launch/reuse.py) partition `cfg` was made for, and where it was read (what a
    refusal of a malformed one names): the one checkpoint `root` recorded at save time (the
    checkpoint's word stands: a partition config's own bytes are in no hash), else the one the partition
    carries (partition/identity.py: the partitioner writes it, the operator's Job too), else the
    partition.settings a local launch from before left beside it; None when there is none.

    Raises:
        DataError: that partition.settings cannot be read (not UTF-8 text, say)."""
    from graphtrain.runtime.checkpoint import TOP, read_top
    from graphtrain.runtime.data.cache import read_text
    from graphtrain.runtime.launch import reuse
    from graphtrain.runtime.partition.identity import MADE_FOR

    recorded = (read_top(root).get("partition") or {}).get(MADE_FOR) if root is not None else None
    if isinstance(recorded, str) and root is not None:
        return recorded, f"{root / TOP}: partition.made_for"
    key = cfg.data.get(MADE_FOR)
    if isinstance(key, str):
        return key, f"{cfg.path}: made_for"
    settings = cfg.path.parent.parent / reuse.SETTINGS
    return (read_text(settings), str(settings)) if settings.is_file() else None


def graph_changes(
    gt: GraphTraining,
    spec_dir: Path,
    cfg: PartitionConfig,
    data_dir: Path | None = None,
    root: Path | None = None,
) -> list[str]:
    """The spec fields whose graph (its inputs' contents, its settings) or partition settings differ from
    those the partition `cfg` of checkpoint `root` was made for (made_for); [] for a partition that does
    not say. Inference and predict read that partition, not the spec's graph: given another graph's spec,
    they answered for the training's graph without a word.

    Raises:
        GraphtrainError: that made_for is not a partition key (a hand edit: no hash covers it), naming
            the file and field it was read from."""
    from graphtrain.runtime.launch import partition_step, reuse

    found = made_for(cfg, root)
    if found is None:
        return []
    key, where = found
    source = partition_step.from_spec(gt, spec_dir).source
    given = reuse.partition_key(gt.spec, source, contents(source, data_dir))
    try:
        return reuse.inference_changes(key, given)
    except ValueError as exc:  # json's errors are ValueErrors too
        said = " ".join(str(exc).split())[:200]
        raise GraphtrainError(f"{where} is not a partition key ({said})") from None


def refuse_changes(changed: list[str], root: Path, cfg: PartitionConfig, given: GraphTraining) -> None:
    """Refuse the spec fields `changed` (graph_changes) of checkpoint `root`, its partition `cfg`: one
    line naming both graphs (the spec `given`'s by its source, the checkpoint's by its identity).

    Raises:
        GraphtrainError: naming them, when there are any."""
    from graphtrain.runtime.partition.identity import KEY, described

    if changed:
        raise GraphtrainError(
            f"spec {', '.join(changed)}: not what checkpoint {root.name} was trained on "
            f"({described(cfg.data.get(KEY))}, read from its partition {cfg.root.resolve()}; the spec's is "
            f"{given.spec.graph.described}): give the spec the run trained with"
        )


def contents(source: GraphSource, data_dir: Path | None) -> dict[str, str]:
    """inputs.fingerprint of `source`, a file that cannot be read (moved away since the training: the
    inference does not read it) or a dataset not in the cache reading as reuse.UNKNOWN."""
    from graphtrain.runtime.data import datasets, inputs

    if source.dataset is not None:
        cached = datasets.dataset_dir(str(source.dataset), data_dir)
        return inputs.fingerprint(
            source, cached if datasets.is_fetched(str(source.dataset), data_dir) else None
        )
    out = {}
    for field, path in inputs.input_files(source).items():
        try:
            out[field] = inputs.sha256_of(path, field)
        except DataError:
            out[field] = "missing"
    return out


def files(gt: GraphTraining, spec_path: Path, run_dir: Path, partition: Path) -> roles.Files:
    """A local run's Files with the checkpoint's root as the checkpoint root and the inference paths."""
    spec_dir = spec_path.parent
    checkpoint = _checkpoint(gt, spec_dir).resolve()
    return roles.Files(
        spec=str(spec_path),
        partition=str(partition),
        token=str(run_dir / "token"),
        checkpoints=checkpoint_root(str(checkpoint)),
        infer_from=str(checkpoint),
        output=str(output(gt, spec_dir, run_dir)),
        verified=str(run_dir / VERIFIED),
    )


def link_partition(
    gt: GraphTraining,
    base: Path,
    out_dir: Path,
    overwrite: bool,
    data_dir: Path | None = None,
    warn: Callable[[str], None] | None = None,
) -> PartitionConfig:
    """The partition Job of mode inference (the operator's): `out_dir` made a link to the partition the
    checkpoint was trained on (relative spec paths are `base`'s: the volume's mount), so the shard
    servers and trainers read the graph in the order the checkpoint's rows are in. Nothing is
    partitioned; an earlier link there is replaced, an earlier partition only with `overwrite`.
    `data_dir`: the dataset cache (a spec's dataset is compared by its cached manifest); `warn`:
    partition()'s.

    Raises:
        DataError, GraphtrainError: no complete checkpoint there or a damaged one, its partition gone
            or of another graph, or `out_dir` holds a partition and overwrite is off."""
    try:
        found = partition(gt, base, out_dir.parent, data_dir, warn)
    except DataError as exc:  # named by its field: the pod's path alone is the volume's, not the user's
        given = gt.spec.inference.checkpoint if gt.spec.inference is not None else ""
        raise DataError(f"spec.inference.checkpoint {given!r}: {exc}") from None
    if out_dir.exists() and not out_dir.is_symlink():
        if not overwrite:
            raise GraphtrainError(f"{out_dir}: exists (--overwrite replaces it)")
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staged = out_dir.with_name(f".{out_dir.name}.link")
    staged.unlink(missing_ok=True)
    os.symlink(found.parent.resolve(), staged)
    os.replace(staged, out_dir)  # atomically, over an earlier link
    from graphtrain.runtime.partition import load_config

    return load_config(out_dir / found.name)
