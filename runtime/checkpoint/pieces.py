"""Checkpoints of sharded tables: pieces written by each shard server, a manifest written last.

Layout of a checkpoint directory:

    checkpoint.json                          written by the client after every server succeeded: the
                                             checkpoint is complete iff this file exists
    <tensor>/rows-<lo>-<hi>/data.npy         rows [lo, hi) of the global table
    <tensor>/rows-<lo>-<hi>/state.<key>.npy  optimizer state of those rows (or the table's Adam step)
    <tensor>/rows-<lo>-<hi>/manifest.json    name, global shape, dtype, row range, optimizer config,
                                             state layout, sha256 of every file

Each piece is written into a temporary directory, fsynced and renamed into place. Restoring reads the
pieces that checkpoint.json lists and copies the overlap of each with the shard's own range, so a
checkpoint taken by 2 servers restores into 3, or into standalone mode, row for row.

checkpoint.json may also record the sha256 of files beside the tensors ("files": the trainers' state)
and the partition the run trained on ("partition": partition_record), so an export can put node-keyed
rows back in the original node order without being told which partition they came from.
A piece may be incremental: only the rows changed since a base checkpoint, read through its chain of
bases (chain.py, written by shard servers: increment.py).
LATEST names the newest checkpoint, BEST the best validation pass's (points.py reads them).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphtrain.runtime.checkpoint.chain import FORMAT, FORMAT_VERSION, LATEST, MANIFEST, TOP
from graphtrain.runtime.data.cache import (
    atomic_dir,
    atomic_file,
    hash_tree,
    write_json,
)
from graphtrain.runtime.dtypes import to_numpy
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.keyed import KEYS, global_step
from graphtrain.runtime.storage.shard import TensorShard

if TYPE_CHECKING:
    from graphtrain.runtime.partition.format import PartitionConfig


def piece_dir(root: Path, name: str, lo: int, hi: int) -> Path:
    return root / name / f"rows-{lo:012d}-{hi:012d}"


def piece_entry(root: Path, name: str, lo: int, hi: int) -> dict[str, Any]:
    """How checkpoint.json lists a piece (write_top): what write_piece returns, for pieces written by
    other processes (each trainer rank writes its own piece of a collective table)."""
    return {
        "name": name,
        "lo": lo,
        "hi": hi,
        "dir": piece_dir(root, name, lo, hi).relative_to(root).as_posix(),
    }


Writer = Callable[[Path, TensorShard], None]


def save_whole(directory: Path, t: TensorShard) -> None:
    """data.npy and state.<key>.npy of a host table, each written in one go (and a dynamic table's keys,
    with only its rows in use: rows 0..len(keys)-1, not its capacity)."""
    n = t.rows if t.keyed is None else len(t.keyed.keys())
    np.save(directory / "data.npy", to_numpy(t.data[:n].cpu()))  # in the table's dtype (bfloat16: its bits)
    for key, value in t.state.items():
        table_wide = value.dim() == 0 or (key == "step" and global_step(t.config))
        np.save(directory / f"state.{key}.npy", (value if table_wide else value[:n]).cpu().numpy())
    save_keys(directory, t)


def save_keys(directory: Path, t: TensorShard, keys: np.ndarray | None = None) -> None:
    """keys.npy of a dynamic table's piece (`keys`: those taken when its snapshot was armed)."""
    if t.keyed is not None:
        np.save(directory / KEYS, t.keyed.keys() if keys is None else keys)


def write_piece(root: Path, t: TensorShard, writer: Writer = save_whole) -> dict[str, Any]:
    """Write one shard's rows and state of `t` atomically; returns the piece's description. `writer`
    puts the .npy files into the piece's temporary directory (a GPU table's: in chunks, gpu.py); the
    manifest and its hashes are made from what it wrote."""
    final = piece_dir(root, t.name, t.lo, t.hi)
    with atomic_dir(final, overwrite=True) as tmp:
        writer(tmp, t)
        finish_piece(tmp, t)
    return piece_entry(root, t.name, t.lo, t.hi)


def finish_piece(tmp: Path, t: TensorShard, delta: dict[str, Any] | None = None) -> None:
    """The manifest of the piece of `t` whose files are in `tmp` (write_piece's, or the background
    writer's temporary directory: snapshot.py), with the sha256 of every file; `delta`: its base, when
    it holds only the rows changed since (chain.py)."""
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": t.name,
        "num_rows": t.num_rows,
        "row_shape": list(t.row_shape),
        "dtype": t.dtype,
        "lo": t.lo,
        "hi": t.hi,
        "optimizer": None if t.config is None else dataclasses.asdict(t.config),
        "round_steps": t.steps,  # a half table's rounding count: a resumed run rounds as it would have
        "state": {
            k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
            for k, v in t.state.items()
        },
        **({} if delta is None else {"delta": delta}),
        **_rows_in_use(tmp, t),
        "files": hash_tree(tmp),
    }
    write_json(tmp / MANIFEST, manifest)


def _rows_in_use(tmp: Path, t: TensorShard) -> dict[str, int]:
    """{"rows": n} for a dynamic vocabulary's piece whose files hold its n rows in use (chain.held_rows),
    {} for one of its whole share (a GPU table's, written in chunks) or a fixed table's (no keys.npy)."""
    if not (tmp / KEYS).exists():
        return {}
    rows = int(np.load(tmp / "data.npy", mmap_mode="r").shape[0])
    return {} if rows == t.hi - t.lo else {"rows": rows}


def write_top(
    root: Path, pieces: list[dict[str, Any]], num_shards: int, extra: dict[str, Any] | None = None
) -> Path:
    """Mark the checkpoint complete: list every piece (called after all servers succeeded)."""
    tensors: dict[str, list[dict[str, Any]]] = {}
    for p in pieces:
        tensors.setdefault(p["name"], []).append(p)
    top = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "num_shards": num_shards,
        "tensors": {n: sorted(ps, key=lambda p: p["lo"]) for n, ps in tensors.items()},
        **(extra or {}),
    }
    write_json(root / TOP, top)
    return root / TOP


def mark_latest(root: Path, rel: str) -> None:
    """Point <root>/LATEST at the complete checkpoint <root>/<rel> (atomic replace)."""
    if not (root / rel / TOP).exists():
        raise DataError(f"{root / rel}: not a complete checkpoint, cannot mark it latest")
    with atomic_file(root / LATEST) as f:
        f.write(f"{rel}\n".encode())


def partition_record(
    cfg: PartitionConfig,
    checkpoint_dir: Path,
    table_keys: dict[str, str] | None = None,
    node_types: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """What checkpoint.json says about the partition the tables were trained on: its config (absolute,
    and relative to the checkpoint, so a run directory copied elsewhere still finds it), the sha256 of
    its node map (which fixes the row order of node-keyed tables), what each table's rows stand for
    (the spec's embeddings[].keys: nodes, relations or custom) and, for a node table over some node
    types, those types (embeddings[].nodeTypes: a row per node of them, partition/typed_ids.py's order),
    and the graph_identity and made_for the partition carries (partition/identity.py: infer, predict
    and export refuse a partition, and infer and predict a spec, of another graph), when it has them."""
    config = cfg.path.resolve()
    graph, key = cfg.data.get("graph_identity"), cfg.data.get("made_for")
    return {
        **({"graph_identity": graph} if isinstance(graph, dict) else {}),
        **({"made_for": key} if isinstance(key, str) else {}),
        "config": str(config),
        "relative": os.path.relpath(config, checkpoint_dir.resolve()),
        "node_map_sha256": cfg.data["files"]["node_map.npy"],
        "num_nodes": int(cfg.data["num_nodes"]),
        "table_keys": dict(sorted((table_keys or {}).items())),
        "table_node_types": dict(sorted((node_types or {}).items())),
    }


def write_frozen(
    root: Path, copy: TensorShard, keys: np.ndarray | None, stopped: Callable[[], bool]
) -> dict[str, Any]:
    """The piece of a GPU table's frozen copy (gpu.freeze), from the checkpoint's thread: on a stream of
    its own, so its copies to the host overlap training's kernels instead of queueing among them; an
    abandoned checkpoint (`stopped`) ends it at the next chunk, its piece never renamed into place."""
    with gpu.worker_stream(copy.data.device):
        return write_piece(root, copy, gpu_writer(copy, keys, stopped))


def gpu_writer(
    live: TensorShard, keys: np.ndarray | None, stopped: Callable[[], bool] | None = None
) -> Writer:
    """The writer of a GPU table's piece: its rows and state in chunks, each under `live`'s lock
    (gpu.save_chunked), and a dynamic table's keys with its rows in use alone."""

    def write(directory: Path, view: TensorShard) -> None:
        held = None if keys is None else len(keys)  # a dynamic vocabulary's rows in use, not its capacity
        gpu.save_chunked(directory, view, live, stopped=stopped, rows=held)
        save_keys(directory, view, keys)

    return write
