"""The wire protocol's op arguments: each op's arrays and arguments checked and typed (`validate`), the
second of the two pure validation steps (protocol.py's module docstring): what the envelope parsed,
held against what the op takes, every error a ProtocolError naming the argument or frame."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphtrain.runtime.kvstore.wire.protocol import (
    DTYPES,
    MAX_ROWS,
    NAME_PATTERN,
    OPS,
    ProtocolError,
    Request,
    echo,
    is_int,
)
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.inits import init_spec

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
    edges: bool = False  # answer each edge's type and global id too (typed graphs)
    type_fanouts: np.ndarray | None = None  # a fan-out per edge type (-1 all, 0 none) instead of `fanout`


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
    return CreateArgs(num_rows, tuple(row_shape), dtype, lo, hi, _init(arg(a, "init", dict, {})), keyed)


def _init(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        return init_spec(spec)
    except StorageError as exc:
        raise ProtocolError(str(exc)) from None


def _push(req: Request) -> PushArgs:
    step = int_arg(req.args, "step", 1, 2**62, None)  # Adam's bias corrections divide by 1 - beta^step
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


MAX_EDGE_TYPES = 4096  # fan-outs a per-edge-type sample may list (a header's arrays hold MAX_FRAMES)


def _sample(req: Request) -> SampleArgs:
    fanout = int_arg(req.args, "fanout", -1, 1 << 20)
    if fanout == 0:
        raise ProtocolError("fanout must be positive or -1 (all), got 0")
    seed = int_arg(req.args, "seed", 0, 2**63 - 1, 0)
    edges = bool(arg(req.args, "edges", bool, False))
    per_type = arg(req.args, "type_fanouts", (list, type(None)), None)
    type_fanouts = None
    if per_type is not None:
        if not per_type or len(per_type) > MAX_EDGE_TYPES:
            raise ProtocolError(f"argument 'type_fanouts' must list 1 to {MAX_EDGE_TYPES} fan-outs")
        if not all(is_int(f) and not isinstance(f, bool) and -1 <= f <= 1 << 20 for f in per_type):
            raise ProtocolError("argument 'type_fanouts' must hold integers in [-1, 1048576]")
        type_fanouts = np.asarray(per_type, dtype=np.int64)
    return SampleArgs(_id_frames(req.arrays, "sample seeds"), fanout, seed, edges, type_fanouts)


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
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise ProtocolError(f"{req.op} needs a tensor name (letters, digits, _.:-), got {echo(name)}")
    elif name is not None:
        raise ProtocolError(f"{req.op} takes no tensor name")
    try:
        return check(req)
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - as parse_request: a refused request, never a crash
        raise ProtocolError(f"malformed arguments of {req.op} ({type(exc).__name__})") from None
