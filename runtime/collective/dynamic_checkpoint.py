"""Checkpoints of collective tables with a dynamic vocabulary: each rank writes its share's rows in use
(rows, optimizer state and keys.npy, the key of each of them; the manifest's "rows" says how many), in
the shard servers' piece format: the pieces' ranges tile [0, capacity). Restoring into any number of
ranks, each rank reads every piece's keys, keeps those it owns (key mod world size), inserts them into
its key map in order and copies their rows and state. checkpoint/'s export_keyed reads (keys, rows)
back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.collective.embedding import CollectiveEmbedding
from graphtrain.runtime.collective.rows import DynamicKeys
from graphtrain.runtime.dtypes import to_numpy
from graphtrain.runtime.native.keymap import KeyMap
from graphtrain.runtime.storage.keyed import KEYS, owners, restore_keyed
from graphtrain.runtime.storage.shard import TensorShard


def share_range(t: CollectiveEmbedding, rank: int) -> tuple[int, int]:
    """Rank `rank`'s slice of [0, capacity): the shares of the ranks before it, then its own."""
    place = t.place
    assert isinstance(place, DynamicKeys)
    lo = sum(place.capacity(q) for q in range(rank))
    return lo, lo + place.capacity(rank)


def save(
    t: CollectiveEmbedding, root: Path, arrays: dict[str, torch.Tensor], global_step: bool
) -> list[dict[str, Any]]:
    """Write this rank's piece of `t` (no exchange); the descriptions of every rank's pieces."""
    lo, hi = share_range(t, t.rank)
    steps = np.array([t.steps], dtype=np.int64)  # a half table's rounding count
    view = TensorShard(
        t.name,
        t.num_embeddings,
        (t.dim,),
        t.wire,
        lo,
        hi,
        t.weight,
        t.config,
        dict(t.state),
        round_steps=steps,
    )

    def write(directory: Path, _: TensorShard) -> None:
        keys = t.keys.cpu().numpy()  # rows 0..len(keys)-1 are in use: only those are written
        for key, value in arrays.items():
            name = "data.npy" if key == "data" else f"state.{key}.npy"
            np.save(directory / name, to_numpy(value[: len(keys)].cpu()))
        if global_step:
            np.save(directory / "state.step.npy", t.state["step"].cpu().numpy())
        np.save(directory / KEYS, keys)

    ckpt.write_piece(root, view, write)
    return [ckpt.piece_entry(root, t.name, *share_range(t, q)) for q in range(t.world)]


def restore(
    t: CollectiveEmbedding,
    pieces: list[tuple[dict[str, Any], Path]],
    arrays: dict[str, torch.Tensor],
    verify: bool,
) -> None:
    """Load the keys this rank owns, with their rows and state, from `pieces` (of any world size).

    Raises:
        DataError: a piece has no keys (not a dynamic table's), or this rank's share cannot hold its keys.
    """
    place = t.place
    assert isinstance(place, DynamicKeys)
    place.keymap = KeyMap(place.keymap.capacity)  # the checkpoint's keys, and only those
    what = f"table {t.name!r} shard {t.rank} of {t.world}"
    restore_keyed(place.keymap, pieces, lambda keys: owners(keys, t.world) == t.rank, arrays, verify, what)
