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
`validate` checks one op's arrays and arguments and returns them typed. What needs the table (its
existence, dtype, row range) is checked by the state. Every error message names the field, and never
echoes more than a few dozen characters of the input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import msgpack
import numpy as np

from graphtrain.runtime.dtypes import NUMPY
from graphtrain.runtime.errors import GraphtrainError

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
ECHO = 40  # characters of a client's value an error message may quote
DTYPES = NUMPY  # the wire names of the element types (runtime/dtypes.py)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
INIT_KINDS = ("zeros", "uniform", "normal")

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


def echo(value: Any) -> str:
    """A client-supplied value quoted in an error message, cut to a few dozen characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= ECHO else text[: ECHO - 3] + "..."


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


# ------------------------------------------------------------------------------ op arguments


def arg(args: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """A typed argument of a request, or a ProtocolError naming it (bools are not ints or floats)."""
    if key not in args:
        if default is ...:
            raise ProtocolError(f"argument {key!r} missing")
        return default
    value = args[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ProtocolError(f"argument {key!r} must be {_kind_names(kinds)}, got bool")
    if not isinstance(value, kinds):
        raise ProtocolError(f"argument {key!r} must be {_kind_names(kinds)}, got {type(value).__name__}")
    return value


def _kind_names(kinds: tuple[type, ...]) -> str:
    return "/".join("None" if k is type(None) else k.__name__ for k in kinds)


def int_arg(args: dict[str, Any], key: str, lo: int, hi: int, default: Any = ...) -> int:
    """An integer argument in [lo, hi] (None too, when None is the default)."""
    value = arg(args, key, (int, type(None)) if default is None else int, default)
    if value is not None and not lo <= value <= hi:
        raise ProtocolError(f"argument {key!r} must be in [{lo}, {hi}], got {value}")
    return value


def float_arg(args: dict[str, Any], key: str, default: Any = ...) -> float:
    value = arg(args, key, (int, float), default)
    if not math.isfinite(value):
        raise ProtocolError(f"argument {key!r} must be a finite number, got {value}")
    return float(value)


def str_arg(args: dict[str, Any], key: str, max_len: int = 1024, default: Any = ...) -> str:
    value = arg(args, key, str, default)
    if len(value) > max_len:
        raise ProtocolError(f"argument {key!r} is longer than {max_len} characters")
    return value


def _ids(a: np.ndarray, what: str) -> np.ndarray:
    if a.ndim != 1 or a.dtype != np.int64:
        raise ProtocolError(f"{what} must be a 1-D int64 array, got {a.dtype} {a.shape}")
    return a


def _id_frames(arrays: list[np.ndarray], what: str) -> list[np.ndarray]:
    if not arrays:
        raise ProtocolError(f"{what}: at least one frame of ids is needed")
    return [_ids(a, what) for a in arrays]


def joined(frames: list[np.ndarray]) -> np.ndarray:
    """Id frames as one array: a view when there is one frame. (A worker joins them, not the server's
    I/O thread, where a whole-table pull's 40 MB of ids would hold up every other connection.)"""
    return frames[0] if len(frames) == 1 else np.concatenate(frames)


@dataclass(frozen=True)
class CreateArgs:
    num_rows: int
    row_shape: tuple[int, ...]
    dtype: str
    lo: int
    hi: int
    init: dict[str, Any]
    keyed: dict[str, Any] | None = None  # a dynamic vocabulary: {"shards": S, "evict": bool} (keyed.py)


@dataclass(frozen=True)
class ShmRef:
    """Where a same-host client put a push's values: its push buffer segment and an offset."""

    name: str
    offset: int


@dataclass(frozen=True)
class PushArgs:
    """push / push_grad: id frames and value frames, or ids whose values lie in a client's buffer."""

    ids: list[np.ndarray]
    values: list[np.ndarray]  # rows in the ids' order; none with shm
    shm: ShmRef | None = None
    step: int | None = None

    def pieces(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(ids, values) per value frame, the ids joined first (by a worker: see joined())."""
        ids, out, at = joined(self.ids), [], 0
        for v in self.values:
            out.append((ids[at : at + len(v)], v))
            at += len(v)
        return out


@dataclass(frozen=True)
class PullArgs:
    ids: list[np.ndarray]  # frames; see joined()
    insert: bool = True  # a dynamic table's unseen keys get rows (a training pull), else read their init


@dataclass(frozen=True)
class SampleArgs:
    seeds: list[np.ndarray]  # frames
    fanout: int
    seed: int


@dataclass(frozen=True)
class BarrierArgs:
    key: str
    count: int
    timeout: float | None


@dataclass(frozen=True)
class PathArgs:
    path: str
    background: bool = False  # checkpoint: arm a copy-on-write snapshot and answer (snapshot.py)


@dataclass(frozen=True)
class OptimizerArgs:
    config: dict[str, Any]


@dataclass(frozen=True)
class NoArgs:
    pass


OpArgs = CreateArgs | PushArgs | PullArgs | SampleArgs | BarrierArgs | PathArgs | OptimizerArgs | NoArgs


def _no_frames(req: Request) -> None:
    if req.arrays:
        raise ProtocolError(f"{req.op} takes no frames, got {len(req.arrays)}")


def _create(req: Request) -> CreateArgs:
    _no_frames(req)
    a = req.args
    row_shape = arg(a, "row_shape", list)
    if len(row_shape) > 3 or not all(is_int(d) and 1 <= d <= 1 << 24 for d in row_shape):
        raise ProtocolError(f"argument 'row_shape' must be 0-3 positive integers, got {echo(row_shape)}")
    num_rows = int_arg(a, "num_rows", 0, MAX_ROWS)
    lo, hi = int_arg(a, "lo", 0, MAX_ROWS), int_arg(a, "hi", 0, MAX_ROWS)
    if not lo <= hi <= num_rows:
        raise ProtocolError(f"row range [{lo}, {hi}) does not fit a table of {num_rows} rows")
    dtype = arg(a, "dtype", str)
    if dtype not in DTYPES:
        raise ProtocolError(f"dtype {echo(dtype)} is not one of {sorted(DTYPES)}")
    keyed = arg(a, "keyed", dict, None)  # a dynamic vocabulary (keyed.py): {"shards", "evict"}
    if keyed is not None and set(keyed) - {"shards", "evict"}:
        raise ProtocolError(f"keyed has unknown keys {echo(sorted(map(str, keyed)))}")
    if keyed is not None:
        keyed = {"shards": int_arg(keyed, "shards", 1, 1 << 16), "evict": arg(keyed, "evict", bool, False)}
    return CreateArgs(num_rows, tuple(row_shape), dtype, lo, hi, init_spec(arg(a, "init", dict, {})), keyed)


def init_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A table's initial-value spec, checked: {"kind": zeros|uniform|normal, "low", "high", "mean",
    "std", "norm" (finite numbers; low below high, std and norm (each row's L2 norm, 0: as drawn) not
    negative), "seed" (an integer in [0, 2**63))}; the defaults (-1, 1, 0, 1, 0, 0) count in the checks."""
    if not isinstance(spec, dict):
        raise ProtocolError(f"argument 'init' must be a map, got {type(spec).__name__}")
    kind = arg(spec, "kind", str, "zeros")
    if kind not in INIT_KINDS:
        raise ProtocolError(f"init kind must be one of {INIT_KINDS}, got {echo(kind)}")
    unknown = set(spec) - {"kind", "low", "high", "mean", "std", "norm", "seed"}
    if unknown:
        raise ProtocolError(f"init has unknown keys {echo(sorted(map(str, unknown)))}")
    out: dict[str, Any] = {"kind": kind}
    for key in ("low", "high", "mean", "std", "norm"):
        if key in spec:
            out[key] = float_arg(spec, key)
    if "seed" in spec:
        out["seed"] = int_arg(spec, "seed", 0, 2**63 - 1)
    low, high = out.get("low", -1.0), out.get("high", 1.0)
    if kind == "uniform" and not low < high:
        raise ProtocolError(f"init 'low' must be below 'high', got low {low} and high {high}")
    for key in ("std", "norm"):
        if out.get(key, 0.0) < 0:
            raise ProtocolError(f"init {key!r} must be >= 0, got {out[key]}")
    return out


def _push(req: Request) -> PushArgs:
    step = int_arg(req.args, "step", 0, 2**62, None)
    buf = req.args.get("shm")
    if buf is not None:
        if not isinstance(buf, dict):
            raise ProtocolError("argument 'shm' must be a map")
        ref = ShmRef(str_arg(buf, "name", 255), int_arg(buf, "offset", 0, 2**62))
        return PushArgs(_id_frames(req.arrays, f"{req.op} ids"), [], ref, step)
    if len(req.arrays) < 2:
        raise ProtocolError(f"{req.op} takes frames [ids..., values...], got {len(req.arrays)}")
    k = int_arg(req.args, "id_frames", 1, len(req.arrays) - 1, 1)
    ids = _id_frames(req.arrays[:k], f"{req.op} ids")
    values, rows = req.arrays[k:], 0
    for i, v in enumerate(values, k):
        if v.ndim < 1:
            raise ProtocolError(f"frames[{i}] (values) must hold rows, got shape {v.shape}")
        rows += v.shape[0]
    if rows != sum(len(a) for a in ids):
        raise ProtocolError(f"{req.op} holds {rows} value rows for {sum(len(a) for a in ids)} ids")
    return PushArgs(ids, values, None, step)


def _pull(req: Request) -> PullArgs:
    return PullArgs(_id_frames(req.arrays, "pull ids"), bool(arg(req.args, "insert", bool, True)))


def _sample(req: Request) -> SampleArgs:
    fanout = int_arg(req.args, "fanout", -1, 1 << 20)
    if fanout == 0:
        raise ProtocolError("fanout must be positive or -1 (all), got 0")
    seed = int_arg(req.args, "seed", 0, 2**63 - 1, 0)
    return SampleArgs(_id_frames(req.arrays, "sample seeds"), fanout, seed)


def _barrier(req: Request) -> BarrierArgs:
    _no_frames(req)
    timeout = arg(req.args, "timeout", (int, float, type(None)), None)
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 86_400):
        raise ProtocolError(f"argument 'timeout' must be in (0, 86400] seconds, got {timeout}")
    key = str_arg(req.args, "key", 256)
    return BarrierArgs(key, int_arg(req.args, "count", 1, 100_000), timeout)


def _path(req: Request) -> PathArgs:
    _no_frames(req)
    return PathArgs(str_arg(req.args, "path", 1024))


def _checkpoint(req: Request) -> PathArgs:
    _no_frames(req)
    return PathArgs(str_arg(req.args, "path", 1024), bool(arg(req.args, "background", bool, False)))


def _optimizer(req: Request) -> OptimizerArgs:
    _no_frames(req)
    return OptimizerArgs(arg(req.args, "config", dict))


def _nothing(req: Request) -> NoArgs:
    _no_frames(req)
    return NoArgs()


VALIDATORS: dict[str, Callable[[Request], OpArgs]] = {
    "health": _nothing,
    "stats": _nothing,
    "shm_info": _nothing,
    "shutdown": _nothing,
    "create": _create,
    "set_optimizer": _optimizer,
    "pull": _pull,
    "push": _push,
    "push_grad": _push,
    "barrier": _barrier,
    "sample": _sample,
    "checkpoint": _checkpoint,
    "checkpoint_status": _path,
    "restore": _path,
}
assert set(VALIDATORS) == set(OPS)


def validate(req: Request) -> OpArgs:
    """The op's arrays and arguments, checked and typed.

    Raises:
        ProtocolError: naming the argument or frame; no other exception escapes.
    """
    check = VALIDATORS.get(req.op) if isinstance(req.op, str) else None
    if check is None:
        raise ProtocolError(f"unknown op {echo(req.op)}")
    name = req.name
    if OPS[req.op][0]:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ProtocolError(f"{req.op} needs a tensor name (letters, digits, _.:-), got {echo(name)}")
    elif name is not None:
        raise ProtocolError(f"{req.op} takes no tensor name")
    try:
        return check(req)
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - as parse_request: a refused request, never a crash
        raise ProtocolError(f"malformed arguments of {req.op} ({type(exc).__name__})") from None


def rows_per_chunk(row_bytes: int) -> int:
    """Rows of `row_bytes` each that fit one chunk."""
    return max(1, CHUNK_BYTES // max(1, row_bytes))
