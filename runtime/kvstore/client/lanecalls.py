"""One call on the fast lane's wire (wire/fastwire.py): whether the lane may carry it, its request's
bytes, the most its reply can take, and the batches several calls to one shard make. A push whose rows
lie in a shared-memory push buffer (same host) goes as a push from shared memory (wire version 3).

Pure functions of a Call: client/fastlane.py decides with them and sends what they encode.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from graphtrain.runtime.kvstore.client.transport import Call
from graphtrain.runtime.kvstore.wire import fastwire, opargs, protocol

# float32, float16 and bfloat16's bits (dtypes.NUMPY): the gradient types a push's rows may cross in
GRADIENT_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int16))


def row_bytes(out: np.ndarray) -> int:
    return out.dtype.itemsize * math.prod(out.shape[1:])


def ids_of(c: Call) -> int:
    return sum(len(a) for a in c.arrays)


def sample_fits(c: Call) -> bool:
    """A sample the lane may carry: the ZMQ path's checks pass, a fan-out >= 1, its reply within bounds."""
    if set(c.args or {}) != {"fanout", "seed"}:
        return False
    try:  # what the ZMQ path refuses goes there, to be refused as it is
        a = opargs.validate(protocol.Request("sample", 0, None, list(c.arrays), dict(c.args or {})))
    except protocol.ProtocolError:
        return False
    assert isinstance(a, opargs.SampleArgs)
    n = ids_of(c)
    return a.fanout >= 1 and n <= fastwire.MAX_IDS and 8 * n * (a.fanout + 1) <= fastwire.MAX_REPLY_BYTES


def push_fits(c: Call) -> bool:
    """A push the lane may carry: rows in one chunk, float32 or a half table's type (dtypes.narrowed: the
    lane widens them as the ZMQ path does), within its bounds, nothing but a step."""
    if not isinstance(c.name, str) or len(c.arrays) != 2:
        return False
    args = c.args or {}
    step = args.get("step")
    if set(args) - {"step", "id_frames"} or args.get("id_frames", 1) != 1:
        return False  # through shared memory, or in several frames: the ZMQ path's
    if step is not None and (not isinstance(step, int) or not 1 <= step <= fastwire.MAX_STEP):
        return False
    ids, vals = c.arrays
    return (
        vals.dtype in GRADIENT_TYPES
        and vals.ndim >= 2
        and vals.flags.c_contiguous
        and len(ids) == len(vals) <= fastwire.MAX_IDS
        and vals.nbytes <= fastwire.MAX_REPLY_BYTES
        and fastwire.row_type(vals.dtype, vals.shape[1:]) is not None
    )


def shared_push_fits(c: Call) -> bool:
    """A push from the same host whose float32 gradient rows lie in a shared-memory push buffer
    (KVClient._push_calls' "shm" argument): the ids within the lane's bound, nothing but a step beside."""
    if not isinstance(c.name, str) or len(c.arrays) != 1 or c.op != "push_grad":
        return False
    args = c.args or {}
    step, buf = args.get("step"), args.get("shm")
    if set(args) - {"step", "shm"} or not isinstance(buf, dict):
        return False
    if step is not None and (not isinstance(step, int) or not 1 <= step <= fastwire.MAX_STEP):
        return False
    name, offset, shape = buf.get("name"), buf.get("offset"), buf.get("shape")
    return (
        isinstance(name, str)
        and 1 <= len(name.encode()) <= fastwire.MAX_NAME
        and isinstance(offset, int)
        and 0 <= offset < 2**62
        and isinstance(shape, tuple)
        and fastwire.row_type(np.dtype(np.float32), shape) is not None
        and len(c.arrays[0]) <= fastwire.MAX_IDS
        and shared_bytes(c) <= fastwire.MAX_SHARED_BYTES
    )


def shared_bytes(c: Call) -> int:
    """The gradient bytes a push from shared memory has the lane step (0: another call)."""
    buf = (c.args or {}).get("shm") if c.op == "push_grad" else None
    return 4 * len(c.arrays[0]) * math.prod(buf["shape"]) if isinstance(buf, dict) else 0


def pull_fits(c: Call) -> bool:
    """A pull the lane may carry: into an array of a type it serves, within its bounds."""
    if c.out is None or not isinstance(c.name, str):
        return False
    if fastwire.row_type(c.out.dtype, c.out.shape[1:]) is None:
        return False
    n = ids_of(c)
    return n <= fastwire.MAX_IDS and n * row_bytes(c.out) <= fastwire.MAX_REPLY_BYTES


def encode(c: Call, rid: int) -> list[bytes | np.ndarray]:
    """The request of `c` (an eligible call) as parts to send in order, without joining them."""
    if c.op == "push_grad" and "shm" in (c.args or {}):  # shared_push_fits checked it
        keys, buf = np.ascontiguousarray(c.arrays[0], dtype=np.int64), (c.args or {})["shm"]
        rows = fastwire.row_type(np.dtype(np.float32), buf["shape"])
        assert rows is not None and isinstance(c.name, str)
        step = (c.args or {}).get("step")
        head = fastwire.shared_push_request(
            rid, c.name.encode(), len(keys), rows, buf["name"].encode(), buf["offset"], step
        )
        return [head, keys]
    if c.op == "push_grad":
        keys, vals = np.ascontiguousarray(c.arrays[0], dtype=np.int64), c.arrays[1]
        rows = fastwire.row_type(vals.dtype, vals.shape[1:])
        assert rows is not None and isinstance(c.name, str)  # push_fits checked them
        step = (c.args or {}).get("step")
        return [fastwire.push_request(rid, c.name.encode(), len(keys), rows, vals.nbytes, step), keys, vals]
    ids = [np.ascontiguousarray(a, dtype=np.int64) for a in c.arrays]
    n = sum(len(a) for a in ids)
    if c.op == "sample":
        args = c.args or {}
        head = fastwire.sample_request(rid, n, int(args["fanout"]), int(args["seed"]))
    else:
        assert c.out is not None and isinstance(c.name, str)
        rows = fastwire.row_type(c.out.dtype, c.out.shape[1:])
        assert rows is not None  # pull_fits checked it
        head = fastwire.request(rid, c.name.encode(), n, rows)
    return [head, *ids]


def request_bytes(c: Call) -> int:
    """The bytes of `c`'s request (what encode() makes), padded to 8 as a batch holds it."""
    n = 8 * ids_of(c)
    if c.op == "sample":
        return fastwire.REQUEST.size + fastwire.SAMPLE_ARGS.size + n
    named = fastwire.REQUEST.size + fastwire.pad8(len(str(c.name).encode())) + fastwire.ROW_TYPE.size
    if c.op == "push_grad" and "shm" in (c.args or {}):
        buffer = len((c.args or {})["shm"]["name"].encode())
        return named + fastwire.SHARED_ARGS.size + fastwire.pad8(buffer) + 8 * len(c.arrays[0])
    if c.op == "push_grad":
        return fastwire.pad8(named + fastwire.PUSH_ARGS.size + 8 * len(c.arrays[0]) + c.arrays[1].nbytes)
    return named + n


def reply_bytes(c: Call) -> int:
    """The most payload `c`'s reply can take (a sample's: every seed's full fan-out)."""
    if c.op == "push_grad":
        return fastwire.PUSH_REPLY.size
    if c.op == "sample":
        return 8 * ids_of(c) * (int((c.args or {})["fanout"]) + 1)
    assert c.out is not None
    return ids_of(c) * row_bytes(c.out)


def take(queue: deque[Call]) -> list[Call]:
    """The calls at the front of a shard's queue that go in one message: one, or a batch of up to
    fastwire.MAX_BATCH whose requests stay within MAX_BATCH_BYTES, whose replies' payloads within
    MAX_REPLY_BYTES and whose pushes from shared memory within MAX_SHARED_BYTES (a batch costs the server
    what one request may)."""
    group: list[Call] = []
    sent = got = work = 0
    for c in queue:
        sent, got, work = sent + request_bytes(c), got + reply_bytes(c), work + shared_bytes(c)
        if group and (
            len(group) == fastwire.MAX_BATCH
            or sent > fastwire.MAX_BATCH_BYTES
            or got > fastwire.MAX_REPLY_BYTES
            or work > fastwire.MAX_SHARED_BYTES
        ):
            break
        group.append(c)
    return group


def batch(parts: list[list[bytes | np.ndarray]], rid: int) -> list[bytes | np.ndarray]:
    """Encoded requests (encode()'s) as one batch: its header, then each padded to 8 bytes."""
    body: list[bytes | np.ndarray] = []
    size = 0
    for request in parts:
        n = sum(memoryview(p).nbytes for p in request)
        body += request
        if n % 8:
            body.append(bytes(8 - n % 8))
        size += fastwire.pad8(n)
    return [fastwire.batch_request(rid, len(parts), size), *body]
