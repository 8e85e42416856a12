"""What KVClient asks of a transport, and the row copies both transports share.

Two transports implement it: `InProcTransport` (standalone mode: the shards live in this process and
requests go straight to their Dispatcher) and `ZmqTransport` (shard servers over tcp:// or ipc://).
KVClient builds the same calls for both; the transport's `max_frame_bytes` says how it splits them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.storage.shard import TensorShard

SLOW_NOTE_SECONDS = 5.0  # an exchange waiting this long says so in the caller's log (a network stall)


class KVTimeout(GraphtrainError, TimeoutError):
    """A shard server did not answer in time."""


class KVAuthError(GraphtrainError):
    """A shard server refused this client's token."""


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
    max_frame_bytes: int | None  # frames larger than this are split (None: never)
    chunked_pushes: bool  # a push goes as one request per CHUNK_BYTES (the server applies each while
    #                       the next is on the wire)
    half_gradients: bool  # a half table's gradients go as half (they cross a socket: half the bytes)

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]: ...

    def local_view(self, shard: int, name: str) -> tuple[np.ndarray, int] | None:
        """The shard's rows of `name` mapped in this process (rows, first row id), if they are; a
        table that begin_many's calls write is read once they were applied, any other at once."""
        ...

    def direct(self, name: str) -> list[TensorShard] | None:
        """Every shard's piece of table `name`, when they are in this process on a GPU (direct.py)."""
        ...

    def is_local(self, shard: int) -> bool:
        """Whether pushes to `shard` may pass values through `push_buffer`."""
        ...

    def push_buffer(self, nbytes: int) -> tuple[Any, str] | None:
        """A shared buffer for gradient pushes (segment, name), if the shards can read this process'."""
        ...

    def local_graph(self, shard: int) -> GraphPart | None:
        """The shard's graph structure mapped in this process (to sample it here), if it is."""
        ...

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        """Send `calls` now and collect their answers at the next call or push of this transport, the
        next local_view of a table they write, or settle()."""
        ...

    def settle(self) -> None:
        """Collect the calls begin_many left in flight, raising their error if one failed."""
        ...

    def close(self) -> None: ...


def place(c: Call, offset: int, rows: np.ndarray) -> None:
    """Copy a pull chunk to its final rows of the caller's output (one copy, no intermediate array)."""
    assert c.out is not None
    if c.dest is None:
        c.out[offset : offset + len(rows)] = rows
    else:
        gather_rows(rows, np.arange(len(rows), dtype=np.int64), c.out, c.dest[offset : offset + len(rows)])


def gather_rows(
    rows: np.ndarray, local: np.ndarray, out: np.ndarray | None = None, dest: np.ndarray | None = None
) -> np.ndarray:
    """rows[local], into `out` if given, at out[dest] if given (out[dest] = rows[local]); with the
    native core when it can (float32 rows, contiguous, and int64 ids), else numpy."""
    native_ok = rows.dtype == np.float32 and rows.ndim == 2 and rows.flags.c_contiguous
    native_ok = native_ok and local.dtype == np.int64 and (out is None or out.flags.c_contiguous)
    if native_ok and len(local):
        from graphtrain.runtime.native.backend import CoreBackend, choose

        if choose() is CoreBackend.CPU:
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            return native.gather(
                torch.from_numpy(rows),
                torch.from_numpy(np.ascontiguousarray(local)),
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


def grouped_rows(
    values: np.ndarray, order: np.ndarray | None, a: int, b: int, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows a..b of `values` grouped by owner (`order`, KVClient.split's; None: they already are), into
    `out` if given. Each shard's rows are gathered once, by the native core's threads: a whole permuted
    copy first (values[order]) took 2.3 ms of a WordNet GAT step's push on one core, for 13k rows of 128."""
    if order is None:
        if out is None:
            return values[a:b]
        out[...] = values[a:b]
        return out
    return gather_rows(values, order[a:b], out)
