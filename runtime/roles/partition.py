"""The partition role (`graphtrain partition`; the operator's partition Job runs it with --spec,
--overwrite and --report-file /dev/termination-log): the partition pipeline (launch/partition_step.py,
which `graphtrain run` runs too) on the graph the options name, then the partition status into the
report file, where the operator reads it from the pod's termination message. With --spec, the status
says what each role's pods need in memory on this partition (runtime/capacity.py memory_need): the
operator sizes their requests by it and refuses limits below it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtrain.contract.roles import PartitionParams
from graphtrain.contract.spec import MemoryNeed
from graphtrain.runtime.data.cache import reason
from graphtrain.runtime.errors import DataError, GraphtrainError

if TYPE_CHECKING:
    from graphtrain.runtime.partition import PartitionConfig


def partition(p: PartitionParams, warn: Callable[[str], None]) -> PartitionConfig:
    """Partition the graph `p` names into p.out_dir; returns the written partition's config. `warn`: told
    each warning on the data (one line each, worded as `graphtrain run` words them).

    Raises:
        SpecError: an invalid setting, by its field path.
        GraphtrainError: the pipeline's refusals (partition_step.partition), or an unwritable report.
    """
    from graphtrain.runtime import capacity  # numpy, METIS (no torch): not for `graphtrain --help`
    from graphtrain.runtime.launch import inference, partition_step
    from graphtrain.runtime.targets import check_writable

    work = partition_step.from_options(p)
    # before the graph is read (minutes for a large one): one line naming --out where it cannot be written
    check_writable(Path(os.path.abspath(p.out_dir)).parent, f"--out {p.out_dir}")
    try:
        if work.model is not None and inference.inferring(work.model):  # the checkpoint's own partition
            base = p.base_dir or (p.spec_path.parent if p.spec_path else Path.cwd())
            config = inference.link_partition(work.model, base, p.out_dir, p.overwrite, p.data_dir, warn)
        else:
            config = partition_step.partition(
                work, p.out_dir, overwrite=p.overwrite, data_dir=p.data_dir, warn=warn, spin=True
            )
    except DataError as exc:  # "spec.graph.path: ... not found" for a file given as --input: name --input
        raise DataError(partition_step.named_by_option(str(exc), p)) from None
    if p.report_file is not None:
        need = capacity.memory_need(work.model.spec, config) if work.model is not None else None
        report(config.data, p.report_file, need)
    return config


def report(config: dict[str, Any], path: Path, need: MemoryNeed | None = None) -> None:
    """Write the partition status (the GraphTraining status' partition section, with `need` as its
    memory) as compact JSON to `path`, in place: /dev/termination-log is a file the kubelet mounted,
    not one to rename over.

    Raises:
        GraphtrainError: it cannot be written.
    """
    from graphtrain.runtime.launch.status import partition_status

    made = partition_status(config).model_copy(update={"memory": need})
    status = made.model_dump(by_alias=True, exclude_none=True, mode="json")
    try:
        path.write_text(json.dumps(status, separators=(",", ":")))
    except OSError as exc:
        raise GraphtrainError(f"{path}: cannot write the report ({reason(exc)})") from None
