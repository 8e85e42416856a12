"""A shard server's checkpoints of its tables: written in place or in the background (copy-on-write
host tables, GPU tables copied on their device), their status, and a restore from any checkpoint
(ShardTensors, state.py, inherits these)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.checkpoint import snapshot as snap
from graphtrain.runtime.data.cache import Signature
from graphtrain.runtime.optim import OptimConfig
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage import placement as place
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.shard import TensorShard


class ShardCheckpoints:
    """Checkpoint, checkpoint_status and restore of a ShardTensors' tables."""

    shard: int
    tensors: dict[str, TensorShard]
    free: place.MemorySource
    background: snap.BackgroundCheckpoint | None
    staging_bytes: int
    checkpoint_rate: float
    full_every: int
    restore_from: Path | None  # the checkpoint tables are restored from as they are created
    trusted: dict[str, Signature]  # checkpoint files hashed before start (checkpoint/verified.py)
    _checkpoint_lock: threading.Lock

    _move: Callable[[TensorShard, OptimConfig | None, Any], None]  # ShardTensors' (state.py)

    def checkpoint(self, root: Path, background: bool = False) -> list[dict[str, Any]]:
        """Write every tensor's rows and optimizer state under `root` (atomic per piece). Node data
        loaded from the partition is left out (the partition files already hold it, unchanged), and so
        are scratch tensors (shard.SCRATCH_PREFIX: a computation's intermediate rows). A host
        table is written under its lock; a GPU table in chunks, each under the lock (gpu.save_chunked).
        `background`: host tables are only snapshotted (copy-on-write: snapshot.py) and GPU tables copied
        on their device (gpu.freeze), all written by a thread (a GPU table the device has no room to copy
        is written first, within the op); checkpoint_status(root) says when all are.
        One checkpoint at a time: a new one first waits for the one being written."""
        with self._checkpoint_lock:
            self._wait_background()
            # The tables restored from the start's checkpoint are now in this one, and the start's may be
            # pruned (a run keeps its last few): a table created from here on starts from its init.
            self.restore_from = None
            pieces, host, frozen = [], [], []
            for t in list(self.tensors.values()):
                if (t.from_partition and t.config is None) or t.scratch:
                    continue
                with t.lock:
                    if not t.data.is_cuda:
                        if background:
                            host.append(t)
                        else:
                            pieces.append(ckpt.write_piece(root, t))
                        continue
                    # this moment's tensors, config and rounding count
                    view = dataclasses.replace(t, state=dict(t.state), round_steps=t.round_steps.copy())
                    keys = None if t.keyed is None else t.keyed.keys()
                    copy = gpu.freeze(t, self.free(t.data.device)) if background else None
                if copy is not None:  # written by the background thread, from the copy
                    frozen.append((copy, lambda v, stop, k=keys: ckpt.write_frozen(root, v, k, stop)))
                    continue
                pieces.append(ckpt.write_piece(root, view, ckpt.gpu_writer(t, keys)))
            if background:  # the trainers are paused: no push comes between the GPU pieces and these
                self.background = snap.BackgroundCheckpoint(
                    str(root),
                    root,
                    host,
                    pieces,
                    self.staging_bytes,
                    self.checkpoint_rate,
                    self.full_every,
                    frozen=frozen,
                )
            return pieces

    def checkpoint_status(self, root: Path) -> dict[str, Any]:
        """How the background checkpoint under `root` goes: writing, done (with every piece) or failed.

        Raises:
            StorageError: this server is writing no such checkpoint (a restarted one lost it).
        """
        b = self.background
        if b is None or b.status.path != str(root):
            raise StorageError(
                f"shard {self.shard} is writing no checkpoint {root.name!r} (a restarted server loses the "
                "one it was writing)"
            )
        return b.status.reply()

    def _wait_background(self, timeout: float = 600.0) -> None:
        """The background checkpoint, if one is being written, ends first (bounded)."""
        if self.background is not None and not self.background.wait(timeout):
            raise StorageError(f"shard {self.shard}: the checkpoint being written took over {timeout:.0f} s")

    def restore(self, root: Path) -> list[str]:
        """Load every tensor this shard holds from a checkpoint written by any number of shards (a
        checkpoint still being written is abandoned first: it is of a timeline restoring leaves)."""
        with self._checkpoint_lock:
            if self.background is not None:
                self.background.abort()
        restored = []
        for t in self.tensors.values():
            with t.lock:
                gpu.wait_written(t)
                if ckpt.restore_into(root, t, trusted=self.trusted):
                    self._move(t, t.config, t.state)  # a checkpoint's optimizer takes it to the GPU
                    gpu.mark_written(t)
                    restored.append(t.name)
        return restored
