"""Reading checkpoints back: a shard's rows and state restored from the pieces that overlap its range
(whatever the number of shards that wrote them), and a whole table exported in row order."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from graphtrain.runtime.checkpoint import chain
from graphtrain.runtime.data.cache import Signature
from graphtrain.runtime.dtypes import to_numpy, widened
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.optim import make_state
from graphtrain.runtime.storage import keyed as kd
from graphtrain.runtime.storage.keyed import KEYS
from graphtrain.runtime.storage.shard import TensorShard

if TYPE_CHECKING:
    pass
from graphtrain.runtime.checkpoint.points import pieces_of, read_top, saved_config, saved_round_steps


def restore_into(
    root: Path, t: TensorShard, verify: bool = True, trusted: Mapping[str, Signature] | None = None
) -> bool:
    """Copy rows [t.lo, t.hi) and their optimizer state from the checkpoint. False if the tensor is not in it.
    `trusted`: files hashed before start and not hashed again while unchanged (verified.py).

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
    _restore_round_steps(pieces, t)
    if t.keyed is not None:
        _restore_keys(pieces, t, verify, global_step)
        return True
    kd.refuse_keyed(pieces, t.name)
    for manifest, d in pieces:
        a, b = max(t.lo, manifest["lo"]), min(t.hi, manifest["hi"])
        overlap = a < b
        if not overlap and not global_step:  # the table-wide Adam step is read from every piece
            continue
        if verify:
            chain.verify_piece((root, manifest, d), trusted=trusted)
        src = slice(a - manifest["lo"], b - manifest["lo"]) if overlap else slice(0, 0)
        dst = slice(a - t.lo, b - t.lo)
        arrays = chain.load_piece((root, manifest, d), src)
        if overlap:
            dtype = str(manifest.get("dtype", "float32"))
            kd.refuse_nonfinite(arrays["data"], dtype, d / "data.npy", lambda i, a=a: f"row {a + i}")
            _copy_into(t.data[dst], arrays["data"])
        for key, value in t.state.items():
            saved = arrays[f"state.{key}"]
            if key == "step" and global_step:
                value[0] = max(int(value[0]), int(saved[0]))
            elif overlap:
                _copy_into(value[dst], saved)
    return True


def _restore_round_steps(pieces: list[tuple[dict[str, Any], Path]], t: TensorShard) -> None:
    """A half table's rounding count, set in place (the fast lane may hold its address), so that a
    resumed run rounds as the uninterrupted one."""
    t.round_steps[0] = saved_round_steps(pieces, t.lo, t.hi)


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
    if src.dtype != to_numpy(dst[:0].cpu()).dtype:  # _checked held the file to its manifest; this, the table
        raise DataError(f"checkpoint rows of {src.dtype} cannot fill a table of {dst.dtype}")
    if dst.device.type == "cpu":
        to_numpy(dst)[...] = src  # a bfloat16 table's bits from its file's
    else:
        dst.copy_(torch.from_numpy(np.ascontiguousarray(src)).view(dst.dtype))


def export_table(root: Path, name: str, verify: bool = True) -> np.ndarray:
    """The whole table `name` from a checkpoint, in (relabeled) row order; a half table's rows widened
    to float32 (it is stored in its own dtype).

    Raises:
        DataError: the tensor is not in the checkpoint, or a piece is missing or changed.
    """
    pieces = pieces_of(root, name)
    if not pieces:
        held = ", ".join(sorted(read_top(root)["tensors"])) or "none"
        raise DataError(f"{root}: no table named {name!r} (it holds: {held})")
    parts = []
    for manifest, d in pieces:
        if verify:
            chain.verify_piece((root, manifest, d))
        data = np.asarray(chain.load_piece((root, manifest, d), keys=["data"])["data"])
        parts.append(widened(data, manifest.get("dtype", "float32")))
    return np.concatenate(parts)


def export_state(root: Path, name: str, verify: bool = True) -> dict[str, np.ndarray]:
    """The optimizer state of table `name` from a checkpoint, rows concatenated (the table-wide Adam
    step: the largest of the pieces')."""
    pieces = pieces_of(root, name)
    if not pieces:
        raise DataError(f"{root}: no table named {name!r}")
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
    """(keys, rows) of a dynamic table in a checkpoint, keys ascending, a half table's rows widened to
    float32; None for a table of fixed rows."""
    pieces = pieces_of(root, name)
    if not pieces or not (pieces[0][1] / KEYS).exists():
        return None
    keys, rows = [], []
    for index, (manifest, d) in enumerate(pieces):
        if verify:
            chain.verify_piece((root, manifest, d))
        k = kd.piece_keys(manifest, d, index, len(pieces))
        keys.append(k)
        data = np.asarray(chain.load_piece((root, manifest, d), slice(len(k)), ["data"])["data"])
        rows.append(widened(data, manifest.get("dtype", "float32")))
    all_keys, all_rows = np.concatenate(keys), np.concatenate(rows)
    order = np.argsort(all_keys, kind="stable")
    return all_keys[order], all_rows[order]
