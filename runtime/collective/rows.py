"""Which local row holds a key, on the rank that owns it: the one difference between a fixed and a
dynamic vocabulary of a collective table.

- Fixed: keys 0..num_embeddings-1; rank r owns key k = r + j*W at row j = k // W.
- Dynamic (`vocabulary: {kind: dynamic, capacity}`): any int64 key; rank r owns the keys k with
  k mod W = r and maps them to its ceil-share of the capacity with a native key map, inserting on a
  training lookup (first sight) and never on an evaluation one (an unseen key reads its initial value).
  A full shard refuses the batch naming table, shard and capacity (`onFull: error`) or evicts its least
  recently used rows (`onFull: evict`), which start again from the new key's initial value and state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.collective import exchange as ex
from graphtrain.runtime.native.keymap import KeyMap, KeyMapFull
from graphtrain.runtime.optim.state import make_state
from graphtrain.runtime.storage.keyed import global_step, start_rows


@dataclass
class FixedKeys:
    num_embeddings: int
    world: int

    def capacity(self, rank: int) -> int:
        return ex.shard_rows(self.num_embeddings, self.world, rank)

    def refuse(self, keys: torch.Tensor, what: str) -> str:
        """Why `keys` cannot be looked up ('' when they can)."""
        bad = (keys < 0) | (keys >= self.num_embeddings)
        if len(keys) and bool(bad.any()):
            pos = int(torch.nonzero(bad)[0])
            return f"{what}: id {int(keys[pos])} is outside the table's rows [0, {self.num_embeddings})"
        return ""

    def lookup(self, keys: torch.Tensor, insert: bool) -> torch.Tensor:
        return ex.local_rows(keys, self.world)

    def update(self, keys: torch.Tensor) -> torch.Tensor:
        return ex.local_rows(keys, self.world)


@dataclass
class DynamicKeys:
    """A rank's share of a dynamic vocabulary; `table` is the CollectiveEmbedding whose weight and
    state rows it (re)initialises."""

    table: Any
    capacity_total: int
    evict: bool
    init: dict[str, Any]
    keymap: KeyMap = field(init=False)
    dropped: int = 0  # gradients of keys evicted between their lookup and the step

    def __post_init__(self) -> None:
        self.keymap = KeyMap(max(1, self.capacity(self.table.rank)))

    def capacity(self, rank: int) -> int:
        return ex.shard_rows(self.capacity_total, self.table.world, rank)

    def refuse(self, keys: torch.Tensor, what: str) -> str:
        return ""

    def lookup(self, keys: torch.Tensor, insert: bool) -> torch.Tensor:
        """Rows of `keys`; -1 for keys not held when not inserting.

        Raises:
            KeyMapFull: the shard is full and may not evict; nothing was inserted.
        """
        k = keys.cpu().numpy()
        if not insert:
            return torch.from_numpy(self.keymap.find(k)).to(keys.device)
        before = len(self.keymap)
        t = self.table
        what = f"table {t.name!r} shard {t.rank} of {t.world}"
        done = self.keymap.insert(k, self.evict, what)
        fresh = (done.rows >= before) | np.isin(done.rows, done.evicted_rows)
        if fresh.any():
            rows, first = np.unique(done.rows[fresh], return_index=True)
            self.reset(torch.from_numpy(rows), k[fresh][first])
        return torch.from_numpy(done.rows).to(keys.device)

    def update(self, keys: torch.Tensor) -> torch.Tensor:
        """Rows of keys a lookup of this step inserted (-1 where a later lookup evicted them)."""
        rows = torch.from_numpy(self.keymap.find(keys.cpu().numpy())).to(keys.device)
        self.dropped += int((rows < 0).sum())
        return rows

    def reset(self, rows: torch.Tensor, keys: np.ndarray) -> None:
        """Rows that now hold `keys`: their initial values and a fresh optimizer state."""
        t = self.table
        rows = rows.to(t.device)
        with torch.no_grad():
            t.weight[rows] = self.start(keys).to(t.device, t.weight.dtype)
            if t.config is not None:
                fresh = make_state(t.config, len(rows), t.dim, t.device)
                for name, value in t.state.items():
                    if not (name == "step" and global_step(t.config)):
                        value[rows] = fresh[name]

    def initial(self, keys: torch.Tensor) -> torch.Tensor:
        return self.start(keys.cpu().numpy()).to(keys.device)

    def start(self, keys: np.ndarray) -> torch.Tensor:
        """The rows `keys` start from, as on a shard server (kvstore/keyed.start_rows)."""
        return torch.from_numpy(start_rows(self.init, keys, self.table.dim, self.table.config))


__all__ = ["DynamicKeys", "FixedKeys", "KeyMapFull"]
