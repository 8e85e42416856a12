"""The fast lane's wire (cuda/src/fastlane.cpp holds the server's side; its header comment is the spec).

A second, binary protocol beside the ZMQ one, for the requests that dominate a step across hosts: a pull
of at most MAX_REPLY_BYTES of rows of a host table, a neighbour sample of an untyped partition, and a
gradient push of at most MAX_REPLY_BYTES of float32 rows (or a half table's, in its type); (version 2)
a batch of up to MAX_BATCH of them for one shard in one message, answered in one reply; and (version 3)
a gradient push from the same host whose rows lie in the client's shared-memory push buffer, of at most
MAX_SHARED_BYTES of float32 rows (the message names the buffer and the offset).
Fixed little-endian headers, no msgpack, one request (or batch) in flight per connection. Peers
authenticate once per connection with the shard servers' token (sent as ZMQ's PLAIN mechanism sends
it: in the clear, on the cluster network the NetworkPolicy confines).
"""

from __future__ import annotations

import functools
import struct

import numpy as np

VERSION = 3  # 2: OP_BATCH; 3: OP_PUSH_SHARED; the server serves version-1 peers ops 1-3
HELLO = struct.Struct("<4sHH")  # magic, version, token length; then the token
HELLO_MAGIC = b"GTFL"
HELLO_REPLY = struct.Struct("<4sI")  # magic, status (0: accepted)
REQUEST = struct.Struct("<4sHHQQQ")  # magic, op, name length, rid, ids, reserved; name (padded to 8), ids
REQUEST_MAGIC = b"GTRQ"
REPLY = struct.Struct("<4sIQQ")  # magic, status, rid, payload bytes
REPLY_MAGIC = b"GTRP"
OP_PULL, OP_SAMPLE, OP_PUSH, OP_BATCH, OP_PUSH_SHARED = 1, 2, 3, 4, 5
MAX_BATCH = 8  # requests in one batch
SAMPLE_ARGS = struct.Struct("<qQ")  # fan-out, seed (after a sample's header)
PUSH_ARGS = struct.Struct("<q")  # Adam's table-wide step, or NO_STEP (after a push's row type)
SHARED_ARGS = struct.Struct("<qQ")  # a push from shared memory's step, and its rows' offset in the buffer
PUSH_REPLY = struct.Struct("<q")  # the unique rows the push updated
NO_STEP = -(2**63)
MAX_STEP = 2**62  # a push's step over either path: [1, MAX_STEP] (opargs.py: push_args)
OK, ERROR, NOT_HERE, BUSY = 0, 1, 2, 3  # BUSY: a push the lane did not apply now; ask over ZMQ

ROW_TYPE = struct.Struct("<II3Q")  # a pull's row type (after the padded name): element type, dims, dims[3]
ELEMENT_TYPES = ("<f4", "<f8", "<i4", "<i8", "<f2", "<i2")  # numpy's .str of the wire types; code = index + 1

MAX_REPLY_BYTES = 256 << 10  # the inline path's bound (serving/inline.py): 1,024 rows of 64 float32
MAX_IDS = 16 << 10  # ids per request: the request a connection may make the server hold is <= 128 KiB
MAX_BATCH_BYTES = 2 * MAX_REPLY_BYTES  # a batch's requests at most (its replies' payloads: MAX_REPLY_BYTES)
# the gradients of a push from shared memory at most, alone or in a batch: what one connection's turn of
# 16 pulls may cost the lane's thread (fastlane.cpp kPerWake); bigger pushes go over ZMQ
MAX_SHARED_BYTES = 16 * MAX_REPLY_BYTES
MAX_NAME = 128
MAX_TOKEN = 256


def pad8(n: int) -> int:
    return (n + 7) & ~7


def type_code(dtype: np.dtype) -> int:
    """The lane's code of an element type (0: one the lane does not serve)."""
    return ELEMENT_TYPES.index(dtype.str) + 1 if dtype.str in ELEMENT_TYPES else 0


@functools.lru_cache(maxsize=256)
def row_type(dtype: np.dtype, shape: tuple[int, ...]) -> bytes | None:
    """The row type block of a pull of rows of `shape` and `dtype` (None: not one the lane serves).
    Cached: every pull asks it twice (eligible, then the request) for the same few tables."""
    code = type_code(dtype)
    if not code or len(shape) > 3:
        return None
    return ROW_TYPE.pack(code, len(shape), *(list(shape) + [0, 0, 0])[:3])


def request(rid: int, name: bytes, n_ids: int, rows: bytes) -> bytes:
    """A pull's header, its padded name and the row type the caller reads (`rows`, row_type()); the ids
    follow."""
    head = REQUEST.pack(REQUEST_MAGIC, OP_PULL, len(name), rid, n_ids, 0)
    return head + name.ljust(pad8(len(name)), b"\0") + rows


def push_request(rid: int, name: bytes, n_ids: int, rows: bytes, grad_bytes: int, step: int | None) -> bytes:
    """A push's header (its gradients' bytes where a pull has 0), padded name, the gradients' row type
    and the step; the ids, then the gradient rows, follow."""
    head = REQUEST.pack(REQUEST_MAGIC, OP_PUSH, len(name), rid, n_ids, grad_bytes)
    tail = PUSH_ARGS.pack(NO_STEP if step is None else step)
    return head + name.ljust(pad8(len(name)), b"\0") + rows + tail


def shared_push_request(
    rid: int, name: bytes, n_ids: int, rows: bytes, buffer: bytes, offset: int, step: int | None
) -> bytes:
    """A push from shared memory's header (its buffer's name length where a pull has 0), padded name,
    the gradients' row type (float32, whatever the table's), step, offset and padded buffer name; the
    ids follow."""
    head = REQUEST.pack(REQUEST_MAGIC, OP_PUSH_SHARED, len(name), rid, n_ids, len(buffer))
    tail = SHARED_ARGS.pack(NO_STEP if step is None else step, offset) + buffer.ljust(
        pad8(len(buffer)), b"\0"
    )
    return head + name.ljust(pad8(len(name)), b"\0") + rows + tail


def sample_request(rid: int, n_seeds: int, fanout: int, seed: int) -> bytes:
    """A sample's header and arguments (the seeds follow)."""
    return REQUEST.pack(REQUEST_MAGIC, OP_SAMPLE, 0, rid, n_seeds, 0) + SAMPLE_ARGS.pack(
        fanout, seed & (2**64 - 1)
    )


def batch_request(rid: int, count: int, body_bytes: int) -> bytes:
    """A batch's header: `count` whole requests follow, each padded to 8 bytes, `body_bytes` in all."""
    return REQUEST.pack(REQUEST_MAGIC, OP_BATCH, 0, rid, count, body_bytes)


def hello(token: bytes, version: int = VERSION) -> bytes:
    return HELLO.pack(HELLO_MAGIC, version, len(token)) + token
