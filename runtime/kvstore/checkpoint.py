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
"Latest" means the newest checkpoint, at or before the one LATEST names, whose every file checks out: a
damaged latest (a changed byte, a missing piece) is skipped for the one before it, with a line saying why.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from graphtrain.runtime.data.cache import (
    atomic_dir,
    atomic_file,
    hash_tree,
    read_json,
    verify_files,
    write_json,
)
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.kvstore import chain, gpu
from graphtrain.runtime.kvstore import keyed as kd
from graphtrain.runtime.kvstore.chain import MANIFEST, TOP
from graphtrain.runtime.kvstore.keyed import KEYS
from graphtrain.runtime.kvstore.shard import TensorShard
from graphtrain.runtime.optim import OptimConfig, make_state

if TYPE_CHECKING:
    from graphtrain.runtime.partition.format import PartitionConfig

FORMAT = "graphtrain-checkpoint"
FORMAT_VERSION = 1


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
    """data.npy and state.<key>.npy of a host table, each written in one go (and a dynamic table's keys)."""
    np.save(directory / "data.npy", t.data.cpu().numpy())
    for key, value in t.state.items():
        np.save(directory / f"state.{key}.npy", value.cpu().numpy())
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
        "state": {
            k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
            for k, v in t.state.items()
        },
        **({} if delta is None else {"delta": delta}),
        "files": hash_tree(tmp),
    }
    write_json(tmp / MANIFEST, manifest)


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


LATEST = "LATEST"


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
    types, those types (embeddings[].nodeTypes: a row per node of them, partition/typed_ids.py's order)."""
    config = cfg.path.resolve()
    return {
        "config": str(config),
        "relative": os.path.relpath(config, checkpoint_dir.resolve()),
        "node_map_sha256": cfg.data["files"]["node_map.npy"],
        "num_nodes": int(cfg.data["num_nodes"]),
        "table_keys": dict(sorted((table_keys or {}).items())),
        "table_node_types": dict(sorted((node_types or {}).items())),
    }


MARKER_MAX_BYTES = 4096


def read_marker(path: Path) -> str:
    """The checkpoint a marker file (LATEST, BEST) names, relative to its directory. At most
    MARKER_MAX_BYTES + 1 bytes are read, and only from a regular file: opened without blocking, so a
    FIFO in its place is refused rather than waited on, and a huge file is not read whole.

    Raises:
        FileNotFoundError: there is no such file.
        DataError: naming `path` and what it is instead of a marker (a FIFO, a directory, a long or
            binary or multi-line file), or why it cannot be read.
    """
    marker = f"a checkpoint marker (a {LATEST}-like file naming one checkpoint)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise DataError(f"{path}: cannot read the checkpoint marker ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a device"
            raise DataError(f"{path}: is {what}, not {marker}")
        raw = os.read(fd, MARKER_MAX_BYTES + 1)
    except OSError as exc:
        raise DataError(f"{path}: cannot read the checkpoint marker ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    try:
        rel = raw.decode().strip()
    except UnicodeDecodeError:
        rel = ""
    if not rel or len(raw) > MARKER_MAX_BYTES or "\n" in rel:
        raise DataError(f"{path}: not {marker}")
    return rel


def resolve_checkpoint(path: Path) -> Path:
    """The checkpoint directory a user points at: the directory itself, a marker file beside it (LATEST,
    BEST: a text file naming the checkpoint), or a checkpoint root (then its LATEST).

    Raises:
        DataError: naming `path` and what it is instead.
    """
    path = Path(path)
    if path.is_dir():
        if (path / TOP).exists():
            return path
        if (path / LATEST).exists():
            return resolve_checkpoint(path / LATEST)
        raise DataError(f"{path}: not a complete checkpoint (no {TOP}) and no {LATEST} file in it")
    try:
        rel = read_marker(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such checkpoint") from None
    root = path.parent.resolve()
    target = (root / rel).resolve()
    if root not in target.parents:
        raise DataError(f"{path}: names {rel!r}, outside {root}")
    if not (target / TOP).exists():
        raise DataError(f"{path}: names {rel!r}, which is not a complete checkpoint (no {TOP})")
    return target


BEST = "BEST"  # names the checkpoint of the best validation pass (the trainers' runtime/train/best.py)


def mark_best(root: Path, rel: str) -> None:
    """Point <root>/BEST at the complete checkpoint <root>/<rel> (atomic replace); prune keeps it."""
    if not (root / rel / TOP).exists():
        raise DataError(f"{root / rel}: not a complete checkpoint, cannot mark it best")
    with atomic_file(root / BEST) as f:
        f.write(f"{rel}\n".encode())


def prune(root: Path, keep: int) -> list[str]:
    """Delete all but the newest `keep` complete checkpoints under `root` (never the LATEST one nor the
    BEST one, nor a base a kept incremental one reads), and incomplete ones older than LATEST. Names
    sort by step (step-%09d)."""
    latest = resolve_latest(root)
    if latest is None or keep < 1:
        return []
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    complete = [p for p in dirs if (p / TOP).exists()]
    try:
        best = {read_marker(root / BEST)}
    except (OSError, DataError):
        best = set()
    keep_set = {p.name for p in complete[-keep:]} | {latest.name} | best
    keep_set = chain.keep_with_bases(
        keep_set, {p.name: chain.bases_listed(read_json(p / TOP)) for p in complete}
    )
    removed = []
    for p in dirs:
        if p.name not in keep_set and p.name < latest.name:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


def resolve_latest(root: Path) -> Path | None:
    """The checkpoint <root>/LATEST points at, or None if there is none yet."""
    try:
        rel = read_marker(root / LATEST)
    except FileNotFoundError:
        return None
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise DataError(f"{root / LATEST}: points outside the checkpoint root")
    return path


def read_top(root: Path) -> dict[str, Any]:
    """The complete-checkpoint manifest.

    Raises:
        DataError: no checkpoint.json (an incomplete or missing checkpoint) or a malformed one.
    """
    if not (root / TOP).exists():
        raise DataError(f"{root}: no {TOP}; not a complete checkpoint")
    top = read_json(root / TOP)
    if (
        not isinstance(top, dict)
        or top.get("format") != FORMAT
        or top.get("format_version") != FORMAT_VERSION
    ):
        raise DataError(f"{root / TOP}: not a graphtrain checkpoint of version {FORMAT_VERSION}")
    return top


def pieces_of(root: Path, name: str) -> list[tuple[dict[str, Any], Path]]:
    """Manifests and directories of the pieces of tensor `name`, checked to tile [0, num_rows)."""
    listed = read_top(root)["tensors"].get(name)
    if not listed:
        return []
    out = []
    for p in listed:
        d = root / p["dir"]
        manifest = read_json(d / MANIFEST)
        out.append((manifest, d))
    out.sort(key=lambda x: x[0]["lo"])
    num_rows = out[0][0]["num_rows"]
    expect = 0
    for manifest, d in out:
        if manifest["num_rows"] != num_rows or manifest["lo"] != expect:
            raise DataError(f"{d}: pieces of {name!r} do not tile the table (gap or overlap at row {expect})")
        expect = manifest["hi"]
    if expect != num_rows:
        raise DataError(f"{root}: pieces of {name!r} cover rows [0, {expect}) of {num_rows}")
    return out


def verify_checkpoint(root: Path) -> None:
    """Check that the checkpoint at `root` is complete and unchanged: checkpoint.json, every piece it lists
    (tiling its table, sha256 of every file, an incremental piece's whole chain) and the other files it
    records.

    Raises:
        DataError: naming the first file missing or changed (ChecksumError), or the gap in a table.
    """
    top = read_top(root)
    for name in top["tensors"]:
        for manifest, d in pieces_of(root, name):
            chain.verify_piece((root, manifest, d))
    verify_files(root, top.get("files", {}))


def latest_verified(root: Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint under `root` that verifies, at or before the one LATEST names (None
    if there is no LATEST yet), and one line for each newer one skipped: its name and what is wrong.

    Raises:
        DataError: LATEST exists but no checkpoint at or before it verifies (never a silent fresh start).
    """
    latest = resolve_latest(root)
    if latest is None:
        return None, []
    older = sorted(
        (p for p in root.iterdir() if p.is_dir() and p.name < latest.name and (p / TOP).exists()),
        key=lambda p: p.name,
        reverse=True,
    )
    skipped = []
    for path in [latest, *older]:
        try:
            verify_checkpoint(path)
        except (DataError, OSError) as exc:
            skipped.append(f"checkpoint {path.name} skipped: {' '.join(str(exc).split())}")
            continue
        return path, skipped
    raise DataError(f"{root}: no checkpoint at or before LATEST checks out ({'; '.join(skipped)})")


def restore_point(root: Path, which: str, say: Callable[[str], object] = print) -> Path | None:
    """The checkpoint `--restore which` names under `root`, verified: "latest" is latest_verified's
    choice (None if there is no checkpoint yet; each skipped one is said), anything else a checkpoint's
    directory name.

    Raises:
        DataError: the named checkpoint is incomplete or changed, or none at or before LATEST checks out.
    """
    if which != "latest":
        verify_checkpoint(root / which)
        return root / which
    path, skipped = latest_verified(root)
    for line in skipped:
        say(line)
    return path


def saved_config(
    first: dict[str, Any], name: str, table: tuple[int, tuple[int, ...], str], config: OptimConfig | None
) -> OptimConfig | None:
    """The optimizer a checkpoint's table was saved with, once its shape fits the table's
    (num_rows, row_shape, dtype) and its optimizer the table's `config` (when both have one).

    Raises:
        DataError: naming the mismatch.
    """
    saved = (first["num_rows"], tuple(first["row_shape"]), first["dtype"])
    if saved != table:
        raise DataError(
            f"checkpoint of {name!r} is {saved[0]}x{saved[1]} {saved[2]}, the table is {table[0]}x{table[1]} "
            f"{table[2]}"
        )
    found = OptimConfig(**first["optimizer"]) if first["optimizer"] else None
    if config is not None and found is not None and config != found:
        raise DataError(f"checkpoint of {name!r} has optimizer {found}, the table {config}")
    return found


def restore_into(root: Path, t: TensorShard, verify: bool = True) -> bool:
    """Copy rows [t.lo, t.hi) and their optimizer state from the checkpoint. False if the tensor is not in it.

    Raises:
        DataError: shape, dtype or optimizer mismatch, incomplete coverage, or a changed file.
    """
    pieces = pieces_of(root, t.name)
    if not pieces:
        return False
    t.changed = None  # its rows are now a checkpoint's: the next checkpoint of it is full
    rows = t.num_rows if t.keyed is None else pieces[0][0]["num_rows"]  # a capacity may change
    config = saved_config(pieces[0][0], t.name, (rows, t.row_shape, t.dtype), t.config)
    if config is not None:
        t.config = config
        t.state = make_state(config, t.rows, t.row_shape[0], t.data.device)
    global_step = kd.global_step(config)
    if t.keyed is not None:
        _restore_keys(pieces, t, verify, global_step)
        return True
    for manifest, d in pieces:
        a, b = max(t.lo, manifest["lo"]), min(t.hi, manifest["hi"])
        overlap = a < b
        if not overlap and not global_step:  # the table-wide Adam step is read from every piece
            continue
        if verify:
            chain.verify_piece((root, manifest, d))
        src = slice(a - manifest["lo"], b - manifest["lo"]) if overlap else slice(0, 0)
        dst = slice(a - t.lo, b - t.lo)
        arrays = chain.load_piece((root, manifest, d), src)
        if overlap:
            _copy_into(t.data[dst], arrays["data"])
        for key, value in t.state.items():
            saved = arrays[f"state.{key}"]
            if key == "step" and global_step:
                value[0] = max(int(value[0]), int(saved[0]))
            elif overlap:
                _copy_into(value[dst], saved)
    return True


def _restore_keys(
    pieces: list[tuple[dict[str, Any], Path]], t: TensorShard, verify: bool, global_step: bool
) -> None:
    """A dynamic table's keys that this shard owns (key mod shards), from pieces of any shard count,
    with their rows and state; the table-wide Adam step is the largest of the pieces'."""
    shards, shard = t.keyed.shards, t.keyed.shard
    t.keyed.keymap = kd.KeyMap(t.keyed.keymap.capacity)
    arrays = {"data": t.data, **{k: v for k, v in t.state.items() if not (k == "step" and global_step)}}
    kd.restore_keyed(
        t.keyed.keymap, pieces, lambda keys: kd.owners(keys, shards) == shard, arrays, verify, t.keyed.what
    )
    if global_step:
        steps = [int(np.load(d / "state.step.npy", allow_pickle=False)[0]) for _, d in pieces]
        t.state["step"].fill_(max(steps))


def _copy_into(dst: torch.Tensor, src: np.ndarray) -> None:
    """Rows from a checkpoint file into a table or its state: mmap -> table, one copy (a GPU shard
    server's tensors take them through the host)."""
    if dst.device.type == "cpu":
        dst.numpy()[...] = src
    else:
        dst.copy_(torch.from_numpy(np.ascontiguousarray(src)))


def export_table(root: Path, name: str, verify: bool = True) -> np.ndarray:
    """The whole table `name` from a checkpoint, in (relabeled) row order.

    Raises:
        DataError: the tensor is not in the checkpoint, or a piece is missing or changed.
    """
    pieces = pieces_of(root, name)
    if not pieces:
        raise DataError(f"{root}: no tensor named {name!r} (has: {sorted(read_top(root)['tensors'])})")
    parts = []
    for manifest, d in pieces:
        if verify:
            chain.verify_piece((root, manifest, d))
        parts.append(np.asarray(chain.load_piece((root, manifest, d), keys=["data"])["data"]))
    return np.concatenate(parts)


def export_state(root: Path, name: str, verify: bool = True) -> dict[str, np.ndarray]:
    """The optimizer state of table `name` from a checkpoint, rows concatenated (the table-wide Adam
    step: the largest of the pieces')."""
    pieces = pieces_of(root, name)
    if not pieces:
        raise DataError(f"{root}: no tensor named {name!r}")
    out: dict[str, list[np.ndarray]] = {}
    for manifest, d in pieces:
        if verify:
            chain.verify_piece((root, manifest, d))
        arrays = chain.load_piece((root, manifest, d))
        for key in manifest["state"]:
            out.setdefault(key, []).append(np.asarray(arrays[f"state.{key}"]))
    result = {}
    for key, parts in out.items():
        global_step = key == "step" and all(p.shape == (1,) for p in parts)
        result[key] = np.array([max(int(p[0]) for p in parts)]) if global_step else np.concatenate(parts)
    return result


def export_keyed(root: Path, name: str, verify: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """(keys, rows) of a dynamic table in a checkpoint, keys ascending; None for a table of fixed rows."""
    pieces = pieces_of(root, name)
    if not pieces or not (pieces[0][1] / KEYS).exists():
        return None
    keys, rows = [], []
    for index, (manifest, d) in enumerate(pieces):
        if verify:
            chain.verify_piece((root, manifest, d))
        k = np.load(d / KEYS, allow_pickle=False)
        kd.check_keys(k, index, len(pieces), str(d))
        keys.append(k)
        rows.append(np.asarray(chain.load_piece((root, manifest, d), slice(len(k)), ["data"])["data"]))
    all_keys, all_rows = np.concatenate(keys), np.concatenate(rows)
    order = np.argsort(all_keys, kind="stable")
    return all_keys[order], all_rows[order]


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
    (gpu.save_chunked), and a dynamic table's keys."""

    def write(directory: Path, view: TensorShard) -> None:
        gpu.save_chunked(directory, view, live, stopped=stopped)
        save_keys(directory, view, keys)

    return write
