"""What a shard server holds of one table: its rows, their optimizer state and the row lock.

Its own module so that the shard state (state.py) and the checkpoint format (checkpoint.py), which
both handle it, do not import each other.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.optim import OptimConfig
from graphtrain.runtime.storage.tablelock import NativeLock, new_lock

# Tensors named so hold a computation's intermediate rows (train/layerwise.py: each GNN layer's output
# over the whole graph): never checkpointed, so never restored.
SCRATCH_PREFIX = "scratch:"
# what the fast lane's step description holds or depends on (serving/fastlane.py: describe)
LANE_WATCHED = frozenset(
    ("data", "config", "state", "snapshot", "keyed", "changed", "lo", "hi", "lock", "name", "round_steps")
)


@dataclass
class TensorShard:
    """Rows [lo, hi) of the global tensor `name` of shape (num_rows, *row_shape)."""

    name: str
    num_rows: int
    row_shape: tuple[int, ...]
    dtype: str
    lo: int
    hi: int
    data: torch.Tensor
    config: OptimConfig | None = None
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    lock: NativeLock | threading.Lock = field(default_factory=new_lock)  # one writer per row (tablelock.py)
    shm: shared_memory.SharedMemory | None = None
    from_partition: bool = False  # node data loaded from the partition files: not checkpointed
    written: Any = None  # a GPU table's last write, a torch.cuda.Event (gpu.py: the order across streams)
    # a checkpoint being written in the background (snapshot.TableSnapshot): every writer of rows calls
    # its preserve(local rows) under the lock before writing them
    snapshot: Any = None
    keyed: Any = None  # a dynamic vocabulary's key map (keyed.KeyedRows): ids are keys, not rows
    changed: Any = None  # rows written since the last checkpoint armed (increment.Changed; host tables)
    # optimizer steps applied here, a half table's rounding seed (round_seed): in memory the fast lane,
    # which steps pushes on its own thread, increments too (serving/fastlane.py: describe); changed in
    # place only, as the lane may hold its address
    round_steps: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64), repr=False)

    def __setattr__(self, name: str, value: Any) -> None:
        """A change to what the fast lane's description of the step points at makes it stale: the lane
        leaves the table's pushes to the Python path until it is described again (tablelock.py)."""
        if name == "round_steps" and self.__dict__.get("_live"):
            raise AttributeError("round_steps is counted in place: the fast lane may hold its address")
        old = self.__dict__.get("lock") if name == "lock" else None
        object.__setattr__(self, name, value)
        if name in LANE_WATCHED and self.__dict__.get("_live"):  # not while __init__ fills a copy in
            for lock in (self.__dict__.get("lock"), old):  # a replaced lock: the lane's is the old one
                if isinstance(lock, NativeLock):
                    lock.stale()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_live", True)

    @property
    def steps(self) -> int:
        return int(self.round_steps[0])

    @property
    def seed_base(self) -> int:
        """The high half of every rounding seed of this table piece: from its name and rows."""
        return zlib.crc32(f"{self.name}:{self.lo}".encode()) << 32

    def round_seed(self) -> int:
        """The next step's stochastic-rounding seed of a half table (optim_math.h): new every step, and
        different per table and piece, from the name, the rows and the count (no process state). The
        fast lane counts and seeds its steps the same way (fastlane_requests.cpp: push)."""
        self.round_steps[0] += 1
        return self.seed_base | (self.steps & 0xFFFFFFFF)

    @property
    def rows(self) -> int:
        return self.hi - self.lo

    @property
    def scratch(self) -> bool:
        return self.name.startswith(SCRATCH_PREFIX)

    def release(self) -> None:
        """Unmap and unlink the table's shared-memory segment, if it has one."""
        if self.shm is not None:
            self.data = torch.empty(0)
            with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped when it goes
                self.shm.close()
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
            self.shm = None

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_rows": self.num_rows,
            "row_shape": list(self.row_shape),
            "dtype": self.dtype,
            "lo": self.lo,
            "hi": self.hi,
            "bytes": self.data.numel() * self.data.element_size(),
            "optimizer": None if self.config is None else self.config.kind,
            "shm": None if self.shm is None else self.shm.name,
            "keys": None if self.keyed is None else len(self.keyed.keymap),
            # gradients of keys evicted between their pull and their push, dropped
            "dropped": None if self.keyed is None else self.keyed.dropped,
        }


def before_write(t: TensorShard, local: np.ndarray | torch.Tensor) -> None:
    """Call under the table's lock before writing its local rows `local`: a checkpoint being written
    keeps their old values first (checkpoint/snapshot.py), and they count as changed for the next one.
    Rows on a GPU are read back only when something tracks them (GPU tables are written whole: nothing
    does, so a GPU push waits for no copy here)."""
    if t.snapshot is None and t.changed is None:
        return
    if isinstance(local, torch.Tensor):
        local = local.cpu().numpy()
    if t.snapshot is not None:
        t.snapshot.preserve(local)
    if t.changed is not None:
        t.changed.mask[local] = True
