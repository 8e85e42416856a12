"""Incremental checkpoints, shard-server side: which rows of a host table were written since the last
checkpoint armed, and whether the next checkpoint's piece of it holds only those (a delta: chain.py).

Why: a checkpoint every few hundred steps of a job that touches few rows rewrites the whole table each
time; a delta writes the rows changed since (and their optimizer state), with the same copy-on-write
writer (snapshot.py), complete-or-absent and sha256 checks.

Every writer of a table's rows calls storage.shard.before_write under the table's lock, which marks them
here (Changed). When a background checkpoint is armed (trainers paused), plan() decides for each host
table, from pure rules (incremental): a delta on the previous armed checkpoint when that one is complete
(its checkpoint.json exists: its every piece was written), the chain stays within `full_every`
checkpoints, the table and its optimizer are as they were, and at most MAX_CHANGED of the rows changed
(else a delta is about as big as a full piece and only lengthens the chain); a full piece otherwise. A
restore, a new optimizer, a failed checkpoint or a server restart each make the next piece full. GPU
tables are always written full (gpu.save_chunked), and so are dynamic vocabularies (keyed.py: a row may
hold another key since the base).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.runtime.checkpoint.chain import TOP
from graphtrain.runtime.data.cache import read_json, sha256_file
from graphtrain.runtime.optim import OptimConfig
from graphtrain.runtime.storage.shard import TensorShard

FULL_EVERY = 5  # a full checkpoint, then at most 4 deltas (--checkpoint-full-every)
MAX_CHANGED = 0.5  # a table with more of its rows changed is written full


@dataclasses.dataclass
class Changed:
    """The rows of a table written since checkpoint `base` was armed, with what the table was then."""

    base: Path  # the checkpoint directory armed
    depth: int  # its piece's place in a chain: 0 full, n the n-th delta
    config: OptimConfig | None
    rows: int
    mask: np.ndarray  # a bool per local row


@dataclasses.dataclass(frozen=True)
class PieceRows:
    """What a checkpoint's piece of a table holds: every row (`rows` None), or the local `rows` on the
    base `delta` describes (the manifest's "delta": base, sha256, depth)."""

    rows: np.ndarray | None = None
    delta: dict[str, Any] | None = None


def incremental(depth: int, full_every: int, changed: int, rows: int, base_complete: bool) -> bool:
    """Whether the next piece of a table is a delta on the last one (of chain `depth`): that one is
    complete, the chain stays within `full_every` checkpoints, and at most MAX_CHANGED of the rows
    changed."""
    return base_complete and depth + 1 < full_every and changed <= MAX_CHANGED * rows


def _lists_piece(top: Path, t: TensorShard) -> bool:
    listed = read_json(top).get("tensors", {}).get(t.name, [])
    return any(p["lo"] == t.lo and p["hi"] == t.hi for p in listed)


def plan(t: TensorShard, root: Path, full_every: int) -> PieceRows:
    """Under the table's lock, as a checkpoint under `root` is armed: what its piece of `t` holds; from
    now on the rows changed count from this checkpoint."""
    c, out = t.changed, PieceRows()
    if (
        c is not None
        and t.keyed is None  # a dynamic vocabulary's rows move between keys: its pieces are whole
        and c.config == t.config
        and c.rows == t.rows
        and c.base.parent == root.parent
        and c.base != root
    ):
        top = c.base / TOP
        changed = int(np.count_nonzero(c.mask))
        if incremental(c.depth, full_every, changed, t.rows, top.is_file()) and _lists_piece(top, t):
            delta = {"base": c.base.name, "sha256": sha256_file(top), "depth": c.depth + 1}
            out = PieceRows(np.flatnonzero(c.mask), delta)
    depth = 0 if out.delta is None else out.delta["depth"]
    t.changed = Changed(root, depth, t.config, t.rows, np.zeros(t.rows, dtype=bool))
    return out


def positions(held: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Where in `held` (ascending local rows) each of `local` is, for those it holds."""
    pos = np.searchsorted(held, local)
    hit = pos < len(held)
    hit[hit] = held[pos[hit]] == local[hit]
    return pos[hit]
