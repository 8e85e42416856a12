"""A dynamic vocabulary's key map on the native core (cuda/src/keymap_cpu.cpp): int64 keys -> rows.

One KeyMap per shard of a dynamic table. `insert` hands out rows on first sight and, when the shard is
full, fails whole (KeyMapFull) or evicts the least recently used rows the batch does not use; `find`
looks keys up without inserting (evaluation, pulls of unseen keys). The caller holds the table's lock.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import core


class KeyMapFull(SparseInputError):
    """A dynamic table's shard has no free row and may not evict (or the batch alone exceeds it)."""


@dataclass(frozen=True)
class Inserted:
    rows: np.ndarray  # the row of each key
    evicted_keys: np.ndarray  # keys that lost their row to make room
    evicted_rows: np.ndarray  # ... and those rows, now holding new keys (to be reset to their init)


def _keys(keys: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(keys, dtype=np.int64)
    if arr.ndim != 1:
        raise SparseInputError(f"keys must be 1-D, got shape {arr.shape}")
    return arr


class KeyMap:
    """Keys -> rows [0, capacity) of one shard, with a tick per row for least-recently-used eviction."""

    @staticmethod
    def bytes_for(capacity: int) -> int:
        """Host memory of a key map of `capacity` rows (keymap_cpu.cpp: slots at most half full, a power of
        two >= 16, 16 bytes each; 16 bytes per row for its key and tick)."""
        slots = max(16, 1 << max(0, (2 * capacity - 1).bit_length()))
        return slots * 16 + capacity * 16

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"a key map needs a capacity >= 1, got {capacity}")
        self.capacity = capacity
        self._lib = core()
        self._map = self._lib.gt_keymap_new(capacity)
        if not self._map:
            raise MemoryError(f"no memory for a key map of {capacity:,} rows")
        self.tick = 0

    def __del__(self) -> None:
        if getattr(self, "_map", None):
            self._lib.gt_keymap_free(self._map)
            self._map = None

    def __len__(self) -> int:
        return int(self._lib.gt_keymap_size(self._map))

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The row of each key, -1 where the map does not hold it."""
        k = _keys(keys)
        rows = np.empty(len(k), dtype=np.int64)
        self._lib.gt_keymap_find(self._map, len(k), k.ctypes.data, rows.ctypes.data)
        return rows

    def keys(self) -> np.ndarray:
        """The key of each row in use, rows 0..len-1 (a checkpoint's keys)."""
        out = np.empty(len(self), dtype=np.int64)
        self._lib.gt_keymap_keys(self._map, out.ctypes.data)
        return out

    def insert(self, keys: np.ndarray, evict: bool, what: str = "key map") -> Inserted:
        """Rows for `keys`, inserting the new ones; a batch counts as one use of its rows.

        Raises:
            KeyMapFull: no room and evict is False, or the batch holds more distinct keys than the
                capacity; nothing was inserted. `what` names the table and shard in the message.
        """
        k = _keys(keys)
        self.tick += 1
        rows = np.empty(len(k), dtype=np.int64)
        ev_keys = np.empty(len(k), dtype=np.int64)
        ev_rows = np.empty(len(k), dtype=np.int64)
        n = self._lib.gt_keymap_insert(
            self._map,
            len(k),
            k.ctypes.data,
            rows.ctypes.data,
            ctypes.c_uint64(self.tick),
            int(evict),
            ev_keys.ctypes.data,
            ev_rows.ctypes.data,
        )
        if n == -1:
            raise KeyMapFull(f"{what} is full: capacity {self.capacity:,} rows, all in use (onFull: error)")
        if n == -2:
            raise KeyMapFull(
                f"{what}: one batch holds more distinct keys than its capacity of {self.capacity:,} rows"
            )
        return Inserted(rows, ev_keys[:n], ev_rows[:n])
