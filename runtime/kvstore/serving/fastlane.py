"""The shard server's fast lane: the Python side of cuda/src/fastlane.cpp (issue 47, item 1).

Why. Over ZMQ, a 64-row pull cost the server ~0.6 ms of CPU even when the I/O thread answered it
itself (inline.py): the Python around pyzmq and ZMQ's own I/O thread, for a ~15 us gather. The fast
lane answers such pulls on one native thread (epoll, no GIL, no hand-off) on a second TCP port (beside
an ipc:// server: a Unix socket next to its ZMQ one); the client (client/fastlane.py) uses it for pulls of
at most fastwire.MAX_REPLY_BYTES and asks over ZMQ for everything else, and for whatever the lane
answers "not served here". A client on the server's host pushes its gradients there from its shared-memory
push buffer (op 5), which the lane maps itself: `allow_segments` names this job's buffers.

What is served. Host tables with fixed rows (a dynamic vocabulary's pull may insert keys, a GPU
table's rows live on the device: both stay on the ZMQ path). `sync` registers them, with their memory
pointer, and keeps a reference to each registered tensor, so its memory outlives any pull copying from
it: a table whose tensor changed (created, restored, moved by set_optimizer) is registered again, and
only then is the old tensor let go (gt_fast_set_table returns once no copy reads the old memory).

Gradient pushes are stepped by the lane too, under the table's native lock (storage/tablelock.py),
from a description of the step that `sync` writes while holding that lock: the rows (float32 or half),
the optimizer and its state, the changed-row mask of an incremental checkpoint, and a half table's
step count (TensorShard.round_steps, which the lane increments for its rounding seeds as round_seed
does). A table whose
description went stale (TensorShard.__setattr__: a new optimizer, a checkpoint arming) or that the lane
does not step as the Python path does (lane_steppable) answers "busy" or "not served", and its pushes go
over ZMQ; the next sync (at most a second later) describes it again.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from graphtrain.runtime.dtypes import NUMPY
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.serving.metrics import ServerMetrics
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.kvstore.wire import fastwire
from graphtrain.runtime.storage.shard import TensorShard
from graphtrain.runtime.storage.tablelock import NativeLock

log = logging.getLogger("graphtrain.kvstore.server")

# gt_fast_stats's counters, in fastlane.cpp's Stat order
STATS = (
    "pulls_ok",
    "errors",
    "not_served",
    "rows",
    "bytes_out",
    "malformed",
    "refused",
    "handshake_timeouts",
    "stalled",
    "full",
    "open",
    "loops",
    "accepted",
    "busy_ns",
    "last_loop_ms",
    "samples_ok",
    "pushes_ok",
    "rows_pushed",
    "pushes_busy",
    "batches",
)


LANE_EVENTS = ("refused", "malformed", "handshake_timeouts", "stalled", "full")


@dataclass(frozen=True)
class LaneLimits:
    handshake_seconds: float = 10.0  # to send the token
    stall_seconds: float = 30.0  # a reply pending this long with nothing taken: the connection is closed
    # each with one request (a batch's <= 512 KiB: fastwire.MAX_BATCH_BYTES) and one reply (<= 256 KiB and a
    # batch's headers): <= ~200 MB
    max_connections: int = 256


def servable(t: TensorShard) -> bool:
    """Whether the lane may answer pulls of `t`: fixed rows in contiguous host memory, of an element
    type and a name the lane's wire carries."""
    data = t.data
    return (
        t.keyed is None
        and data.device.type == "cpu"
        and data.dim() >= 1
        and data.is_contiguous()
        and fastwire.type_code(NUMPY[t.dtype]) > 0
        and len(t.row_shape) <= 3
        and 0 < len(t.name.encode()) <= fastwire.MAX_NAME
    )


def lane_may_step(t: TensorShard) -> bool:
    """Whether the lane steps `t`'s gradient pushes as storage/update.locked_step would, whenever its
    description is current: float32, float16 or bfloat16 rows on the host with an optimizer the CPU core
    runs whole (a float32 table's row norm included: its update loop scales the rows, where a half
    table's are scaled after, in Python; no unit-circle projection after it, non-finite gradients
    refused), and the CPU core chosen for host tables' optimizer steps. Other tables are registered
    without their lock: their pushes are "not served"."""
    from graphtrain.runtime.native.backend import CoreBackend, choose_for_optimizer
    from graphtrain.runtime.native.optim import TABLE_DTYPES

    c = t.config
    return (
        servable(t)
        and isinstance(t.lock, NativeLock)
        and t.data.dtype in TABLE_DTYPES
        and t.data.dim() == 2
        and c is not None
        and not c.unit_complex
        and not (c.row_norm and t.data.dtype != torch.float32)
        and c.nonfinite == "refuse"
        and choose_for_optimizer("cpu") is CoreBackend.CPU  # honours GRAPHTRAIN_OPTIM_BACKEND, as ZMQ
    )


def lane_steppable(t: TensorShard) -> bool:
    """lane_may_step, and nothing armed that the lane does not do: a background checkpoint copying rows
    before they are written, or a changed-row mask it cannot mark."""
    return lane_may_step(t) and t.snapshot is None and (t.changed is None or _mask_ok(t.changed.mask, t.rows))


def _mask_ok(mask: np.ndarray, rows: int) -> bool:
    return mask.dtype == np.bool_ and mask.flags.c_contiguous and mask.shape == (rows,)


def describe(t: TensorShard) -> bool:
    """Write the lane's description of `t`'s step (the caller holds t.lock); False when the lane must
    not step it (lane_steppable, or a state that does not fit the optimizer)."""
    from graphtrain.runtime.native import optim as native
    from graphtrain.runtime.native.optim import TABLE_DTYPES
    from graphtrain.runtime.optim.functional import native_args
    from graphtrain.runtime.optim.state import check_state

    if not lane_steppable(t):
        return False
    assert t.config is not None and isinstance(t.lock, NativeLock)
    try:
        check_state(t.config, t.state, t.data.shape[0], t.data.shape[1])
    except ValueError:
        return False
    args = native_args(t.config)
    s0, s1, row_steps, _ = native.state_tensors(args, t.state)
    global_step = t.state["step"] if (args.adam and args.global_step) else None
    if global_step is not None and (global_step.dtype != torch.int64 or not global_step.is_contiguous()):
        return False
    ptr = lambda x: None if x is None else x.data_ptr()  # noqa: E731
    return t.lock.describe(
        args.kind,
        int(args.mean),
        1,
        t.data.shape[1],
        t.data.shape[0],
        t.data.data_ptr(),
        TABLE_DTYPES[t.data.dtype],
        t.seed_base,
        t.round_steps.ctypes.data,
        ptr(s0),
        ptr(s1),
        ptr(row_steps),
        ptr(global_step),
        None if t.changed is None else t.changed.mask.ctypes.data,
        args.params,
    )


def host_of(bind: str) -> str | None:
    """The host of a tcp:// bind address (None for ipc:// or anything else: no TCP lane there)."""
    if not bind.startswith("tcp://"):
        return None
    host = bind[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
    return "0.0.0.0" if host == "*" else host


UNIX_PATH_MAX = 107  # sockaddr_un's sun_path, less its terminating zero


def unix_path_of(bind: str) -> str | None:
    """The lane's Unix socket beside an ipc:// server (its path and ".lane"), or None: not ipc://, or
    too long a path for a Unix socket."""
    if not bind.startswith("ipc://"):
        return None
    path = bind[len("ipc://") :] + ".lane"
    if not path.startswith("/") or len(path.encode()) > UNIX_PATH_MAX:
        log.warning(
            "no fast lane beside %s: %r is not an absolute path of at most %d bytes",
            bind,
            path,
            UNIX_PATH_MAX,
        )
        return None
    return path


class FastLane:
    @classmethod
    def open(
        cls, bind: str, port: int | None, token: bytes, limits: LaneLimits | None = None
    ) -> FastLane | None:
        """The lane beside a ZMQ server bound at `bind`, on the same host, or None: off (`port` None or
        negative), neither TCP nor ipc://, no native core, or any port asked (0) on a host it cannot
        listen on (an interface name ZMQ takes, say): said in the log, and every request goes over ZMQ.
        A port asked by number (pods: 7001) that cannot be had is an error: the policy and clients
        expect it there. Beside an ipc:// server the lane listens on a Unix socket next to it (`port`
        is not used): the same host's clients push their gradients through it from shared memory.

        Raises:
            GraphtrainError: `port` > 0 and the lane cannot listen on it."""
        from graphtrain.runtime.native import NativeUnavailable

        host, path = host_of(bind), unix_path_of(bind)
        if port is None or port < 0 or (host is None and path is None):
            return None
        try:
            return cls((host, port) if host is not None else path, token, limits)  # type: ignore[arg-type]
        except NativeUnavailable as exc:
            log.warning("no fast lane: %s", exc)
        except GraphtrainError as exc:
            if port:
                raise
            log.warning("no fast lane: %s", exc)
        return None

    def __init__(self, where: tuple[str, int] | str, token: bytes, limits: LaneLimits | None = None):
        """Listen at `where`: (host, port) over TCP, or a Unix socket's path (a stale file there, left
        by a killed server, is replaced, as ZMQ replaces an ipc:// one)."""
        from graphtrain.runtime.native import core

        self._core = core()
        lim = limits or LaneLimits()
        self.path = where if isinstance(where, str) else None  # the Unix socket's (None: TCP)
        if isinstance(where, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(where)
            shown = where
        else:
            sock = socket.socket(
                socket.AF_INET6 if _is_ipv6(where[0]) else socket.AF_INET, socket.SOCK_STREAM
            )
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            shown = f"{where[0]}:{where[1]}"
        try:
            sock.bind(where)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise GraphtrainError(f"the fast lane cannot listen on {shown}: {exc.strerror}") from None
        self.port = 0 if self.path is not None else sock.getsockname()[1]
        fd = sock.detach()  # the native server owns it now
        self._handle = self._core.gt_fast_start(
            fd,
            token,
            len(token),
            lim.max_connections,
            fastwire.MAX_IDS,
            fastwire.MAX_REPLY_BYTES,
            int(lim.handshake_seconds * 1000),
            int(lim.stall_seconds * 1000),
        )
        if not self._handle:
            raise GraphtrainError("the fast lane's native server did not start")
        # name -> (pointer, table, tensor, lock): what the native side reads stays alive while registered
        self._held: dict[str, tuple[int, TensorShard, object, object]] = {}
        self._lock = threading.Lock()  # workers (after create, restore, ...) and the I/O thread sync
        self._counted = dict.fromkeys(("pulls_ok", "samples_ok", "rows", "pushes_ok", "rows_pushed"), 0)
        self._count_lock = threading.Lock()  # the I/O thread and a scrape count
        self._graph: GraphPart | None = None
        self._graph_arrays: tuple[np.ndarray, np.ndarray] | None = None

    def sync(self, tensors: dict[str, TensorShard], graph: GraphPart | None = None) -> None:
        """Register the servable tables whose memory is new, withdraw the ones gone or no longer
        servable, and the partition's graph for sampling. Called by whoever changed a table (create,
        restore, set_optimizer) before it answers, and once a second by the I/O thread."""
        with self._lock:
            if self._handle:
                self._sync(tensors)
                self._sync_graph(graph)

    def _sync_graph(self, graph: GraphPart | None) -> None:
        """Sample `graph` natively where the ZMQ path does (the CPU core: the same draws); its arrays are
        held here as long as the lane may read them."""
        from graphtrain.runtime.native.backend import CoreBackend, choose

        if graph is None or graph is self._graph or choose() is not CoreBackend.CPU:
            return
        indptr = np.ascontiguousarray(graph.indptr, dtype=np.int64)
        indices = np.ascontiguousarray(graph.indices, dtype=np.int64)
        self._core.gt_fast_set_graph(
            self._handle, indptr.ctypes.data, indices.ctypes.data, graph.lo, graph.hi - graph.lo
        )
        self._graph, self._graph_arrays = graph, (indptr, indices)

    def _sync(self, tensors: dict[str, TensorShard]) -> None:
        for name, t in list(tensors.items()):
            data = t.data
            held = self._held.get(name)
            if not servable(t):
                if held is not None:
                    self._set(name, None, t)
                continue
            lock = t.lock if lane_may_step(t) else None  # registered with its pushes, or without
            if held is None or held[0] != data.data_ptr() or held[1] is not t or held[3] is not lock:
                self._set(name, data, t, lock)
            # a busy table is described at the next sync
            if (
                name in self._held
                and isinstance(lock, NativeLock)
                and not lock.described
                and lock.acquire(False)
            ):
                try:
                    describe(t)
                finally:
                    lock.release()
        for name in [n for n in self._held if n not in tensors]:
            self._set(name, None, self._held[name][1])

    def _set(self, name: str, data: object | None, t: TensorShard, lock: NativeLock | None = None) -> None:
        """Register `data` as table `name` (None: withdraw it), with `lock` when the lane steps its pushes.
        Never raises: a table the native side refuses is withdrawn and logged, and its pulls go over ZMQ."""
        key = name.encode()
        if data is None:
            if self._held.pop(name, None) is not None:
                self._core.gt_fast_set_table(self._handle, key, len(key), None, 0, 0, 0, 0, 0, None, None)
            return
        row = int(np.prod(t.row_shape, dtype=np.int64)) * data.element_size()  # type: ignore[attr-defined]
        ptr = data.data_ptr()  # type: ignore[attr-defined]
        dims = np.array([*t.row_shape, 0, 0, 0][:3], dtype=np.int64)
        code = fastwire.type_code(NUMPY[t.dtype])
        args = (ptr, t.lo, t.hi, row, code, len(t.row_shape), dims.ctypes.data, lock and lock.pointer)
        if self._core.gt_fast_set_table(self._handle, key, len(key), *args) != 0:
            log.warning("the fast lane does not serve table %r (refused by its native side)", name)
            self._set(name, None, t)
            return
        self._held[name] = (ptr, t, data, lock)  # the old tensor and lock, if any, are let go only now

    def count_into(self, metrics: ServerMetrics) -> None:
        """Add the pulls, samples and pushes the lane answered since the last call to the server's
        request counters (so graphtrain_kvstore_requests_total{outcome="ok"}, rows_pulled and rows_pushed
        count both paths; the lane's refusals are in its own family)."""
        with self._count_lock:
            stats = self.stats()
            if not stats:
                return
            delta = {k: stats[k] - v for k, v in self._counted.items()}
            self._counted = {k: stats[k] for k in self._counted}
        metrics.requests.labels(metrics.shard, "pull", "ok").inc(delta["pulls_ok"])
        metrics.requests.labels(metrics.shard, "sample", "ok").inc(delta["samples_ok"])
        metrics.rows_pulled.labels(metrics.shard).inc(delta["rows"])
        metrics.requests.labels(metrics.shard, "push_grad", "ok").inc(delta["pushes_ok"])
        metrics.rows_pushed.labels(metrics.shard, "gradient").inc(delta["rows_pushed"])

    def scrape(self, metrics: ServerMetrics) -> Iterator[Metric]:
        """At a scrape: the pulls into the request counters, and the lane's own events and connections."""
        self.count_into(metrics)
        stats = self.stats()
        events = CounterMetricFamily(
            "graphtrain_kvstore_fast_lane_events",
            "Fast lane events: requests answered (pulls_ok, samples_ok, pushes_ok; errors: refused naming an "
            "id, a seed or a non-finite gradient; not_served: asked over ZMQ instead; pushes_busy: a push "
            "sent over ZMQ this time, its table locked or being described), connections refused (a wrong "
            "token), malformed, handshake timeouts, stalled (a reply not taken), full (past max connections)",
            labels=["shard", "event"],
        )
        answered = ("pulls_ok", "samples_ok", "pushes_ok", "pushes_busy", "errors", "not_served")
        for key in (*answered, *LANE_EVENTS):
            events.add_metric([metrics.shard, key], stats.get(key, 0))
        yield events
        open_ = GaugeMetricFamily(
            "graphtrain_kvstore_fast_lane_connections", "Open fast lane connections", labels=["shard"]
        )
        open_.add_metric([metrics.shard], stats.get("open", 0))
        yield open_

    def stalled(self, now: float) -> float:
        """Seconds since the lane's loop last turned (it turns at least every 100 ms)."""
        stats = self.stats()
        return max(0.0, now - stats["last_loop_ms"] / 1000) if stats else 0.0

    def stats(self) -> dict[str, int]:
        """The native counters ({} once stopped): read under the lock, so never from a freed server."""
        out = (ctypes.c_uint64 * len(STATS))()
        with self._lock:
            if not self._handle:
                return {}
            self._core.gt_fast_stats(self._handle, ctypes.addressof(out), len(STATS))
        return dict(zip(STATS, out, strict=True))

    def allow_segments(self, prefix: str) -> None:
        """Step pushes whose gradients lie in this job's push buffers (shm.PushBuffer: `prefix` and
        "-push-"), which the lane maps read-only itself."""
        key = f"{prefix}-push-".encode()
        with self._lock:
            if self._handle:
                self._core.gt_fast_set_segments(self._handle, key, len(key))

    def stop(self) -> None:
        """Stop serving and close every connection (and a Unix socket's file); the tables are let go
        after."""
        with self._lock:
            if self._handle:
                handle, self._handle = self._handle, None
                self._core.gt_fast_stop(handle)
                self._held.clear()
                self._graph = self._graph_arrays = None
                if self.path is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(self.path)


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False
