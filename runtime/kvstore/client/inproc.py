"""The in-process transport of standalone mode: the shards live in this process.

Each call is validated by opargs.validate and run by the shard's Dispatcher, exactly as a shard
server's worker runs it, so standalone and distributed runs refuse the same requests with the same
messages. Nothing is encoded or copied: arrays are handed over as they are, and pull rows are gathered
straight into the caller's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.dtypes import to_numpy
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.client import direct
from graphtrain.runtime.kvstore.client.transport import Answer, Call, place
from graphtrain.runtime.kvstore.serving.dispatch import Dispatcher, Released, Reply
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.kvstore.tables.state import PullStream, ShardTensors
from graphtrain.runtime.kvstore.wire import opargs, protocol
from graphtrain.runtime.storage.shard import TensorShard


class InProcTransport:
    """Shard states in this process, called directly (standalone mode)."""

    max_frame_bytes = None  # nothing crosses a socket
    chunked_pushes = False
    half_gradients = False  # nothing to save: the shards read the caller's float32 rows

    def __init__(
        self,
        states: list[ShardTensors],
        checkpoint_root: Path | None = None,
        direct_to: torch.device | None = None,
    ):
        """`direct_to`: the device of the trainer in this process; its tables on that device (a GPU) are
        pulled and stepped where they lie (direct.py). None: none are (every value crosses the protocol
        as host arrays, what a caller on the host expects)."""
        self.states = states
        self.direct_to = direct_to
        self.num_shards = len(states)
        self.dispatchers = [Dispatcher(s, checkpoint_root, chunk_bytes=1 << 62) for s in states]

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]:
        return [self._call(c) for c in calls]

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        self.call_many(calls, timeout)  # in-process: nothing to overlap, done at once

    def settle(self) -> None:
        return None

    def local_view(self, shard: int, name: str) -> tuple[np.ndarray, int] | None:
        """A host table's rows, for the client to gather itself; None for a GPU table (its pulls go
        through the dispatcher, which gathers on the device and downloads only the rows asked for)."""
        t = self.states[shard].tensors.get(name)
        if t is None or t.data.device.type != "cpu" or t.keyed is not None:  # keys map in the shard
            return None
        return to_numpy(t.data), t.lo

    def direct(self, name: str) -> list[TensorShard] | None:
        """Every shard's piece of table `name` when the trainer may use them where they lie: on its own
        device (a CPU trainer beside GPU tables gets host rows), direct.usable (GPU rows). Its pulls and
        pushes then never cross the host."""
        if self.direct_to is None:
            return None
        pieces = [s.tensors.get(name) for s in self.states]
        if not direct.usable(pieces) or any(p.data.device != self.direct_to for p in pieces if p is not None):
            return None
        return [p for p in pieces if p is not None]

    def is_local(self, shard: int) -> bool:
        return False  # values are handed over as they are, not through a buffer

    def push_buffer(self, nbytes: int) -> tuple[Any, str] | None:
        return None

    def local_graph(self, shard: int) -> GraphPart | None:
        return self.states[shard].graph

    def _call(self, c: Call) -> Answer:
        req = protocol.Request(c.op, 0, c.name, list(c.arrays), c.args or {}, sum(a.nbytes for a in c.arrays))
        try:
            args = opargs.validate(req)
            out = self.dispatchers[c.shard].run(req, args, who=c.shard)
        except (protocol.ProtocolError, GraphtrainError, ValueError) as exc:
            raise protocol.RemoteError(f"shard {c.shard} (in-process) refused {c.op}: {exc}") from None
        if isinstance(out, PullStream):
            return self._pull(c, out)
        if isinstance(out, Released):
            return Answer(out.result, [])
        if out is None:  # a barrier of several participants in one process can never complete
            assert isinstance(args, opargs.BarrierArgs)
            self.dispatchers[c.shard].barriers.withdraw(args.key, c.shard)
            raise protocol.RemoteError(
                f"shard {c.shard} (in-process) refused barrier: {args.count} participants cannot meet "
                "in one process"
            )
        assert isinstance(out, Reply)
        return Answer(out.result, out.arrays)

    @staticmethod
    def _pull(c: Call, stream: PullStream) -> Answer:
        _, _, rows = stream.next(None)  # one chunk: chunk_bytes is unbounded here
        if c.out is None:
            return Answer({}, [rows])
        place(c, 0, rows)
        return Answer({}, [])

    def close(self) -> None:
        for d in self.dispatchers:
            d.close()
        for s in self.states:
            s.close()
