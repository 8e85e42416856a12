"""Small pulls and gradient pushes answered on the I/O thread that received them (issue 47, item 1: a
lean request path).

Why. A 64-row pull over TCP cost the shard server ~0.9 ms of CPU (bench/RESULTS.md, "the request path,
profiled"), of which the gather itself is ~15 us. The rest was the hand-offs: the I/O thread queued
the request and a worker woke (a condition variable), took the GIL, gathered, posted the reply and
woke the I/O thread again (an eventfd), and a zero-copy reply frame woke pyzmq's garbage thread once
ZMQ had sent it: ~13 voluntary context switches per pull across four threads.

What. A pull of at most INLINE_BYTES of rows of a host table, from a peer with nothing queued, running
or parked (so one peer's requests still run in the order they came), is gathered and answered by the
I/O thread itself, in one chunk into a fresh buffer. The request was authenticated (at the connection)
and parsed and validated (protocol.py, opargs.py) by the I/O thread before, as every request is; the
reply goes through the same outbox, so a peer that does not read is bounded and dropped as before.
Big pulls (chunked streams), GPU tables (a worker's stream) and dynamic tables (a pull may insert
keys) go to the workers as before. The I/O thread spends at most a gather of INLINE_BYTES (tens of us)
on one such pull before it reads the next request.

A gradient push of at most INLINE_BYTES of gradients is stepped there too, under the same conditions,
if the table's lock is free at once: the I/O thread never waits for it (a worker stepping the table or
writing a checkpoint under its lock), and a push that finds it taken goes to the workers as before.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.serving.dispatch import Dispatcher
from graphtrain.runtime.kvstore.serving.metrics import ServerMetrics
from graphtrain.runtime.kvstore.serving.outbox import Outbox
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire import opargs, protocol
from graphtrain.runtime.storage.errors import TableBusy

log = logging.getLogger("graphtrain.kvstore.server")

INLINE_BYTES = 256 << 10  # 1,024 rows of 64 float32, 512 of 128


def fits(state: ShardTensors, req: protocol.Request, args: opargs.OpArgs, limit: int = INLINE_BYTES) -> bool:
    """Whether the I/O thread answers this request itself: a pull of at most `limit` bytes of rows, or a
    gradient push of at most `limit` bytes of float32 gradients, of a host table that is not a dynamic
    vocabulary's (an unknown table, or a push to one without an optimizer: no, the worker answers the
    error)."""
    pull = req.op == "pull" and isinstance(args, opargs.PullArgs)
    push = req.op == "push_grad" and isinstance(args, opargs.PushArgs)
    if not (pull or push):
        return False
    t = state.tensors.get(req.name)
    if t is None or t.keyed is not None or t.data.device.type != "cpu" or (push and t.config is None):
        return False
    row = math.prod(t.row_shape) * (4 if push else t.data.element_size())
    return sum(len(ids) for ids in args.ids) * row <= limit


def answer(
    dispatcher: Dispatcher,
    outbox: Outbox,
    metrics: ServerMetrics,
    identity: bytes,
    req: protocol.Request,
    args: opargs.OpArgs,
    refuse: Callable[[bytes, int, str], None],
) -> bool:
    """Run the pull (a one-chunk reply) or the push's step and post the answer, or the refusal, counted
    as a worker counts it. False, nothing done, for a push whose table's lock is held (a worker steps
    it, or writes a checkpoint under it): the caller then queues it for the workers, so the I/O thread
    never waits."""
    start, outcome = time.perf_counter(), "ok"
    try:
        if req.op == "pull":
            stream = dispatcher.run(req, args, who=(identity, req.rid))
            _, offset, rows = stream.next()  # into a fresh array: the reply owns it
            reply = protocol.encode_reply(req.rid, arrays=[rows], result={"offset": offset}, chunk=(0, 1))
            outbox.post(identity, reply, rows.nbytes)
        else:
            assert isinstance(args, opargs.PushArgs)
            done = dispatcher.push_grad(req, args, blocking=False)
            outbox.post(identity, protocol.encode_reply(req.rid, result=done.result))
    except TableBusy:
        return False
    except (protocol.ProtocolError, GraphtrainError, ValueError) as exc:
        outcome = "error"
        refuse(identity, req.rid, str(exc))
    except Exception as exc:  # a bug: answered and logged as a worker does, never a silent timeout
        outcome = "error"
        log.exception("op %s failed", req.op)
        refuse(identity, req.rid, f"internal error in {req.op}: {type(exc).__name__}: {exc}")
    metrics.requests.labels(metrics.shard, req.op, outcome).inc()
    metrics.latency.labels(metrics.shard, req.op).observe(time.perf_counter() - start)
    return True
