"""The wire protocol's decoder and per-op validation are total: whatever the bytes, only ProtocolError
leaves them, with a message that names the field and quotes at most a few dozen characters."""

from __future__ import annotations

import contextlib

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphtrain.runtime.kvstore.wire import opargs, protocol


def pack(**fields) -> bytes:
    return msgpack.packb({"v": 2, "rid": 1, "args": {}, "frames": [], **fields}, use_bin_type=True)


def test_round_trip_of_a_push_in_frames_under_the_limit() -> None:
    ids = np.arange(5000, dtype=np.int64)
    values = np.random.default_rng(0).standard_normal((5000, 128)).astype(np.float32)
    arrays, k = protocol.push_frames(ids, values)
    frames = protocol.encode_request("push_grad", 9, "emb", arrays, {"step": 3, "id_frames": k})
    assert all(len(f) <= protocol.MAX_FRAME_BYTES for f in frames[1:])
    assert k == 1 and len(frames) == 2 + -(-values.nbytes // protocol.MAX_FRAME_BYTES)
    req = protocol.parse_request([bytes(f) for f in frames])
    args = opargs.validate(req)
    assert isinstance(args, opargs.PushArgs) and args.step == 3
    pieces = args.pieces()
    assert all(len(i) == len(v) for i, v in pieces)
    assert np.array_equal(np.concatenate([i for i, _ in pieces]), ids)
    assert np.array_equal(np.concatenate([v for _, v in pieces]), values)


def test_a_push_of_many_narrow_rows_has_several_id_frames() -> None:
    ids = np.arange(100_000, dtype=np.int64)
    values = np.ones((100_000, 2), np.float32)
    arrays, k = protocol.push_frames(ids, values)
    assert k == 4 and all(a.nbytes <= protocol.MAX_FRAME_BYTES for a in arrays)
    args = opargs.validate(
        protocol.parse_request(
            [bytes(f) for f in protocol.encode_request("push", 1, "t", arrays, {"id_frames": k})]
        )
    )
    assert np.array_equal(np.concatenate([i for i, _ in args.pieces()]), ids)


def test_id_frames_are_joined_by_the_worker() -> None:
    ids = np.arange(200_000, dtype=np.int64)
    frames = protocol.split_rows(ids)
    assert len(frames) == -(-ids.nbytes // protocol.MAX_FRAME_BYTES) and all(
        f.nbytes <= protocol.MAX_FRAME_BYTES for f in frames
    )
    args = opargs.validate(
        protocol.parse_request([bytes(f) for f in protocol.encode_request("pull", 1, "t", frames)])
    )
    assert np.array_equal(opargs.joined(args.ids), ids)


@pytest.mark.parametrize(
    ("frames", "needle"),
    [
        ([pack(op=["pull"], name="t")], "unknown op ['pull']"),
        ([pack(op={"a": 1}, name="t")], "unknown op {'a': 1}"),
        ([pack(op="pull", name="t", frames=[[["int64"], [1]]]), b"\0" * 8], "unsupported dtype ['int64']"),
        ([pack(op="pull", name="t", frames=[["int64", [True]]]), b"\0" * 8], "invalid shape [True]"),
        ([pack(op="pull", name="t", frames=[["int64", [2**32, 2**32]]]), b""], "holds 0 bytes"),
        ([pack(op="pull", name="t", frames=[["int64", [-1]]]), b""], "invalid shape [-1]"),
        ([pack(op="pull", name="t", frames=[["int64", [1.0]]]), b"\0" * 8], "invalid shape [1.0]"),
        ([pack(op="pull", name="t", frames=[["int64", "ab"]]), b""], "must be [dtype, shape]"),
        ([pack(op="pull", name="t", frames="x")], "header describes str frames"),
        ([pack(op="pull", name="t" * 200)], "got 'tttttttttttttttttttttttttttttttttttt..."),
        ([pack(op="stats", rid=-1)], "rid must be a non-negative integer, got -1"),
        ([pack(op="stats", rid=True)], "rid must be a non-negative integer, got True"),
        ([pack(op="stats", args=[1])], "args must be a map"),
        ([msgpack.packb({1: 2})], "not valid msgpack"),
        ([msgpack.packb("x" * 70_000)], "exceeds 65536"),
        ([], "empty message"),
    ],
)
def test_malformed_requests_are_named(frames: list[bytes], needle: str) -> None:
    with pytest.raises(protocol.ProtocolError) as exc:
        opargs.validate(protocol.parse_request(frames))
    assert needle in str(exc.value)
    assert len(str(exc.value)) < 200


@pytest.mark.parametrize(
    ("op", "arrays", "args", "needle"),
    [
        ("pull", [], {}, "at least one frame of ids"),
        ("pull", [np.zeros((2, 2), np.int64)], {}, "must be a 1-D int64 array"),
        ("push", [np.zeros(2, np.int64)], {}, "got 1"),
        (
            "push",
            [np.zeros(2, np.int64), np.zeros((3, 4), np.float32)],
            {},
            "push holds 3 value rows for 2 ids",
        ),
        (
            "push",
            [np.zeros(2, np.int64), np.zeros((2, 4), np.float32)],
            {"id_frames": 2},
            "must be in [1, 1]",
        ),
        ("push", [np.zeros(2, np.int64), np.zeros(2, np.int64)], {"id_frames": True}, "id_frames"),
        ("push", [np.zeros(2, np.int64), np.zeros((), np.float32)], {}, "must hold rows"),
        (
            "push_grad",
            [np.zeros(1, np.int64), np.zeros((1, 4), np.float32)],
            {"step": -1},
            "'step' must be in",
        ),
        ("push_grad", [np.zeros(1, np.int64)], {"shm": {"name": 5, "offset": 0}}, "'name' must be str"),
        (
            "create",
            [],
            {"num_rows": 10, "row_shape": [0], "dtype": "float32", "lo": 0, "hi": 10},
            "row_shape",
        ),
        ("create", [], {"num_rows": 10, "row_shape": [4], "dtype": "f16", "lo": 0, "hi": 10}, "dtype 'f16'"),
        (
            "create",
            [],
            {"num_rows": 2**41, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 1},
            "num_rows",
        ),
        (
            "create",
            [],
            {"num_rows": 4, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 4, "init": {"kind": "x"}},
            "init kind",
        ),
        (
            "create",
            [],
            {"num_rows": 4, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 4, "init": {"std": "1"}},
            "'std' must be int/float",
        ),
        (
            "create",
            [],
            {"num_rows": 4, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 4, "keyed": {"shards": 0}},
            "'shards' must be in [1, 65536]",
        ),
        (
            "create",
            [],
            {"num_rows": 4, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 4, "keyed": {"evict": 1}},
            "'shards' missing",
        ),
        (
            "create",
            [],
            {"num_rows": 4, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 4, "keyed": [2]},
            "'keyed' must be dict",
        ),
        ("pull", [np.zeros(1, np.int64)], {"insert": 1}, "'insert' must be bool"),
        ("barrier", [], {"key": "k", "count": 0}, "'count' must be in [1, 100000]"),
        ("barrier", [], {"key": "k", "count": 2, "timeout": float("inf")}, "'timeout' must be in"),
        ("barrier", [], {"key": "k" * 300, "count": 2}, "longer than 256"),
        ("sample", [np.zeros(1, np.int64)], {"fanout": 0}, "fanout must be positive or -1"),
        ("checkpoint", [np.zeros(1, np.int64)], {"path": "x"}, "takes no frames"),
        ("set_optimizer", [], {"config": [1]}, "'config' must be dict"),
    ],
)
def test_op_arguments_are_checked(op: str, arrays: list, args: dict, needle: str) -> None:
    req = protocol.Request(op, 1, "t" if protocol.OPS[op][0] else None, arrays, args)
    with pytest.raises(protocol.ProtocolError, match=None) as exc:
        opargs.validate(req)
    assert needle in str(exc.value)


# ------------------------------------------------------------------------------------ fuzzing

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
)
_value = st.recursive(
    _scalar,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)
_ops = st.sampled_from([*protocol.OPS, "nope"]) | _value
_desc = (
    st.lists(st.one_of(st.sampled_from([*protocol.DTYPES, "object"]), _value), min_size=0, max_size=3)
    | _value
)
_header = st.fixed_dictionaries(
    {"v": st.sampled_from([2, 2, 1]) | _value, "op": _ops, "rid": st.integers(-1, 2**64) | _value},
    optional={
        "name": st.sampled_from(["t", "emb", None]) | _value,
        "frames": st.lists(_desc, max_size=4) | _value,
        "args": st.dictionaries(
            st.sampled_from(
                [
                    "step",
                    "shm",
                    "key",
                    "count",
                    "timeout",
                    "fanout",
                    "seed",
                    "path",
                    "config",
                    "init",
                    "row_shape",
                    "num_rows",
                    "lo",
                    "hi",
                    "dtype",
                ]
            ),
            _value,
            max_size=6,
        )
        | _value,
    },
)


def _packed(header: dict) -> bytes:
    try:
        return msgpack.packb(header, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return b"\xc1"  # unpackable header: garbage is a fine input too


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_header, st.lists(st.binary(max_size=64), max_size=4))
def test_decoding_any_message_raises_only_protocol_errors(header: dict, payload: list[bytes]) -> None:
    try:
        req = protocol.parse_request([_packed(header), *payload], max_bytes=1 << 16)
        opargs.validate(req)
    except protocol.ProtocolError as exc:
        assert len(str(exc)) < 400


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=256), min_size=0, max_size=5))
def test_decoding_random_bytes_raises_only_protocol_errors(frames: list[bytes]) -> None:
    with contextlib.suppress(protocol.ProtocolError):
        opargs.validate(protocol.parse_request(frames))
