"""A trainer's part of a GraphTraining of mode inference: restore the checkpoint's model and tables,
compute every node's outputs layer by layer over the whole graph (the task's `encoded()`, the code its
evaluation runs: layerwise.py), write this trainer's share of them as one parquet file keyed by the
user's own ids (an edge task also its labelled edge types' edges, predicted: edge_outputs.py), and
report the task's test metric from the same outputs.

The output directory is replaced whole and at once: the trainers write their parts into a staging
directory beside it, and rank 0 renames it into place after writing manifest.json (what each part
holds, the checkpoint and the rows), so a reader never sees a half-written output. Only an earlier
inference's output (its manifest says so, and it holds nothing else) is replaced; any other existing
path is refused (inference_output.py: those rules, which the launcher checks too).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.contract.spec import Sharding
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.collective import checkpoint as collective_ckpt
from graphtrain.runtime.data.cache import write_json
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.partition.format import load_maps, load_names
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.inference_output import (
    KIND,
    MANIFEST,
    check_output,
    check_outside,
    clear_staging,
    lock_output,
    output_path,
    publish,
    staging_of,
)
from graphtrain.runtime.train.reporter import log
from graphtrain.runtime.train.resumable import check_inferable


def original_ids(graph: DistGraph, lo: int, hi: int) -> dict[str, np.ndarray]:
    """The id columns of nodes [lo, hi) (new ids): the user's ids, and node_type on a typed graph."""
    orig = load_maps(graph.config, verify=False)["node_map"][lo:hi]
    names = load_names(graph.config, verify=False)
    cols: dict[str, np.ndarray] = {"id": names["node_ids"][orig] if "node_ids" in names else orig}
    if graph.typed:
        types = np.asarray(graph.ntype_names, dtype=object)
        cols["node_type"] = types[graph.node_types(np.arange(lo, hi, dtype=np.int64))].astype(str)
    return cols


def write_part(path: Path, cols: dict[str, np.ndarray]) -> None:
    """One trainer's rows as parquet: `embedding` a fixed-size list of float32 (GraphStorm's and DGL's
    embedding files hold one list column), the others plain columns."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    arrays = {}
    for name, values in cols.items():
        if values.ndim == 2:
            flat = pa.array(np.ascontiguousarray(values, dtype=np.float32).reshape(-1))
            arrays[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            arrays[name] = pa.array(values)
    pq.write_table(pa.table(arrays), path)


def edge_part(task: Any, layers: Any, staging: Path, dist: Dist) -> dict[str, Any]:
    """An edge task's predictions for its labelled edge types' edges into this trainer's nodes
    (edge_outputs.py), written as edges-part-<rank>.parquet; what the manifest says of them (nothing
    for a task without edge outputs). Collective."""
    if not hasattr(task, "edge_outputs"):
        return {}
    cols = task.edge_outputs(layers)
    write_part(staging / f"edges-part-{dist.rank:05d}.parquet", cols)
    rows = int(dist.sum([len(cols["source"])])[0])
    parts = [f"edges-part-{r:05d}.parquet" for r in range(dist.world)]
    return {"edge_rows": rows, "edge_parts": parts, "edge_columns": sorted(cols)}


def restore(task: Any, graph: DistGraph, dist: Dist, directory: Path) -> None:
    """The checkpoint's dense model (task.load_state) and tables: the shard servers' (their checkpoint
    root is `directory`'s parent), a collective table's rows on every trainer."""
    task.load_state(directory)
    for table in getattr(task, "collective_tables", []):
        if not collective_ckpt.restore(table, directory, verify=False):
            raise GraphtrainError(f"checkpoint {directory.name} holds no table {table.name!r}")
    missing: list[str] = []
    if dist.rank == 0:
        restored = set(graph.client.restore(directory.name))
        missing = sorted(set(server_tables(task.spec)) - restored)
    if dist.sum([float(len(missing))])[0]:  # every rank stops, not only rank 0 (the others would wait)
        named = f"table {', '.join(map(repr, missing))}" if missing else "a table (trainer 0 names it)"
        raise GraphtrainError(f"checkpoint {directory.name} holds no rows of {named}")


def server_tables(spec: Any) -> list[str]:
    """The spec's tables held by the shard servers, whose rows a checkpoint must restore: one it lacks
    would be left at its initial values, and inference would answer from those without a word."""
    return [t.name for t in spec.embeddings if t.sharding != Sharding.collective]


def agreed_checkpoint(checkpoint: Path, dist: Dist) -> Path:
    """The checkpoint directory `checkpoint` (a LATEST or BEST marker, a checkpoints directory, a
    checkpoint) resolves to on rank 0, on every rank: a training still writing there moves LATEST
    while the trainers start, and each resolving it alone mixed one checkpoint's dense model with
    another's tables (rank 0 names the servers' restore).

    Raises:
        DataError: no complete checkpoint there."""
    directory = ckpt.resolve_checkpoint(checkpoint)
    return directory.parent / dist.broadcast_text(directory.name)


def infer(task: Any, graph: DistGraph, dist: Dist, checkpoint: Path, out: Path) -> dict[str, Any]:
    """Restore `checkpoint`, compute every node's outputs and write them under `out`; the result
    (rows, seconds, rows per second, the test metrics, where the output is)."""
    directory = agreed_checkpoint(checkpoint, dist)
    trainer = ckpt.read_top(directory).get("trainer")  # every rank reads it: all stop alike
    check_inferable(trainer.get("model") if isinstance(trainer, dict) else None, task.spec, directory.name)
    if dist.rank == 0:
        ckpt.verify_checkpoint(directory)
    out = output_path(out)
    check_outside(out, directory)
    staging = staging_of(out)
    held = -1
    if dist.rank == 0:
        check_output(out)
        held = lock_output(out)
        clear_staging(staging)
        staging.mkdir(parents=True, mode=0o700)
    try:
        return _infer_into(task, graph, dist, directory, out, staging)
    finally:
        if held >= 0:
            os.close(held)


def _infer_into(
    task: Any, graph: DistGraph, dist: Dist, directory: Path, out: Path, staging: Path
) -> dict[str, Any]:
    """infer()'s work once rank 0 holds the output's lock and made the staging directory."""
    restore(task, graph, dist, directory)
    began = time.perf_counter()
    layers = task.encoded()
    seconds = time.perf_counter() - began
    cols = {**original_ids(graph, layers.lo, layers.hi), **task.outputs(layers)}
    write_part(staging / f"part-{dist.rank:05d}.parquet", cols)
    edges = edge_part(task, layers, staging, dist)
    metrics = {f"test_{k}": v for k, v in task.evaluate("test").items()}
    rows = int(dist.sum([layers.hi - layers.lo])[0])
    seconds = max(dist.gather_max([seconds])[0], 1e-9)
    result = {"rows": rows, "seconds": seconds, "rows_per_second": rows / seconds, **metrics}
    if dist.rank == 0:
        manifest = {
            "kind": KIND,
            "checkpoint": str(directory),
            "rows": rows,
            "parts": [f"part-{r:05d}.parquet" for r in range(dist.world)],
            "columns": sorted(cols),
            **edges,
            **result,
        }
        write_json(staging / MANIFEST, manifest)
        publish(staging, out)  # an earlier inference's output (check_output) replaced whole, at once
        log(f"[trainer] inferred {rows:,} nodes in {seconds:.2f} s ({rows / seconds:,.0f} rows/s): {out}")
    dist.barrier()
    return {**result, "output": str(out)}
