"""KVClient: tensor operations over all shards, ids routed by a partition book.

It splits ids by owning shard (a range lookup in the partition book), sends one request per shard, all
in flight at once, and puts the answers back in the caller's order. Gradients are deduplicated here,
with the native core, before they are pushed: less traffic, and each shard gets every row once. The
same code runs over shard-server processes (zmq_transport.ZmqTransport) and over in-process shards
(inproc.InProcTransport, standalone mode); transport.py is the contract between them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import dtypes
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.client.inproc import InProcTransport
from graphtrain.runtime.kvstore.client.local import pull_local
from graphtrain.runtime.kvstore.client.reads import count as _count
from graphtrain.runtime.kvstore.client.reduce import GradientReducer, last_of_each
from graphtrain.runtime.kvstore.client.transport import (
    Answer,
    Call,
    KVAuthError,
    KVTimeout,
    Transport,
    gather_rows,
    grouped_rows,
)
from graphtrain.runtime.kvstore.client.zmq_transport import ZmqTransport
from graphtrain.runtime.kvstore.tables.graphpart import Sampled, _ranges
from graphtrain.runtime.kvstore.wire import protocol
from graphtrain.runtime.kvstore.wire.opargs import MAX_EDGE_TYPES
from graphtrain.runtime.storage.keyed import owners as keyed_owners
from graphtrain.runtime.storage.shard import TensorShard

__all__ = ["Answer", "Call", "InProcTransport", "KVAuthError", "KVClient", "KVTimeout", "ZmqTransport"]

PullOf = tuple[str, np.ndarray, np.ndarray, tuple[int, ...], np.dtype]  # name, ids, bounds, row shape, dtype


# ----------------------------------------------------------------------------------- KVClient


class KVClient:
    """Tensor operations over all shards, ids routed by a partition book."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.num_shards = transport.num_shards
        self._reducer = GradientReducer()
        self.local_path = "shared_memory" if isinstance(transport, ZmqTransport) else "in_process"

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
        evict: bool | None = None,
    ) -> None:
        """Create (or attach to) the table on every shard, shard s holding rows [bounds[s], bounds[s+1]).
        `evict` not None: a dynamic vocabulary (storage/keyed.py), the bounds the shards' shares of its
        capacity num_rows, keys routed by key mod shards; evict: what a full shard does."""
        keyed = None if evict is None else {"keyed": {"shards": self.num_shards, "evict": evict}}
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
                    **(keyed or {}),
                },
            )
            for s in range(self.num_shards)
        ]
        self.transport.call_many(calls)

    def set_optimizer(self, name: str, config: dict[str, Any]) -> None:
        self.each("set_optimizer", name, {"config": config})

    @staticmethod
    def split(
        ids: np.ndarray, bounds: np.ndarray, keyed: bool = False
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """(order, per-shard start offsets into ids[order]): ids grouped by owner, stable. order is None
        when the ids already are (one shard, or sorted by owner): no permutation to build or apply
        (the owner lookup and stable sort of 100,000 ids took ~1 ms before a one-shard pull was sent).
        `keyed`: the ids are a dynamic table's keys, owned by key mod shards."""
        if keyed:
            return KVClient._group(keyed_owners(ids, len(bounds) - 1), len(bounds))
        if ids.size and (ids.min() < bounds[0] or ids.max() >= bounds[-1]):
            bad = int(ids[(ids < bounds[0]) | (ids >= bounds[-1])][0])
            raise protocol.ProtocolError(f"id {bad} is outside the table's rows [0, {int(bounds[-1])})")
        if len(bounds) == 2:
            return None, np.array([0, len(ids)])
        return KVClient._group(np.searchsorted(bounds, ids, side="right") - 1, len(bounds))

    @staticmethod
    def _group(owners: np.ndarray, n: int) -> tuple[np.ndarray | None, np.ndarray]:
        if len(owners) < 2 or bool(np.all(owners[1:] >= owners[:-1])):
            return None, np.searchsorted(owners, np.arange(n))
        order = np.argsort(owners, kind="stable")
        return order, np.searchsorted(owners[order], np.arange(n))

    def pull(
        self,
        name: str,
        ids: np.ndarray,
        bounds: np.ndarray,
        row_shape: tuple[int, ...],
        dtype: np.dtype,
        keyed: bool = False,
        insert: bool = True,
    ) -> np.ndarray:
        """Rows of `ids` in their order. `keyed`: a dynamic table's keys (no shared-memory path: the
        shards map them); `insert` False: unseen keys read their initial value, none is inserted."""
        return self.pull_many([(name, ids, bounds, row_shape, dtype)], keyed, insert)[0]

    def pull_many(self, pulls: list[PullOf], keyed: bool = False, insert: bool = True) -> list[np.ndarray]:
        """Several pulls (name, ids, bounds, row shape, dtype) as one exchange: every shard is asked for
        all of its rows at once (over the fast lane, in one batch: one round trip per shard, not one per
        table). The rows of each, in its ids' order."""
        made = [self._pull_calls(p, keyed, insert) for p in pulls]
        calls = [c for _, calls in made for c in calls]
        if calls:  # else every row was read here (a pushed table's once its pushes were applied)
            self.transport.call_many(calls)
        return [out for out, _ in made]

    def _pull_calls(self, pull: PullOf, keyed: bool, insert: bool) -> tuple[np.ndarray, list[Call]]:
        """A pull's output array, its rows from this process or host already gathered into it, and the
        calls that fill the rest."""
        name, ids, bounds, row_shape, dtype = pull
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if not keyed:
            out = pull_local(self.transport, name, ids, bounds, row_shape, dtype, self.local_path)
            if out is not None:
                return out, []
        order, starts = self.split(ids, bounds, keyed)
        args = None if insert else {"insert": False}
        in_order = order is None
        out = np.empty((len(ids), *row_shape), dtype=dtype)
        calls = []
        for s in range(self.num_shards):
            a, b = starts[s], starts[s + 1]
            if b <= a:
                continue
            local = None if keyed else self.transport.local_view(s, name)
            _count(s, self.local_path if local is not None else "socket", int(b - a))
            if local is not None:  # same process or same host: gather the rows ourselves
                rows, lo = local
                shard_ids = ids[a:b] if in_order else ids[order[a:b]]
                if shard_ids.size and (shard_ids.min() < lo or shard_ids.max() >= lo + len(rows)):
                    raise protocol.ProtocolError(f"an id of {name!r} is outside shard {s}'s rows")
                if in_order:  # straight into place
                    gather_rows(rows, shard_ids - lo, out[a:b])
                else:
                    gather_rows(rows, shard_ids - lo, out, order[a:b])
                continue
            frames = self._frames
            if in_order:  # one shard, or ids already grouped by owner: rows land in place
                calls.append(Call(s, "pull", name, frames(ids[a:b]), args, out[a:b]))
            else:
                calls.append(Call(s, "pull", name, frames(ids[order[a:b]]), args, out, order[a:b]))
        return out, calls

    def _frames(self, a: np.ndarray) -> list[np.ndarray]:
        """`a` in frames the transport accepts."""
        return protocol.split_rows(a, self.transport.max_frame_bytes)

    def _push_calls(
        self,
        op: str,
        name: str,
        ids: np.ndarray,
        values: np.ndarray,
        bounds: np.ndarray,
        args: dict[str, Any] | None,
        keyed: bool = False,
        wire: str | None = None,
    ) -> list[Call]:
        """The calls of a push: values through the shared-memory buffer to a shard on this host, else on
        the wire, as type `wire` when given (a half table's gradients: the server widens them)."""
        order, starts = self.split(ids, bounds, keyed)
        ids_g = ids if order is None else ids[order]
        buffer = self.transport.push_buffer(values.nbytes) if values.nbytes else None
        row_bytes = values[:1].nbytes if len(values) else 0
        calls = []
        for s in range(self.num_shards):
            a, b = starts[s], starts[s + 1]
            if b <= a:
                continue
            if buffer is not None and self.transport.is_local(s):  # same host: values through shared memory
                seg, seg_name = buffer
                offset = int(a) * row_bytes
                out = np.ndarray((b - a, *values.shape[1:]), values.dtype, buffer=seg.buf, offset=offset)
                grouped_rows(values, order, a, b, out)  # gathered straight into the buffer: one copy
                shm = {"name": seg_name, "offset": offset, "shape": tuple(values.shape[1:])}  # shape: lane
                calls.append(Call(s, op, name, self._frames(ids_g[a:b]), {**(args or {}), "shm": shm}))
                continue
            narrow = wire is not None and self.transport.half_gradients
            mine = grouped_rows(values, order, a, b)
            vals = dtypes.narrowed(mine, wire) if narrow else mine  # type: ignore[arg-type]
            if self.transport.chunked_pushes:
                # One request per chunk: the server applies each while the next is on the wire, in the
                # order sent (it runs one request of a connection at a time). After dedup the ids of a
                # gradient push are distinct, so chunks never update a row twice.
                rows = protocol.rows_per_chunk(max(1, vals[:1].nbytes))
                for i in range(0, b - a, rows):
                    j = min(b - a, i + rows)
                    frames, k = protocol.push_frames(
                        ids_g[a + i : a + j], vals[i:j], self.transport.max_frame_bytes
                    )
                    calls.append(Call(s, op, name, frames, {**(args or {}), "id_frames": k}))
            else:
                calls.append(Call(s, op, name, [ids_g[a:b], vals], args))  # id_frames: 1
        return calls

    def push(
        self, name: str, ids: np.ndarray, values: np.ndarray, bounds: np.ndarray, keyed: bool = False
    ) -> None:
        """Overwrite rows; for a repeated id the last value wins (decided here, before the push is split
        into requests that a server may apply in any order)."""
        ids, values = last_of_each(np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(values))
        self.transport.call_many(self._push_calls("push", name, ids, values, bounds, None, keyed))

    def push_grad(
        self,
        name: str,
        ids: np.ndarray,
        grads: np.ndarray,
        bounds: np.ndarray,
        mean: bool,
        step: int | None = None,
        wait: bool = True,
        keyed: bool = False,
        half: str | None = None,
    ) -> int:
        """Deduplicate on the client (sum or mean, as the table's optimizer says), then push each shard
        its rows; `half`: the table's half type, in which the reduced gradients cross a socket (rounded
        to nearest; through shared memory or in process they stay float32). Returns the unique rows
        pushed. wait=False returns once the pushes are sent: the servers apply them while the caller
        goes on, and this client's next request (any pull or push) or shared-memory read of this table
        first waits for them, so it sees every update; a failure is raised there, or by settle(). A
        shared-memory read of another table does not wait."""
        # the reduced rows live in the reducer's workspace, which a push sent with wait=False may still be
        # reading (ZMQ sends frames over 64 KiB without copying them; a push the fast lane left is resent
        # at the next call): it is written again only once every earlier call was answered
        self.transport.settle()
        uids, ugrads = self._reducer.reduce(ids, grads, -1 if keyed else int(bounds[-1]), mean)
        calls = self._push_calls("push_grad", name, uids, ugrads, bounds, {"step": step}, keyed, half)
        if wait:
            self.transport.call_many(calls)
        else:
            self.transport.begin_many(calls)
        return len(uids)

    def direct(self, name: str) -> list[TensorShard] | None:
        """Every shard's piece of table `name` when they live in this process on a GPU: DistEmbedding
        then pulls and pushes them where they lie (direct.py), with no host round trip."""
        find = getattr(self.transport, "direct", None)
        return None if find is None else find(name)

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
            _count(s, self.local_path if graph is not None else "socket", int(b - a))
            if graph is not None:  # in this process or in shared memory: sample it here, same draws
                pieces.append((order[a:b], *graph.sample(seeds[order[a:b]], fanout, seed)))
            else:
                args = {"fanout": fanout, "seed": seed}
                calls.append(Call(s, "sample", None, self._frames(seeds[order[a:b]]), args))
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

    def sample_edges(
        self,
        seeds: np.ndarray,
        fanout: int,
        bounds: np.ndarray,
        seed: int = 0,
        type_fanouts: np.ndarray | None = None,
    ) -> Sampled:
        """As sample, with each sampled edge's type and global id (a typed graph's blocks need them),
        and with `type_fanouts` a fan-out per edge type (-1 all, 0 none) in place of `fanout`."""
        if type_fanouts is not None and not 0 < len(type_fanouts) <= MAX_EDGE_TYPES:
            raise protocol.ProtocolError(
                f"type_fanouts must list 1 to {MAX_EDGE_TYPES} fan-outs, one per edge type"
            )
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
            _count(s, self.local_path if graph is not None else "socket", int(b - a))
            if graph is not None:
                got = graph.sample_edges(seeds[order[a:b]], fanout, seed, type_fanouts)
                pieces.append((order[a:b], got.src, got.counts, got.etype, got.eid))
            else:
                args: dict[str, Any] = {"fanout": fanout, "seed": seed, "edges": True}
                if type_fanouts is not None:
                    args["type_fanouts"] = [int(f) for f in type_fanouts]
                calls.append(Call(s, "sample", None, self._frames(seeds[order[a:b]]), args))
        answers = self.transport.call_many(calls)
        pieces += [
            (order[starts[c.shard] : starts[c.shard + 1]], *ans.arrays[:4])
            for c, ans in zip(calls, answers, strict=True)
        ]
        counts = np.empty(len(seeds), dtype=np.int64)
        for positions, _, shard_counts, _, _ in pieces:
            counts[positions] = shard_counts
        offsets = np.concatenate([[0], np.cumsum(counts)])
        total = int(offsets[-1])
        src, etype, eid = (np.empty(total, dtype=np.int64) for _ in range(3))
        for positions, shard_src, shard_counts, shard_etype, shard_eid in pieces:
            where = _ranges(offsets[positions], shard_counts)
            src[where], eid[where] = shard_src, shard_eid
            etype[where] = -1 if shard_etype is None else shard_etype
        return Sampled(src, counts, etype, eid)

    def barrier(self, key: str, count: int, timeout: float | None = None) -> None:
        """Wait until `count` participants called barrier(key) (coordinated by shard 0). A participant
        that gives up is withdrawn by the server (a later round never counts it) and gets an error
        naming how many had arrived."""
        wait = getattr(self.transport, "timeout", 30.0) if timeout is None else timeout
        args = {"key": key, "count": count, "timeout": float(wait)}
        self.transport.call_many([Call(0, "barrier", None, (), args)], wait + 1.0)

    def checkpoint(
        self,
        path: str,
        extra: dict[str, Any] | None = None,
        root: Path | None = None,
        pieces: list[dict[str, Any]] | None = None,
    ) -> list[dict]:
        """Every shard writes its pieces under `path` (relative to the servers' checkpoint root); then the
        checkpoint is marked complete, listing them and `pieces` (written by others: the trainers' own
        tables). `root` is where this process sees that root (for the marker)."""
        answers = self.each("checkpoint", None, {"path": path})
        pieces = [p for a in answers for p in a.result["pieces"]] + list(pieces or [])
        base = (root / path) if root else Path(path)
        ckpt.write_top(base, pieces, self.num_shards, extra)
        return pieces

    @property
    def remote(self) -> bool:
        """Whether the shards are other processes (not standalone mode's, in this one)."""
        return not isinstance(self.transport, InProcTransport)

    @property
    def background_checkpoints(self) -> bool:
        """Whether checkpoints are written beside training (checkpoint_begin/done): always by shard
        servers; by standalone's in-process shards when they hold GPU tables, whose copies on the device
        a thread writes while training goes on (host tables would compete with the trainer for its
        cores, so a standalone run on the host writes them before it goes on)."""
        if not isinstance(self.transport, InProcTransport):
            return True
        return any(t.data.is_cuda for s in self.transport.states for t in s.tensors.values())

    def checkpoint_begin(self, path: str) -> None:
        """Every shard snapshots its tables for a checkpoint under `path` and answers at once; the rows
        are written in the background (checkpoint_done says when, and lists the pieces)."""
        self.each("checkpoint", None, {"path": path, "background": True})

    def checkpoint_done(self, path: str) -> list[dict[str, Any]] | None:
        """Every shard's pieces of the checkpoint begun under `path` once all are written, else None.

        Raises:
            GraphtrainError: a shard failed to write it, or lost it (restarted), naming which and why.
        """
        answers = self.each("checkpoint_status", None, {"path": path})
        for shard, a in enumerate(answers):
            if a.result["state"] == "failed":
                raise GraphtrainError(f"shard {shard} could not write checkpoint {path}: {a.result['error']}")
        if any(a.result["state"] != "done" for a in answers):
            return None
        return [p for a in answers for p in a.result["pieces"]]

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
