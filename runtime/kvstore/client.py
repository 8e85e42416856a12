"""Clients of the shard servers: a ZMQ transport, an in-process transport, and KVClient on top.

KVClient splits ids by owning shard (a range lookup in the partition book), sends one request per
shard, all in flight at once, and puts the answers back in the caller's order. Gradients are
deduplicated here, with the native core, before they are pushed: less traffic, and each shard gets
every row once.

ZmqTransport: one DEALER socket per shard. Every call has a timeout; idempotent operations (pull,
create, stats, ...) are retried a bounded number of times, the others (push_grad, barrier) are not,
since a retried gradient push could be applied twice. Giving up raises KVTimeout naming the shard,
its address and the operation: a dead server is reported, never waited for forever.

InProcTransport: the ShardStates live in this process and are called directly, without copies or
sockets. Standalone mode runs the same KVClient, DistTensor and DistEmbedding code over it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import zmq

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.kvstore import protocol as P
from graphtrain.runtime.kvstore.state import GraphPart, ShardState, _ranges

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 2


class KVTimeout(GraphtrainError, TimeoutError):
    """A shard server did not answer in time."""


@dataclass
class Call:
    shard: int
    op: str
    name: str | None = None
    arrays: Sequence[np.ndarray] = ()
    args: dict[str, Any] | None = None
    out: np.ndarray | None = None  # pull: rows are written into this array (chunk by chunk) ...
    dest: np.ndarray | None = None  # ... at these positions (None: rows 0..n-1 of `out`)


@dataclass
class Answer:
    result: dict[str, Any]
    arrays: list[np.ndarray]


class Transport(Protocol):
    num_shards: int

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]: ...

    def local_view(self, shard: int, name: str) -> tuple[np.ndarray, int] | None:
        """The shard's rows of `name` mapped in this process (rows, first row id), if they are."""
        ...

    def push_buffer(self, nbytes: int) -> tuple[Any, str] | None:
        """A shared buffer for gradient pushes (segment, name), if the shards can read this process'."""
        ...

    def local_graph(self, shard: int) -> GraphPart | None:
        """The shard's graph structure mapped in this process (to sample it here), if it is."""
        ...

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        """Send `calls` now and collect their answers at the next use of this transport (or settle())."""
        ...

    def settle(self) -> None:
        """Collect the calls begin_many left in flight, raising their error if one failed."""
        ...

    def close(self) -> None: ...


def place(c: Call, offset: int, rows: np.ndarray) -> None:
    """Copy a pull chunk to its final rows of the caller's output (one copy, no intermediate array)."""
    if c.dest is None:
        c.out[offset : offset + len(rows)] = rows
    else:
        gather_rows(rows, np.arange(len(rows), dtype=np.int64), c.out, c.dest[offset : offset + len(rows)])


def gather_rows(
    rows: np.ndarray, local: np.ndarray, out: np.ndarray | None = None, dest: np.ndarray | None = None
) -> np.ndarray:
    """rows[local], into `out` if given, at out[dest] if given (out[dest] = rows[local]); with the
    native core when it can (float32 tables)."""
    if rows.dtype == np.float32 and rows.ndim == 2 and len(local):
        from graphtrain.runtime.native import available

        if available():
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            return native.gather(
                torch.from_numpy(rows),
                torch.from_numpy(local),
                threads(),
                None if out is None else torch.from_numpy(out),
                None if dest is None else torch.from_numpy(np.ascontiguousarray(dest, dtype=np.int64)),
            ).numpy()
    if out is None:
        return rows[local]
    if dest is None:
        np.take(rows, local, axis=0, out=out)
    else:
        out[dest] = rows[local]
    return out


# ------------------------------------------------------------------------------------ in-process


class InProcTransport:
    """Shard states in this process, called directly (standalone mode)."""

    frames_chunked = False  # values are passed whole: no socket to feed

    def __init__(self, states: list[ShardState], checkpoint_root: Path | None = None):
        self.states = states
        self.num_shards = len(states)
        self.checkpoint_root = checkpoint_root
        self._barriers: dict[str, int] = {}

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]:
        return [self._call(c) for c in calls]

    def local_view(self, shard: int, name: str) -> tuple[np.ndarray, int] | None:
        t = self.states[shard].tensors.get(name)
        return None if t is None else (t.data.numpy(), t.lo)

    def push_buffer(self, nbytes: int) -> tuple[Any, str] | None:
        return None  # in-process: values are passed as they are

    def local_graph(self, shard: int) -> GraphPart | None:
        return self.states[shard].graph

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        self.call_many(calls, timeout)  # in-process: nothing to overlap, done at once

    def settle(self) -> None:
        return None

    def _path(self, args: dict[str, Any]) -> Path:
        rel = P.arg(args, "path", str)
        return (self.checkpoint_root / rel) if self.checkpoint_root else Path(rel)

    def _call(self, c: Call) -> Answer:
        s = self.states[c.shard]
        a = c.args or {}
        try:
            if c.op == "pull":
                rows = s.pull(c.name, c.arrays[0])
                if c.out is not None:
                    place(c, 0, rows)
                    return Answer({}, [])
                return Answer({}, [rows])
            if c.op == "push":
                return Answer({"rows": s.push(c.name, c.arrays[0], list(c.arrays[1:]))}, [])
            if c.op == "push_grad":
                return Answer(
                    {"rows": s.push_grad(c.name, c.arrays[0], list(c.arrays[1:]), a.get("step"))}, []
                )
            if c.op == "create":
                t = s.create(
                    c.name, a["num_rows"], tuple(a["row_shape"]), a["dtype"], a["lo"], a["hi"], a.get("init")
                )
                return Answer(t.describe(), [])
            if c.op == "sample":
                src, counts = s.sample(c.arrays[0], a["fanout"], a.get("seed", 0))
                return Answer({}, [src, counts])
            if c.op == "set_optimizer":
                s.set_optimizer(c.name, a["config"])
                return Answer({}, [])
            if c.op == "checkpoint":
                return Answer({"pieces": s.checkpoint(self._path(a))}, [])
            if c.op == "restore":
                return Answer({"restored": s.restore(self._path(a))}, [])
            if c.op in ("stats", "health"):
                return Answer(s.stats(), [])
            if c.op == "barrier":  # one process: everyone has arrived
                return Answer({"key": a.get("key"), "count": a.get("count")}, [])
            if c.op in ("shm_info", "shutdown"):
                return Answer({}, [])
        except P.ProtocolError as exc:
            raise P.RemoteError(f"shard {c.shard} (in-process): {exc}") from None
        raise P.ProtocolError(f"unknown op {c.op!r}")

    def close(self) -> None:
        for s in self.states:
            s.close()


# ------------------------------------------------------------------------------------------ zmq


class ZmqTransport:
    """One DEALER per shard; requests to several shards are in flight together."""

    frames_chunked = True  # a few MB per frame: pyzmq moves 51 MB at ~35 % of raw TCP in one frame

    def __init__(
        self,
        addresses: list[str],
        token: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        shm: bool = False,
    ):
        if not token:
            raise GraphtrainError("a token is needed to talk to the shard servers")
        self.addresses = list(addresses)
        self.num_shards = len(addresses)
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self.ctx = zmq.Context()
        self.sockets = []
        for addr in addresses:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.connect(addr)
            self.sockets.append(s)
        self._rid = itertools.count(1)
        self._lock = threading.Lock()  # ZMQ sockets are not thread-safe
        self.shm = shm
        self._views: dict[tuple[int, str], tuple[np.ndarray, int] | None] = {}
        self._segments: list[Any] = []
        self._graphs: dict[int, GraphPart] = {}
        self._local_shards: set[int] | None = None
        self._push: Any = None
        self._open: _Exchange | None = None  # begin_many's calls, collected before anything else

    # shared memory (same host) -------------------------------------------------------------

    def _discover(self) -> None:
        """Ask every shard which of its tables are in shared memory on this host, and map them."""
        from graphtrain.runtime.kvstore.server import host_id
        from graphtrain.runtime.kvstore.shm import PushBuffer, attach, view

        here = host_id()
        answers = self.call_many([Call(s, "shm_info") for s in range(self.num_shards)])
        self._local_shards = set()
        for shard, a in enumerate(answers):
            if a.result.get("host") != here:
                continue
            self._local_shards.add(shard)
            if self._push is None and a.result.get("prefix"):
                self._push = PushBuffer(a.result["prefix"])
            for name, t in a.result.get("tensors", {}).items():
                try:
                    seg = attach(t["segment"])
                except FileNotFoundError:
                    continue
                self._segments.append(seg)
                shape = (t["hi"] - t["lo"], *t["row_shape"])
                self._views[(shard, name)] = (view(seg, shape, np.dtype(P.DTYPES[t["dtype"]])), t["lo"])
            g = a.result.get("graph")
            if g and shard not in self._graphs:
                try:
                    segs = [attach(g[k][0]) for k in ("indptr", "indices")]
                except FileNotFoundError:
                    continue
                self._segments.extend(segs)
                try:
                    indptr, indices = (
                        view(seg, (int(g[k][1]),), np.dtype(np.int64))
                        for seg, k in zip(segs, ("indptr", "indices"), strict=True)
                    )
                except (TypeError, ValueError):  # a segment smaller than announced: ask the server
                    continue
                lo, hi = int(g["lo"]), int(g["hi"])
                if len(indptr) == hi - lo + 1 and indptr[0] == 0 and indptr[-1] == len(indices):
                    self._graphs[shard] = GraphPart(lo, hi, indptr, indices)

    def local_view(self, shard: int, name: str) -> tuple[np.ndarray, int] | None:
        if not self.shm:
            return None
        self.settle()  # rows read from shared memory must include the updates in flight
        if (shard, name) not in self._views:
            self._discover()  # a table created since the last look
            self._views.setdefault((shard, name), None)
        return self._views[(shard, name)]

    def push_buffer(self, nbytes: int) -> tuple[Any, str] | None:
        if not self.shm:
            return None
        self.settle()  # the servers may still be reading the buffer of a push in flight
        if self._local_shards is None:
            self._discover()
        if self._push is None:
            return None
        seg = self._push.take(nbytes)
        return seg, seg.name

    def local_graph(self, shard: int) -> GraphPart | None:
        if not self.shm:
            return None
        if self._local_shards is None:
            self._discover()
        return self._graphs.get(shard)

    def is_local(self, shard: int) -> bool:
        return self.shm and self._local_shards is not None and shard in self._local_shards

    def _send(self, c: Call, rid: int) -> None:
        frames = P.encode_request(c.op, rid, self._token, c.name, list(c.arrays), c.args)
        self.sockets[c.shard].send_multipart(frames, copy=False)

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]:
        with self._lock:
            self._settle()
            return _Exchange(self, calls, self.timeout if timeout is None else timeout).finish()

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        with self._lock:
            self._settle()
            self._open = _Exchange(self, calls, self.timeout if timeout is None else timeout)

    def settle(self) -> None:
        with self._lock:
            self._settle()

    def _settle(self) -> None:
        if self._open is not None:
            exchange, self._open = self._open, None
            exchange.finish()

    def close(self) -> None:
        self.settle()  # a push still in flight is delivered (or its failure raised), not dropped
        for v in list(self._views):
            self._views[v] = None
        for seg in self._segments:
            seg.close()
        if self._push is not None:
            self._push.close()
        for s in self.sockets:
            s.close(linger=0)
        self.ctx.term()


class _Exchange:
    """The calls of one call_many on the wire: sent at construction, answers collected by finish(),
    which resends idempotent calls that time out (bounded retries) and raises naming the server."""

    def __init__(self, transport: ZmqTransport, calls: list[Call], timeout: float):
        self.t, self.calls, self.timeout = transport, calls, timeout
        self.answers: list[Answer | None] = [None] * len(calls)
        self.pending: dict[int, int] = {}  # rid -> call index
        self.chunks: dict[int, set[int]] = {}  # rid -> chunk indices received
        self.attempts = [1] * len(calls)
        self.deadline = [0.0] * len(calls)
        for i, c in enumerate(calls):
            rid = next(transport._rid)  # noqa: SLF001 - the transport's own helper
            self.pending[rid] = i
            transport._send(c, rid)  # noqa: SLF001
            self.deadline[i] = time.monotonic() + timeout

    def finish(self) -> list[Answer]:
        t, calls, pending = self.t, self.calls, self.pending
        poller = zmq.Poller()
        for s in {c.shard for c in calls}:
            poller.register(t.sockets[s], zmq.POLLIN)
        while pending:
            now = time.monotonic()
            wait_ms = max(0, int(1000 * (min(self.deadline[i] for i in pending.values()) - now)))
            for sock, _ in poller.poll(wait_ms):
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._take(frames)
            now = time.monotonic()
            for rid, i in list(pending.items()):
                if now < self.deadline[i]:
                    continue
                c = calls[i]
                idempotent = P.OPS[c.op][1]
                if idempotent and self.attempts[i] <= t.retries:
                    del pending[rid]
                    self.chunks.pop(rid, None)
                    new = next(t._rid)  # noqa: SLF001
                    pending[new] = i
                    t._send(c, new)  # noqa: SLF001
                    self.attempts[i] += 1
                    self.deadline[i] = now + self.timeout
                    continue
                n = self.attempts[i]
                raise KVTimeout(
                    f"shard {c.shard} ({t.addresses[c.shard]}) did not answer {c.op}"
                    f"{'' if c.name is None else f' of {c.name!r}'} within {self.timeout:g} s "
                    f"({n} attempt{'s' if n > 1 else ''}); is the server running?"
                )
        return self.answers  # type: ignore[return-value]

    def _take(self, frames: list[Any]) -> None:
        try:
            header, arrays = P.parse_reply([f.buffer for f in frames])
        except P.ProtocolError:
            return  # not ours to read; the call times out if no good reply follows
        rid = header["rid"]
        if rid not in self.pending:
            return  # a late reply to a call that was retried or abandoned
        i = self.pending[rid]
        c = self.calls[i]
        if not header.get("ok"):
            del self.pending[rid]
            raise P.RemoteError(
                f"shard {c.shard} ({self.t.addresses[c.shard]}) refused {c.op}: {header.get('error')}"
            )
        index, count = header.get("chunk", [0, 1])
        result = header.get("result", {})
        if c.out is not None and arrays:
            place(c, int(result.get("offset", 0)), arrays[0])
            arrays = []
        got = self.chunks.setdefault(rid, set())
        got.add(index)
        if self.answers[i] is None:
            self.answers[i] = Answer(result, [np.array(a) for a in arrays])  # copy out of the ZMQ frame
        if len(got) == count:
            del self.pending[rid]
            self.chunks.pop(rid, None)


# ----------------------------------------------------------------------------------- KVClient


class KVClient:
    """Tensor operations over all shards, ids routed by a partition book."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.num_shards = transport.num_shards
        self._dedup_ws: Any = None

    def each(
        self,
        op: str,
        name: str | None = None,
        args: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[Answer]:
        """The same call to every shard."""
        return self.transport.call_many(
            [Call(s, op, name, (), args) for s in range(self.num_shards)], timeout
        )

    def create(
        self,
        name: str,
        num_rows: int,
        row_shape: tuple[int, ...],
        dtype: str,
        bounds: np.ndarray,
        init: dict[str, Any] | None = None,
    ) -> None:
        calls = [
            Call(
                s,
                "create",
                name,
                (),
                {
                    "num_rows": num_rows,
                    "row_shape": list(row_shape),
                    "dtype": dtype,
                    "lo": int(bounds[s]),
                    "hi": int(bounds[s + 1]),
                    "init": init or {},
                },
            )
            for s in range(self.num_shards)
        ]
        self.transport.call_many(calls)

    def set_optimizer(self, name: str, config: dict[str, Any]) -> None:
        self.each("set_optimizer", name, {"config": config})

    @staticmethod
    def split(ids: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(order, per-shard start offsets into ids[order]): ids grouped by owner, stable. order is None
        when the ids already are (one shard, or sorted by owner): no permutation to build or apply
        (the owner lookup and stable sort of 100,000 ids took ~1 ms before a one-shard pull was sent)."""
        if ids.size and (ids.min() < bounds[0] or ids.max() >= bounds[-1]):
            bad = int(ids[(ids < bounds[0]) | (ids >= bounds[-1])][0])
            raise P.ProtocolError(f"id {bad} is outside the table's rows [0, {int(bounds[-1])})")
        if len(bounds) == 2:
            return None, np.array([0, len(ids)])
        owners = np.searchsorted(bounds, ids, side="right") - 1
        if len(owners) < 2 or bool(np.all(owners[1:] >= owners[:-1])):
            return None, np.searchsorted(owners, np.arange(len(bounds)))
        order = np.argsort(owners, kind="stable")
        return order, np.searchsorted(owners[order], np.arange(len(bounds)))

    def pull(
        self, name: str, ids: np.ndarray, bounds: np.ndarray, row_shape: tuple[int, ...], dtype: np.dtype
    ) -> np.ndarray:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        order, starts = self.split(ids, bounds)
        in_order = order is None
        out = np.empty((len(ids), *row_shape), dtype=dtype)
        calls = []
        for s in range(self.num_shards):
            a, b = starts[s], starts[s + 1]
            if b <= a:
                continue
            local = self.transport.local_view(s, name)
            if local is not None:  # same process or same host: gather the rows ourselves
                rows, lo = local
                shard_ids = ids[a:b] if in_order else ids[order[a:b]]
                if shard_ids.size and (shard_ids.min() < lo or shard_ids.max() >= lo + len(rows)):
                    raise P.ProtocolError(f"an id of {name!r} is outside shard {s}'s rows")
                if in_order:  # straight into place
                    gather_rows(rows, shard_ids - lo, out[a:b])
                else:
                    gather_rows(rows, shard_ids - lo, out, order[a:b])
                continue
            if in_order:  # one shard, or ids already grouped by owner: rows land in place
                calls.append(Call(s, "pull", name, (ids[a:b],), None, out[a:b]))
            else:
                calls.append(Call(s, "pull", name, (ids[order[a:b]],), None, out, order[a:b]))
        self.transport.call_many(calls)
        return out

    @staticmethod
    def _chunk_rows(values: np.ndarray) -> int:
        """Rows of `values` per frame or request: CHUNK_BYTES' worth."""
        return max(1, P.CHUNK_BYTES // max(1, values[:1].nbytes))

    def _chunks(self, values: np.ndarray) -> list[np.ndarray]:
        rows = self._chunk_rows(values)
        return [values[i : i + rows] for i in range(0, len(values), rows)] or [values]

    def _push_calls(
        self,
        op: str,
        name: str,
        ids: np.ndarray,
        values: np.ndarray,
        bounds: np.ndarray,
        args: dict[str, Any] | None,
    ) -> list[Call]:
        order, starts = self.split(ids, bounds)
        # no 51 MB copy when the ids come grouped by owner
        ids_g, vals_g = (ids, values) if order is None else (ids[order], values[order])
        buffer = self.transport.push_buffer(vals_g.nbytes) if vals_g.nbytes else None
        calls = []
        for s in range(self.num_shards):
            a, b = starts[s], starts[s + 1]
            if b <= a:
                continue
            is_local = getattr(self.transport, "is_local", lambda _s: False)(s)
            if buffer is not None and is_local:  # same host: values travel through shared memory
                seg, seg_name = buffer
                offset = int(a) * (vals_g[:1].nbytes if len(vals_g) else 0)
                np.ndarray(vals_g[a:b].shape, vals_g.dtype, buffer=seg.buf, offset=offset)[...] = vals_g[a:b]
                calls.append(
                    Call(
                        s,
                        op,
                        name,
                        (ids_g[a:b],),
                        {**(args or {}), "shm": {"name": seg_name, "offset": offset}},
                    )
                )
            elif op == "push_grad" and self.transport.frames_chunked:
                # One request per chunk: the server applies each while the next is still on the wire.
                # The ids are distinct after dedup, so the order the chunks land in does not matter.
                rows = self._chunk_rows(vals_g)
                for i in range(a, b, rows):
                    j = min(b, i + rows)
                    calls.append(Call(s, op, name, (ids_g[i:j], vals_g[i:j]), args))
            else:
                values = self._chunks(vals_g[a:b]) if self.transport.frames_chunked else [vals_g[a:b]]
                calls.append(Call(s, op, name, (ids_g[a:b], *values), args))
        return calls

    def push(self, name: str, ids: np.ndarray, values: np.ndarray, bounds: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.transport.call_many(
            self._push_calls("push", name, ids, np.ascontiguousarray(values), bounds, None)
        )

    def push_grad(
        self,
        name: str,
        ids: np.ndarray,
        grads: np.ndarray,
        bounds: np.ndarray,
        mean: bool,
        step: int | None = None,
        wait: bool = True,
    ) -> int:
        """Deduplicate on the client (sum or mean, as the table's optimizer says), then push each shard its
        rows. Returns the unique rows pushed. wait=False returns once the pushes are sent: the servers
        apply them while the caller goes on, and this client's next operation (any pull or push, a
        shared-memory read included) first waits for them, so it sees every update; a failure is raised
        there, or by settle()."""
        from graphtrain.runtime.native import available as native_available

        ids = np.ascontiguousarray(ids, dtype=np.int64)
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if native_available() and len(ids):
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            if self._dedup_ws is None:
                self._dedup_ws = native.DedupWorkspace()
            uids, ugrads, _ = native.dedup(
                torch.from_numpy(ids),
                torch.from_numpy(grads),
                int(bounds[-1]),
                mean,
                threads(),
                self._dedup_ws,
                share_distinct=True,  # distinct ids (a GraphSAGE batch's input nodes): no 2nd copy
            )
            uids, ugrads = uids.numpy(), ugrads.numpy()
        else:
            from graphtrain.runtime.optim.reference import dedup

            u, g = dedup(torch.from_numpy(ids), torch.from_numpy(grads), "mean" if mean else "sum")
            uids, ugrads = u.numpy(), g.numpy()
        calls = self._push_calls("push_grad", name, uids, ugrads, bounds, {"step": step})
        if wait:
            self.transport.call_many(calls)
        else:
            self.transport.begin_many(calls)
        return len(uids)

    def settle(self) -> None:
        """Wait for pushes sent with wait=False (raising their error, if any)."""
        self.transport.settle()

    def sample(
        self, seeds: np.ndarray, fanout: int, bounds: np.ndarray, seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """In-neighbours of `seeds` (up to `fanout` each, -1: all), each sampled by the shard owning the
        seed, all shards in parallel. Returns (sources, counts) in the order of `seeds`."""
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        order, starts = self.split(seeds, bounds)
        if order is None:
            order = np.arange(len(seeds))
        calls, pieces = [], []
        for s in range(self.num_shards):
            a, b = starts[s], starts[s + 1]
            if b <= a:
                continue
            graph = self.transport.local_graph(s)
            if graph is not None:  # in this process or in shared memory: sample it here, same draws
                pieces.append((order[a:b], *graph.sample(seeds[order[a:b]], fanout, seed)))
            else:
                calls.append(Call(s, "sample", None, (seeds[order[a:b]],), {"fanout": fanout, "seed": seed}))
        answers = self.transport.call_many(calls)
        pieces += [
            (order[starts[c.shard] : starts[c.shard + 1]], *ans.arrays[:2])
            for c, ans in zip(calls, answers, strict=True)
        ]
        counts = np.empty(len(seeds), dtype=np.int64)
        for positions, _, shard_counts in pieces:
            counts[positions] = shard_counts
        offsets = np.concatenate([[0], np.cumsum(counts)])
        src = np.empty(int(offsets[-1]), dtype=np.int64)
        for positions, shard_src, shard_counts in pieces:  # back into the caller's seed order
            src[_ranges(offsets[positions], shard_counts)] = shard_src
        return src, counts

    def barrier(self, key: str, count: int, timeout: float | None = None) -> None:
        """Wait until `count` participants called barrier(key) (coordinated by shard 0)."""
        self.transport.call_many([Call(0, "barrier", None, (), {"key": key, "count": count})], timeout)

    def checkpoint(
        self, path: str, extra: dict[str, Any] | None = None, root: Path | None = None
    ) -> list[dict]:
        """Every shard writes its pieces under `path` (relative to the servers' checkpoint root); then the
        checkpoint is marked complete. `root` is where this process sees that root (for the marker)."""
        answers = self.each("checkpoint", None, {"path": path})
        pieces = [p for a in answers for p in a.result["pieces"]]
        base = (root / path) if root else Path(path)
        ckpt.write_top(base, pieces, self.num_shards, extra)
        return pieces

    def restore(self, path: str) -> list[str]:
        answers = self.each("restore", None, {"path": path})
        return sorted({n for a in answers for n in a.result["restored"]})

    def stats(self) -> list[dict[str, Any]]:
        return [a.result for a in self.each("stats")]

    def health(self, timeout: float | None = None) -> list[dict[str, Any]]:
        return [a.result for a in self.each("health", timeout=timeout)]

    def shutdown(self) -> None:
        self.each("shutdown")

    def close(self) -> None:
        self.transport.close()
