"""The shard servers' wire protocol: a msgpack header plus raw array frames, validated before use.

A message is a ZMQ multipart message: frame 0 is a msgpack map (the header), the next frames are the
raw bytes of arrays, described in the header's "frames" list as [dtype, shape]. Arrays cross
zero-copy in both directions; nothing is ever unpickled.

Request header:  {"v": 1, "op": str, "rid": int, "token": str, "name": str | None,
                  "frames": [[dtype, shape], ...], "args": {...}}
Reply header:    {"v": 1, "rid": int, "ok": bool, "error": str | None,
                  "frames": [[dtype, shape], ...], "result": {...}, "chunk": [index, count]}

Pull replies stream as several messages (`chunk`), each holding a few MB of rows, so the server
gathers the next chunk while the previous one is on the wire. Push and push-gradient requests carry
their values as several frames of one message ([ids, values_0, values_1, ...]); the server applies
them frame by frame, without concatenating.

`parse_request` is a pure function: every field is checked (known op, types, dtypes, shapes against
the frame sizes, size limits) and any problem becomes a ProtocolError whose message names it; the
server answers with that message and keeps serving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from graphtrain.runtime.errors import GraphtrainError

VERSION = 1
CHUNK_BYTES = 4 << 20  # rows per pull chunk / push frame: 4 MB (pyzmq's sweet spot on loopback)
MAX_HEADER_BYTES = 64 << 10
DEFAULT_MAX_REQUEST_BYTES = 1 << 30
DTYPES = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "float64": np.float64}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")

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
    token: str
    name: str | None
    arrays: list[np.ndarray]
    args: dict[str, Any] = field(default_factory=dict)


def _describe(a: np.ndarray) -> list[Any]:
    return [a.dtype.name, list(a.shape)]


def encode_request(
    op: str,
    rid: int,
    token: str,
    name: str | None = None,
    arrays: list[np.ndarray] | None = None,
    args: dict[str, Any] | None = None,
) -> list[Any]:
    """Frames of a request (header + C-contiguous arrays, not copied)."""
    arrays = [np.ascontiguousarray(a) for a in (arrays or [])]
    header = {
        "v": VERSION,
        "op": op,
        "rid": rid,
        "token": token,
        "name": name,
        "frames": [_describe(a) for a in arrays],
        "args": args or {},
    }
    return [msgpack.packb(header, use_bin_type=True), *[memoryview(a).cast("B") for a in arrays]]


def encode_reply(
    rid: int,
    ok: bool = True,
    error: str | None = None,
    arrays: list[np.ndarray] | None = None,
    result: dict[str, Any] | None = None,
    chunk: tuple[int, int] = (0, 1),
) -> list[Any]:
    arrays = [np.ascontiguousarray(a) for a in (arrays or [])]
    header = {
        "v": VERSION,
        "rid": rid,
        "ok": ok,
        "error": error,
        "frames": [_describe(a) for a in arrays],
        "result": result or {},
        "chunk": list(chunk),
    }
    return [msgpack.packb(header, use_bin_type=True), *[memoryview(a).cast("B") for a in arrays]]


def _unpack_header(raw: bytes | memoryview) -> dict[str, Any]:
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(
            bytes(raw),
            raw=False,
            strict_map_key=True,
            max_bin_len=0,
            max_ext_len=0,
            max_array_len=4096,
            max_map_len=256,
        )
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"header is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ProtocolError("header must be a map")
    return header


def _arrays(descs: Any, payload: list[Any], max_bytes: int) -> list[np.ndarray]:
    if not isinstance(descs, list) or len(descs) != len(payload):
        got = len(descs) if isinstance(descs, list) else type(descs).__name__
        raise ProtocolError(f"header describes {got} frames but {len(payload)} were sent")
    total = 0
    out = []
    for i, (desc, buf) in enumerate(zip(descs, payload, strict=True)):
        if not (isinstance(desc, list) and len(desc) == 2 and isinstance(desc[1], list)):
            raise ProtocolError(f"frames[{i}] must be [dtype, shape]")
        dtype_name, shape = desc
        if dtype_name not in DTYPES:
            raise ProtocolError(
                f"frames[{i}] has unsupported dtype {dtype_name!r} (allowed: {sorted(DTYPES)})"
            )
        if len(shape) > 4 or not all(isinstance(d, int) and 0 <= d < 2**40 for d in shape):
            raise ProtocolError(f"frames[{i}] has an invalid shape {shape!r}")
        dtype = np.dtype(DTYPES[dtype_name])
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = len(buf)
        total += size
        if total > max_bytes:
            raise ProtocolError(f"request of more than {total} bytes exceeds the limit of {max_bytes}")
        if size != expected:
            raise ProtocolError(f"frames[{i}] holds {size} bytes but {dtype_name}{shape} needs {expected}")
        out.append(np.frombuffer(buf, dtype=dtype).reshape(shape))
    return out


def parse_request(frames: list[Any], max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> Request:
    """Validate a request's frames (header first) and return it; arrays are views of the frames.

    Raises:
        ProtocolError: anything malformed, named in the message.
    """
    if not frames:
        raise ProtocolError("empty message")
    header = _unpack_header(frames[0])
    if header.get("v") != VERSION:
        raise ProtocolError(f"protocol version {header.get('v')!r} is not {VERSION}")
    op = header.get("op")
    if op not in OPS:
        raise ProtocolError(f"unknown op {op!r}")
    rid = header.get("rid")
    if not isinstance(rid, int) or rid < 0:
        raise ProtocolError(f"rid must be a non-negative integer, got {rid!r}")
    token = header.get("token")
    if not isinstance(token, str):
        raise ProtocolError("token missing")
    name = header.get("name")
    if OPS[op][0]:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ProtocolError(f"{op} needs a tensor name (letters, digits, _.:-), got {name!r}")
    elif name is not None and not isinstance(name, str):
        raise ProtocolError("name must be a string")
    args = header.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("args must be a map")
    arrays = _arrays(header.get("frames", []), list(frames[1:]), max_bytes)
    return Request(op=op, rid=rid, token=token, name=name, arrays=arrays, args=args)


def parse_reply(frames: list[Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A reply's header and arrays (views of the frames).

    Raises:
        ProtocolError: the reply is malformed.
    """
    if not frames:
        raise ProtocolError("empty reply")
    header = _unpack_header(frames[0])
    if header.get("v") != VERSION or not isinstance(header.get("rid"), int):
        raise ProtocolError("reply header lacks version or rid")
    return header, _arrays(header.get("frames", []), list(frames[1:]), 1 << 62)


def rows_per_chunk(dim: int, itemsize: int = 4) -> int:
    """Rows of `dim` values that fit one chunk."""
    return max(1, CHUNK_BYTES // max(1, dim * itemsize))


def arg(args: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """A typed argument of a request, or a ProtocolError naming it."""
    if key not in args:
        if default is ...:
            raise ProtocolError(f"argument {key!r} missing")
        return default
    value = args[key]
    if isinstance(value, bool) and kind in (int, float):
        raise ProtocolError(f"argument {key!r} must be {kind.__name__}, got bool")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ProtocolError(f"argument {key!r} must be {names}, got {type(value).__name__}")
    return value
