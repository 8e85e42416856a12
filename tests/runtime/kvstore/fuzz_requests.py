"""Generators of hostile shard-server requests, shared by the CI fuzz tests and bench/fuzz.py.

A request is built from (op, name, arrays, args) drawn near the valid ones: known ops and a few
unknown ones, the table's name or others, ids in and out of its range, values with NaN, infinity,
wrong dtypes and shapes, arguments of every type. Table sizes stay small (a "valid" 10 GB create is
an allocation, not a finding; the memory check has its own test).
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
import numpy as np
from hypothesis import strategies as st

from graphtrain.runtime.kvstore.wire import protocol

ROWS, DIM = 64, 8
NAMES = ["emb", "emb", "nope", "ndata.feat", "x" * 200, "", None]
ARG_KEYS = [
    "step", "shm", "key", "count", "timeout", "fanout", "seed", "path", "config", "init", "row_shape",
    "num_rows", "lo", "hi", "dtype",
]  # fmt: skip

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, ROWS + 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
value = st.recursive(
    scalar,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)
ids = st.lists(st.integers(-2, ROWS + 2), max_size=12).map(lambda v: np.asarray(v, np.int64))
rows_values = st.integers(0, 12).flatmap(
    lambda n: st.lists(
        st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=n * DIM, max_size=n * DIM
    ).map(lambda v, n=n: np.asarray(v, np.float32).reshape(n, DIM))
)
other_array = st.sampled_from(
    [np.zeros((2, 3), np.float64), np.zeros(3, np.int32), np.zeros((1, DIM), np.int64)]
)
arrays = st.lists(st.one_of(ids, rows_values, other_array), max_size=6)
small_create = st.fixed_dictionaries(
    {
        "num_rows": st.integers(-1, 300),
        "row_shape": st.lists(st.integers(-1, 9), max_size=4),
        "dtype": st.sampled_from([*protocol.DTYPES, "f16"]),
        "lo": st.integers(-1, 300),
        "hi": st.integers(-1, 300),
    },
    optional={
        "init": st.dictionaries(st.sampled_from(["kind", "low", "high", "mean", "std", "seed", "zz"]), value)
    },
)
optimizer = st.fixed_dictionaries(
    {"kind": st.sampled_from(["sgd", "adagrad", "rowwise_adagrad", "adam", "bogus"])},
    optional={"lr": value | st.floats(0.001, 1.0), "eps": value, "nonfinite": st.sampled_from(["skip", "x"])},
)


@st.composite
def requests(draw: Any, live: bool = False) -> tuple[str, Any, list[np.ndarray], dict[str, Any]]:
    """A drawn request; `live`: one a running server is sent (no shutdown: that one is honoured)."""
    ops = [op for op in [*protocol.OPS, "bogus"] if not (live and op == "shutdown")]
    op = draw(st.sampled_from(ops))
    name = draw(st.sampled_from(NAMES))
    args: dict[str, Any] = draw(st.dictionaries(st.sampled_from(ARG_KEYS), value, max_size=4))
    if op == "create":
        args.update(draw(small_create))
    elif op == "set_optimizer":
        args["config"] = draw(optimizer)
    elif op in ("push", "push_grad") and draw(st.booleans()):
        n = draw(st.integers(0, 10))
        k = draw(st.integers(1, 2))  # id frames, then value frames (args.id_frames, 1 when absent)
        frames = [draw(ids.filter(lambda a, n=n: len(a) == n) | ids) for _ in range(k)]
        frames += [draw(rows_values) for _ in range(draw(st.integers(1, 2)))]
        if k > 1 or draw(st.booleans()):
            args["id_frames"] = draw(st.sampled_from([k, k, 0, k + 1, True]))
        return op, name, frames, args
    elif op == "barrier":
        args.update(
            key=draw(st.text(max_size=8)), count=draw(st.integers(0, 3)), timeout=draw(st.floats(0.01, 0.2))
        )
    elif op in ("checkpoint", "restore"):
        args["path"] = draw(st.sampled_from(["ck", "../x", "/etc", "ck/../../y", "a" * 2000, ""]))
    return op, name, draw(arrays), args


def encode(
    op: Any, name: Any, arrs: list[np.ndarray], args: dict[str, Any], mutate: bytes = b""
) -> list[bytes]:
    """Wire frames of a drawn request; `mutate` XORs bytes into the header (a flipped byte on the wire)."""
    try:
        frames = [bytes(f) for f in protocol.encode_request(op, 1, name, arrs, args)]
    except (TypeError, ValueError, OverflowError):
        frames = [b"\xc1", *[a.tobytes() for a in arrs]]
    if mutate:
        head = bytearray(frames[0])
        for i, b in enumerate(mutate):
            if head:
                head[(i * 7919) % len(head)] ^= b
        frames[0] = bytes(head)
    return frames


def unpackable(header: dict[str, Any]) -> bytes:
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        return msgpack.packb(header, use_bin_type=True)
    return b"\xc1"
