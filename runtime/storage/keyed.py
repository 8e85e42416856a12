"""A shard server's table with a dynamic vocabulary (`vocabulary: {kind: dynamic}`, `sharding: server`).

The client routes key k to shard k mod S (not by the partition book: the keys are arbitrary int64).
Each shard holds its share of the capacity as rows [lo, hi) of [0, capacity) (the shares of the shards
before it, then its own: the pieces of a checkpoint tile [0, capacity) as a fixed table's do) and maps
its keys to those rows with the native key map (native/keymap.py):
- a training pull (and an overwrite) inserts unseen keys; a row a key takes starts from the key's
  initial value (inits.init_keyed: a function of the key alone, whichever shard inserts it) and a fresh
  optimizer state; a full shard refuses the request, naming table, shard and capacity (`onFull:
  error`), or gives its least recently used rows to the new keys (`onFull: evict`);
- an evaluation pull inserts nothing: an unseen key reads its initial value;
- a gradient push updates the rows its keys hold now; the gradient of a key evicted since its pull
  is dropped and counted (the collective tables' rule: collective/rows.py).
There is no shared-memory fast path for these tables: the mapping lives in the server process.
Checkpoints write keys.npy beside the rows (the key of each row in use) and restore into any number
of shards by key mod S (restore_keyed, shared with the collective tables)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.data.cache import verify_files
from graphtrain.runtime.dtypes import HALF, NUMPY, from_numpy, narrowed, nonfinite_rows, wire_name
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.native.keymap import KeyMap, KeyMapFull
from graphtrain.runtime.optim.config import OptimConfig
from graphtrain.runtime.optim.state import make_state
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.inits import init_keyed
from graphtrain.runtime.storage.keyspace import (
    KEYS,
    check_keys,
    nonfinite_refused,
    owners,
    piece_keys,
    read_keys,
)
from graphtrain.runtime.storage.shard import before_write
from graphtrain.runtime.storage.sizes import share


def share_bounds(capacity: int, shards: int) -> np.ndarray:
    """The shards' slices of [0, capacity): shard s holds rows [b[s], b[s+1])."""
    return np.concatenate([[0], np.cumsum([share(capacity, shards, s) for s in range(shards)])]).astype(
        np.int64
    )


def start_rows(init: dict[str, Any], keys: np.ndarray, dim: int, config: OptimConfig | None) -> np.ndarray:
    """The rows a dynamic vocabulary's `keys` start from, on a shard server or a trainer alike: their
    init values, scaled to the optimizer's row norm when it has one (KGE entities start on the sphere)."""
    rows = init_keyed(init, keys, dim)
    norm = config.row_norm if config is not None else 0.0
    if norm:
        rows *= norm / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows


def global_step(config: OptimConfig | None) -> bool:
    """Adam counting its steps per table: one count, not a row of state."""
    return config is not None and config.kind == "adam" and config.step_count == "global"


@dataclass
class KeyedRows:
    """The key map of one shard's dynamic table, and what a key taking a row does to the row."""

    name: str
    shard: int
    shards: int
    capacity: int  # this shard's rows
    evict: bool
    init: dict[str, Any]
    keymap: KeyMap = field(init=False)
    dropped: int = 0  # gradients of keys evicted between their pull and their push

    def __post_init__(self) -> None:
        self.keymap = KeyMap(max(1, self.capacity))

    @property
    def what(self) -> str:
        """How errors name this shard of the table."""
        return f"table {self.name!r} shard {self.shard} of {self.shards}"

    def keys(self) -> np.ndarray:
        """The key of each row in use, rows 0..len-1 (what a checkpoint writes)."""
        return self.keymap.keys()

    def lookup(self, t: Any, keys: np.ndarray, insert: bool) -> np.ndarray:
        """The local rows of `keys` (call under t's lock): inserting unseen keys (their rows reset to
        the keys' initial values and a fresh state), or -1 for keys not held when not inserting.

        Raises:
            KeyMapFull: the shard is full and may not evict; nothing was inserted.
        """
        if not insert:
            return self.keymap.find(keys)
        before = len(self.keymap)
        done = self.keymap.insert(keys, self.evict, self.what)
        fresh = done.rows >= before
        if len(done.evicted_rows):
            fresh |= np.isin(done.rows, done.evicted_rows)
        if fresh.any():
            rows, first = np.unique(done.rows[fresh], return_index=True)
            self.reset(t, rows, keys[fresh][first])
        return done.rows

    def update(self, keys: np.ndarray) -> np.ndarray:
        """Rows of the keys of a gradient push, -1 where a key lost its row since its pull (counted)."""
        rows = self.keymap.find(keys)
        self.dropped += int((rows < 0).sum())
        return rows

    def start(self, keys: np.ndarray, dim: int, config: OptimConfig | None) -> np.ndarray:
        return start_rows(self.init, keys, dim, config)

    def reset(self, t: Any, rows: np.ndarray, keys: np.ndarray) -> None:
        """Rows that now hold `keys`: a checkpoint being written keeps their old values first."""
        before_write(t, rows)
        dev = t.data.device
        local = torch.from_numpy(rows).to(dev)
        values = torch.from_numpy(self.start(keys, t.row_shape[0], t.config)).to(dev, t.data.dtype)
        gpu.wait_written(t)  # a GPU table: after its last write, whichever stream made it
        with torch.no_grad():
            t.data.index_copy_(0, local, values)
            if t.config is not None:
                fresh = make_state(t.config, len(rows), t.row_shape[0], dev)
                for name, value in t.state.items():
                    if not (name == "step" and global_step(t.config)):
                        value.index_copy_(0, local, fresh[name])
        gpu.mark_written(t)


def check_create(
    name: str, shard: int, keyed: dict[str, Any], lo: int, hi: int, row_shape: tuple[int, ...], dtype: str
) -> None:
    """A dynamic table this shard can hold: its own share of rows, float32 (or half: rounded from a key's
    float32 initial row) rows of one dimension (what a fresh optimizer state is made for).

    Raises:
        StorageError: naming what is wrong.
    """
    if not (shard < keyed["shards"] and lo < hi):
        raise StorageError(f"dynamic table {name!r}: shard {shard} of {keyed['shards']} rows [{lo}, {hi})")
    if dtype not in ("float32", *HALF) or len(row_shape) != 1:
        raise StorageError(
            f"dynamic table {name!r} must have float32, float16 or bfloat16 rows of one dimension, "
            f"got {dtype} {list(row_shape)}"
        )


def check_attach(t: Any, keyed: dict[str, Any] | None) -> None:
    """An existing table is attached only as what it is: fixed, or dynamic over as many shards with the
    same onFull.

    Raises:
        StorageError: the description differs.
    """
    if t.keyed is None and not keyed:
        return
    have = None if t.keyed is None else {"shards": t.keyed.shards, "evict": t.keyed.evict}
    if have != (keyed or None):
        raise StorageError(
            f"tensor {t.name!r} exists as dynamic vocabulary {have}; asked for {keyed or None}"
        )


def fill_unseen(rows: np.ndarray, keys: np.ndarray, local: np.ndarray, keyed: KeyedRows, t: Any) -> None:
    """Rows of a pull that read no row (local -1: keys the shard does not hold) get their initial
    values in place (a half table's rounded to nearest, as a key taking a row stores them)."""
    missing = local < 0
    if missing.any():
        start = keyed.start(keys[missing], t.row_shape[0], t.config)
        rows[missing] = narrowed(start, t.dtype) if t.dtype in HALF else start


def rows_of(t: Any, keys: np.ndarray, insert: bool) -> torch.Tensor:
    """Local rows of a dynamic table's keys (under t's lock; -1: not held, when not inserting).

    Raises:
        StorageError: keys not 1-D int64, a key of another shard, or the shard full (onFull: error).
    """
    if keys.ndim != 1 or keys.dtype != np.int64:
        raise StorageError(f"keys must be a 1-D int64 array, got {keys.dtype} {keys.shape}")
    shard, shards = t.keyed.shard, t.keyed.shards
    bad = np.flatnonzero(owners(keys, shards) != shard)
    if bad.size:
        key = int(keys[bad[0]])
        raise StorageError(f"key {key} of {t.name!r} belongs to shard {key % shards}, not {shard}")
    try:
        return torch.from_numpy(t.keyed.lookup(t, keys, insert))
    except KeyMapFull as exc:
        raise StorageError(str(exc)) from None


def held(t: Any, keys: np.ndarray, grads: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A dynamic table's rows for a gradient push in one piece (under t's lock), leaving out the keys
    evicted since their pull (counted: KeyedRows.dropped). The rows are mapped on the host and handed
    over on the table's device (a GPU server's step wants its ids where its rows are)."""
    rows = t.keyed.update(keys)
    keep = rows >= 0
    device = t.data.device
    if keep.all():
        return gpu.to_device(rows, device), grads
    return gpu.to_device(rows[keep], device), [grads[0][torch.from_numpy(keep).to(grads[0].device)]]


def refuse_keyed(pieces: Sequence[tuple[dict[str, Any], Path]], name: str) -> None:
    """A table of fixed rows is never loaded from a dynamic vocabulary's pieces: their rows are keys'
    (rows 0..n-1 of each share, in insertion order), not the table's rows by position.

    Raises:
        DataError: naming the table and the piece.
    """
    for _, d in pieces:
        if (d / KEYS).exists():
            raise DataError(
                f"{d}: table {name!r} is a dynamic vocabulary's in the checkpoint (keys.npy) and has fixed "
                "rows in the spec: give it the vocabulary it was trained with"
            )


def restore_keyed(
    keymap: KeyMap,
    pieces: Sequence[tuple[dict[str, Any], Path]],
    mine: Callable[[np.ndarray], np.ndarray],
    arrays: dict[str, torch.Tensor],
    verify: bool,
    what: str,
) -> None:
    """Insert the checkpoint's keys that `mine` selects (a bool mask of a piece's keys) into `keymap` in
    order, and copy their rows and state into `arrays` ("data" -> data.npy, a state key -> its file).
    `keymap` must be empty: a restore holds the checkpoint's keys, and only those.

    Raises:
        DataError: a piece holds no keys (not a dynamic table's), or the shard cannot hold its keys.
    """
    for index, (manifest, d) in enumerate(pieces):
        if verify:
            verify_files(d, manifest["files"])
        keys = piece_keys(manifest, d, index, len(pieces))  # verify_checkpoint's check, too
        take = np.nonzero(mine(keys))[0]
        if not len(take):
            continue
        if len(keymap) + len(take) > keymap.capacity:
            raise DataError(
                f"{what}: the checkpoint holds more of its keys than its capacity of {keymap.capacity:,} rows"
            )
        rows = torch.from_numpy(keymap.insert(keys[take], evict=False).rows)
        for key, value in arrays.items():
            name = "data.npy" if key == "data" else f"state.{key}.npy"
            src = np.ascontiguousarray(np.load(d / name, mmap_mode="r")[take])
            rows_here = _as_tensor(src, value.dtype, f"{d / name}")  # the file's type is the table's
            if key == "data":
                named = keys[take]
                refuse_nonfinite(src, str(wire_name(value.dtype)), d / name, lambda i, k=named: f"key {k[i]}")
            value.index_copy_(0, rows.to(value.device), rows_here.to(value.device))


def refuse_nonfinite(rows: np.ndarray, dtype: str, path: Path, row_name: Callable[[int], str]) -> None:
    """Refuse a checkpoint file's rows (of wire type `dtype`; `row_name(i)` names the i-th) holding NaN or
    infinity: training never writes one (a push holding one is refused or skipped), so such a checkpoint
    was changed, and restored it failed later as an inference's refused push of its layer outputs, naming
    no table. A bfloat16 table's rows are their bits (int16), read as such (dtypes.nonfinite_rows).

    Raises:
        DataError: naming the file and the first such row."""
    bad = nonfinite_rows(np.asarray(rows), dtype)
    if bad.any():
        raise nonfinite_refused(path, int(bad.sum()), row_name(int(np.argmax(bad))))


def _as_tensor(array: np.ndarray, dtype: torch.dtype, where: str) -> torch.Tensor:
    """A checkpoint file's rows as a tensor of the table's `dtype` (a bfloat16 table's file holds its
    bits as int16); any other element type is refused, never converted.

    Raises:
        DataError: the file's element type is not the table's.
    """
    wire = wire_name(dtype)
    if wire is None or array.dtype != NUMPY[wire]:
        raise DataError(f"{where}: holds {array.dtype}, the table is {dtype}")
    return from_numpy(array, wire)


__all__ = [
    "KEYS",
    "read_keys",
    "refuse_keyed",
    "refuse_nonfinite",
    "KeyMapFull",
    "KeyedRows",
    "check_attach",
    "check_create",
    "check_keys",
    "fill_unseen",
    "held",
    "owners",
    "piece_keys",
    "restore_keyed",
    "rows_of",
    "share",
    "share_bounds",
    "start_rows",
]
