"""What a shard server says of itself: liveness (/livez), readiness (/readyz), its load (the metrics'
gauges) and the health reply (ShardServer, server.py, inherits these)."""

from __future__ import annotations

import threading
import time
from typing import Any

from graphtrain.runtime.kvstore.serving.fairqueue import FairQueue
from graphtrain.runtime.kvstore.serving.fastlane import FastLane
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire import fastwire

IO_STALE = 10.0  # seconds without an I/O loop turn: the server is deaf
READY_STALE = 3.0  # seconds without an I/O loop turn: not ready (it turns every IO_IDLE_MS when idle)


class ServerStatus:
    """The status side of a ShardServer."""

    state: ShardTensors
    address: str
    limits: Any
    fastlane: FastLane | None
    n_workers: int
    _threads: list[threading.Thread]
    _workers: list[threading.Thread]
    _busy: list[str | None]
    _fault: str
    _io_beat: float
    _last_done: float
    _closing: threading.Event
    _stop: threading.Event
    _queue: FairQueue
    _parked: list[Any]
    _parked_lock: threading.Lock

    def liveness(self, now: float | None = None) -> tuple[bool, str]:
        """(live, why): False when the server cannot answer any more, not when it is busy."""
        now = time.monotonic() if now is None else now
        if not self._threads:
            return False, "not started"
        if self._fault:
            return False, f"a sticky CUDA error, the GPU context is unusable: {self._fault}"
        if now - self._io_beat > IO_STALE:
            return False, f"the I/O thread has not turned for {now - self._io_beat:.0f} s"
        if self.fastlane is not None and self.fastlane.stalled(now) > IO_STALE:
            return False, f"the fast lane has not turned for {self.fastlane.stalled(now):.0f} s"
        dead = [t.name for t in self._workers if not t.is_alive()]
        if dead and not self._closing.is_set():
            return False, f"worker threads ended: {', '.join(dead)}"
        wait, idle = self._queue.oldest_wait(now), now - self._last_done
        if wait > self.limits.deaf_seconds and idle > self.limits.deaf_seconds:
            busy = ", ".join(op for op in self._busy if op) or "nothing"
            return (
                False,
                f"requests have waited {wait:.0f} s and no worker finished one in {idle:.0f} s ({busy})",
            )
        return True, "ok"

    def readiness(self, now: float | None = None) -> tuple[bool, str]:
        """(ready, why): the shard's rows are loaded (they are before the server starts: a partition, a
        restored checkpoint) and its request loop answers now: the I/O thread turned within
        READY_STALE seconds and the server is live. Served at /readyz, the StatefulSet's readiness
        probe: a cheap GET on the server itself where an exec probe spawned a 256 MB `graphtrain health`
        process every 10 s. Stricter than liveness: a server stops taking new clients seconds before
        the kubelet would restart it."""
        now = time.monotonic() if now is None else now
        if not self._threads or not self.address:
            return False, "not started"
        if self._stop.is_set():
            return False, "stopping"
        if not self._threads[0].is_alive() or now - self._io_beat > READY_STALE:
            return False, f"the request loop has not turned for {now - self._io_beat:.1f} s"
        live, why = self.liveness(now)
        if not live:
            return False, why
        return True, f"ready: shard {self.state.shard}, {len(self.state.tensors)} tables"

    def _load(self) -> dict[str, float]:
        with self._parked_lock:
            parked = len(self._parked)
        return {
            "queued_requests": self._queue.queued(),
            "busy_workers": sum(1 for op in self._busy if op),
            "parked_streams": parked,
            "live": float(self.liveness()[0]),
        }

    def health(self) -> dict[str, Any]:
        live, why = self.liveness()
        load = self._load()
        return {
            "shard": self.state.shard,
            "tensors": len(self.state.tensors),
            "live": live,
            "why": why,
            "workers": self.n_workers,
            "busy": int(load["busy_workers"]),
            "queued": int(load["queued_requests"]),
            "fast_port": self.fastlane.port if self.fastlane is not None else 0,
            "fast_path": (self.fastlane.path or "") if self.fastlane is not None else "",  # a Unix socket's
            "fast_version": fastwire.VERSION,  # the lane's wire (a server without it speaks version 1)
        }
