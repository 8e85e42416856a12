"""The shard server's reusable pull buffers (server.py's workers fill them, ZMQ sends them zero-copy)."""

from __future__ import annotations

import threading

import torch


class ChunkBuffers:
    """Reusable pull buffers, shared by the workers. A chunk handed to ZMQ zero-copy comes back once its
    tracker says ZMQ is done with it; fresh buffers per chunk would be faulted in page by page. Sizes are
    powers of two from 64 KB, so a 1,000-row pull holds 512 KB, not a whole 4 MB chunk. `pinned` (a GPU
    server): page-locked, so device-to-host copies into them run at full speed without blocking."""

    def __init__(self, keep: int = 16, pinned: bool = False):
        self.keep = keep
        self.pinned = pinned
        self._free: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> torch.Tensor:
        size = 1 << max(16, (max(nbytes, 1) - 1).bit_length())
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.numel() == size:
                    return self._free.pop(i)
        return torch.empty(size, dtype=torch.uint8, pin_memory=self.pinned)

    def give(self, buf: torch.Tensor) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(buf)
