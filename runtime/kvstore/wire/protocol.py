"""The shard servers' wire protocol: a msgpack header plus raw array frames, validated before use.

A message is a ZMQ multipart message: frame 0 is a msgpack map (the header), the next frames are the
raw bytes of arrays, described in the header's "frames" list as [dtype, shape]. Arrays cross
zero-copy in both directions; nothing is ever unpickled.

Request header:  {"v": 2, "op": str, "rid": int, "name": str | None,
                  "frames": [[dtype, shape], ...], "args": {...}}
Reply header:    {"v": 2, "rid": int, "ok": bool, "error": str | None,
                  "frames": [[dtype, shape], ...], "result": {...}, "chunk": [index, count]}

Peers authenticate once, at the connection (ZMQ's PLAIN mechanism, checked by the server's ZAP
handler: auth.py), not per request: a peer without the token never gets a message delivered, so it
can make the server neither parse nor buffer anything beyond one frame of the handshake. Every frame a
client sends is at most MAX_FRAME_BYTES (the server's ZMQ_MAXMSGSIZE), which bounds that frame: ids
and values travel as several frames, a push as its id frames then its value frames (args.id_frames
says how many hold ids; 1 when absent).

Pull replies stream as several messages (`chunk`) of CHUNK_BYTES of rows each, so the server gathers
the next chunk while the previous one is on the wire.

Validation is two pure steps: `parse_request` checks the envelope (version, op, rid, frame
descriptions against the bytes) and never raises anything but ProtocolError, whatever the bytes;
`validate` (opargs.py) checks one op's arrays and arguments and returns them typed. What needs the
table (its existence, dtype, row range) is checked by the state. Every error message names the field,
and never echoes more than a few dozen characters of the input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import msgpack
import numpy as np

from graphtrain.runtime.dtypes import NUMPY
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.storage.errors import ECHO, echo  # noqa: F401 - the wire's quoting too

VERSION = 2
CHUNK_BYTES = 4 << 20  # rows per pull chunk and per push request: 4 MB (pyzmq's sweet spot on loopback)
# Largest frame a client sends, and the server's ZMQ_MAXMSGSIZE: the most one unauthenticated connection
# can make the server buffer (its handshake is read as frames too): 100 such peers cost ~27 MB. A request's
# frames are one optimizer step (the core reads each frame where it lies): 256 KB frames are as fast.
MAX_FRAME_BYTES = 256 << 10
MAX_HEADER_BYTES = 64 << 10
MAX_FRAMES = 4096
DEFAULT_MAX_REQUEST_BYTES = 64 << 20
MAX_ROWS = 1 << 40
DTYPES = NUMPY  # the wire names of the element types (runtime/dtypes.py)
NAME_PATTERN = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.:-]{0,127}\Z")  # \Z: no newline after it, as $ allows

# op -> (needs a tensor name, idempotent: safe to retry after a timeout)
OPS: dict[str, tuple[bool, bool]] = {
    "health": (False, True),
    "stats": (False, True),
    "create": (True, True),
    "set_optimizer": (True, True),
    "pull": (True, True),
    "push": (True, True),
    "push_grad": (True, False),
    "barrier": (False, False),
    "sample": (False, True),
    "checkpoint": (False, True),
    "checkpoint_status": (False, True),
    "restore": (False, True),
    "shm_info": (False, True),
    "shutdown": (False, False),
}


class ProtocolError(GraphtrainError, ValueError):
    """A malformed or refused request; the message names the field or value."""


class RemoteError(GraphtrainError):
    """A shard server answered a request with an error (its message is kept)."""


@dataclass
class Request:
    op: str
    rid: int
    name: Any  # str | None once validate() has checked it
    arrays: list[np.ndarray]
    args: dict[str, Any] = field(default_factory=dict)
    nbytes: int = 0  # bytes of the array frames (what the request holds in memory)


# ----------------------------------------------------------------------------------- encoding


# dtype -> its protocol name: numpy's dtype.name is computed on each access (~9 us), a push of 51 MB
# in 256 KB frames describes ~400 of them
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def _describe(a: np.ndarray) -> list[Any]:
    return [_DTYPE_NAMES.get(a.dtype) or a.dtype.name, list(a.shape)]


def _bytes(a: np.ndarray) -> memoryview:
    # a flat byte view (not memoryview.cast, which refuses a shape with a zero in it)
    return a.reshape(-1).view(np.uint8).data


def _pack(header: dict[str, Any], arrays: Sequence[np.ndarray]) -> list[Any]:
    arrays = [
        a if isinstance(a, np.ndarray) and a.ndim and a.flags.c_contiguous else np.ascontiguousarray(a)
        for a in arrays
    ]
    header["frames"] = [_describe(a) for a in arrays]
    return [msgpack.packb(header, use_bin_type=True), *[_bytes(a) for a in arrays]]


def encode_request(
    op: str,
    rid: int,
    name: str | None = None,
    arrays: Sequence[np.ndarray] | None = None,
    args: dict[str, Any] | None = None,
) -> list[Any]:
    """Frames of a request (header + C-contiguous arrays, not copied)."""
    header = {"v": VERSION, "op": op, "rid": rid, "name": name, "args": args or {}}
    return _pack(header, arrays or [])


def encode_reply(
    rid: int,
    ok: bool = True,
    error: str | None = None,
    arrays: Sequence[np.ndarray] | None = None,
    result: dict[str, Any] | None = None,
    chunk: tuple[int, int] = (0, 1),
) -> list[Any]:
    header = {
        "v": VERSION,
        "rid": rid,
        "ok": ok,
        "error": error,
        "result": result or {},
        "chunk": list(chunk),
    }
    return _pack(header, arrays or [])


def split_rows(a: np.ndarray, max_bytes: int | None = MAX_FRAME_BYTES) -> list[np.ndarray]:
    """`a` as consecutive row blocks of at most `max_bytes` each (views; None: one block)."""
    row = max(1, a[:1].nbytes)
    if max_bytes is None or len(a) * row <= max_bytes:
        return [a]
    step = max(1, max_bytes // row)
    return [a[i : i + step] for i in range(0, len(a), step)]


def push_frames(
    ids: np.ndarray, values: np.ndarray, max_bytes: int | None = MAX_FRAME_BYTES
) -> tuple[list[np.ndarray], int]:
    """A push's frames, each at most `max_bytes`: its ids, then its values; and how many frames hold ids
    (the request's `id_frames` argument). Ids apart from their values, not in pairs: the ids of 4 MB of
    128-wide rows fit one 64 KB frame, so a chunk is 17 frames instead of 32, and each frame costs both
    ends tens of microseconds of Python (a 51 MB push took ~25 % longer in pairs)."""
    id_frames = split_rows(ids, max_bytes)
    return [*id_frames, *split_rows(values, max_bytes)], len(id_frames)


# ----------------------------------------------------------------------------------- decoding


def _unpack_header(raw: Any) -> dict[str, Any]:
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(
            bytes(raw),
            raw=False,
            strict_map_key=True,
            max_bin_len=0,
            max_ext_len=0,
            max_str_len=MAX_HEADER_BYTES,
            max_array_len=MAX_FRAMES,
            max_map_len=256,
        )
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"header is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ProtocolError("header must be a map")
    return header


def is_int(x: object) -> TypeGuard[int]:
    """An integer that is not a bool (msgpack's True would otherwise pass isinstance(x, int))."""
    return type(x) is int


def _arrays(descs: Any, payload: list[Any], max_bytes: int) -> tuple[list[np.ndarray], int]:
    if not isinstance(descs, list) or len(descs) != len(payload):
        got = len(descs) if isinstance(descs, list) else type(descs).__name__
        raise ProtocolError(f"header describes {got} frames but {len(payload)} were sent")
    total = 0
    out = []
    for i, (desc, buf) in enumerate(zip(descs, payload, strict=True)):
        if not (isinstance(desc, list) and len(desc) == 2 and isinstance(desc[1], list)):
            raise ProtocolError(f"frames[{i}] must be [dtype, shape]")
        dtype_name, shape = desc
        if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
            raise ProtocolError(
                f"frames[{i}] has unsupported dtype {echo(dtype_name)} (allowed: {sorted(DTYPES)})"
            )
        if len(shape) > 4 or not all(is_int(d) and 0 <= d < 2**40 for d in shape):
            raise ProtocolError(f"frames[{i}] has an invalid shape {echo(shape)}")
        dtype = np.dtype(DTYPES[dtype_name])
        expected = math.prod(shape) * dtype.itemsize  # Python ints: no int64 wrap-around
        size = len(buf)
        total += size
        if total > max_bytes:
            raise ProtocolError(f"request of more than {total} bytes exceeds the limit of {max_bytes}")
        if size != expected:
            raise ProtocolError(f"frames[{i}] holds {size} bytes but {dtype_name}{shape} needs {expected}")
        out.append(np.frombuffer(buf, dtype=dtype).reshape(shape))
    return out, total


def parse_request(frames: list[Any], max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> Request:
    """Check a request's envelope (header first) and return it; arrays are views of the frames.

    Raises:
        ProtocolError: anything malformed, named in the message; no other exception escapes.
    """
    try:
        return _parse_request(frames, max_bytes)
    except ProtocolError:
        raise
    except Exception as exc:  # a case the checks below missed: still a refused request, never a crash
        raise ProtocolError(f"malformed request ({type(exc).__name__})") from None


def _parse_request(frames: list[Any], max_bytes: int) -> Request:
    if not frames:
        raise ProtocolError("empty message")
    header = _unpack_header(frames[0])
    if header.get("v") != VERSION:
        raise ProtocolError(f"protocol version {echo(header.get('v'))} is not {VERSION}")
    op = header.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ProtocolError(f"unknown op {echo(op)}")
    rid = header.get("rid")
    if not is_int(rid) or not 0 <= rid < 2**63:
        raise ProtocolError(f"rid must be a non-negative integer, got {echo(rid)}")
    name = header.get("name")
    args = header.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("args must be a map")
    arrays, nbytes = _arrays(header.get("frames", []), list(frames[1:]), max_bytes)
    return Request(op=op, rid=rid, name=name, arrays=arrays, args=args, nbytes=nbytes)


def lenient_rid(frames: list[Any]) -> int:
    """The rid of a request that failed validation, if its header can be read at all (else -1)."""
    try:
        header = _unpack_header(frames[0])
        rid = header.get("rid")
        return rid if is_int(rid) and 0 <= rid < 2**63 else -1
    except Exception:  # noqa: BLE001 - garbage has no rid
        return -1


def parse_reply(frames: list[Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A reply's header and arrays (views of the frames).

    Raises:
        ProtocolError: the reply is malformed.
    """
    try:
        if not frames:
            raise ProtocolError("empty reply")
        header = _unpack_header(frames[0])
        if header.get("v") != VERSION or not is_int(header.get("rid")):
            raise ProtocolError("reply header lacks version or rid")
        return header, _arrays(header.get("frames", []), list(frames[1:]), 1 << 62)[0]
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - as parse_request: only ProtocolError leaves
        raise ProtocolError(f"malformed reply ({type(exc).__name__})") from None


def rows_per_chunk(row_bytes: int) -> int:
    """Rows of `row_bytes` each that fit one chunk."""
    return max(1, CHUNK_BYTES // max(1, row_bytes))
