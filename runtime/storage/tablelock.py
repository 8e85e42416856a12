"""A shard table's lock, native where the core is built: the lock the shard server's fast lane shares.

Why. The fast lane (cuda/src/fastlane.cpp) steps gradient pushes on its own native thread, without the
GIL. The rows it writes are also written by the server's Python threads, under `with t.lock`. One lock
for both means the lock lives in the core (cuda/src/table_lock.h) and Python takes it through ctypes,
which lets the GIL go while it waits. It behaves as threading.Lock: not owned, so any thread may
release it; `acquire(blocking, timeout)`; a context manager. Unlike it, a wait for a held lock is not
interrupted by a signal (servers wait on worker threads, never on the main one).

It also carries the lane's description of the table's step (describe): written while the lock is
held, and made stale by any change to what it points at (TensorShard.__setattr__ calls `stale`). A
stale table's pushes go over ZMQ until the lane's owner describes it again (serving/fastlane.py).
Without the native core, tables get a threading.Lock and no lane.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from types import TracebackType
from typing import Any


@functools.lru_cache(maxsize=4)
def _holding_gil(path: str) -> Any:
    """The core's lock calls that never wait, bound so that they keep the GIL: a ctypes.CDLL call lets
    it go and must take it back after, which behind another thread's turn costs up to the switch
    interval (5 ms) a call, twice a push on a server's I/O thread."""
    from graphtrain.runtime.native.abi import SIGNATURES  # the one declaration of each entry point

    lib = ctypes.PyDLL(path)  # the library core() loaded and checked
    for name in ("gt_lock_acquire", "gt_lock_release", "gt_lock_locked", "gt_lock_stale"):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = SIGNATURES[name].restype, SIGNATURES[name].argtypes
    return lib


class NativeLock:
    __slots__ = ("_core", "_fast", "_ptr", "described", "__weakref__")

    def __init__(self, core: Any) -> None:
        ptr = core.gt_lock_new()
        if not ptr:
            raise MemoryError("the native core could not allocate a table lock")
        self._core, self._fast, self._ptr = core, _holding_gil(core._name), ptr
        self.described = False  # whether the lane holds a current description of the table's step

    @property
    def pointer(self) -> int:
        return int(self._ptr)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if self._fast.gt_lock_acquire(self._ptr, 0, 0.0):  # free: taken without letting the GIL go
            return True
        if not blocking or timeout == 0:
            return False
        wait = -1.0 if timeout < 0 else float(timeout)
        return bool(self._core.gt_lock_acquire(self._ptr, 1, wait))  # waits with the GIL released

    def release(self) -> None:
        if self._fast.gt_lock_release(self._ptr) != 0:
            raise RuntimeError("release unlocked lock")

    def locked(self) -> bool:
        return bool(self._fast.gt_lock_locked(self._ptr))

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def describe(self, *args: Any) -> bool:
        """Give the lane the table's step (gt_lock_describe's arguments after the lock); the caller holds
        the lock. False if it did not (nothing written)."""
        if self._core.gt_lock_describe(self._ptr, *args) != 0:
            return False
        self.described = True
        return True

    def stale(self) -> None:
        """What the description points at changed: the lane leaves the table's pushes to ZMQ."""
        if self.described:
            self.described = False
            self._fast.gt_lock_stale(self._ptr)

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            with contextlib.suppress(Exception):  # at interpreter exit ctypes may be gone: the OS frees it
                self._core.gt_lock_free(ptr)


def new_lock() -> NativeLock | threading.Lock:
    """A table's lock: native when the core is built, else a threading.Lock (no lane to share it)."""
    from graphtrain.runtime.native import NativeUnavailable, core

    try:
        return NativeLock(core())
    except NativeUnavailable:
        return threading.Lock()


__all__ = ["NativeLock", "new_lock"]
