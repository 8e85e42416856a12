"""Half tables' gradient pushes on the fast lane (issue 47, item 3): the lane widens the gradients
(sent in the table's type, as over ZMQ) and rounds with the table's next seed, from the step count it
and the Python path both increment (TensorShard.round_steps), so the two paths write the same bits;
malformed and fuzzed pushes change no row; every field the lane's description holds makes it stale when
assigned. A real server or lane in this process, real clients."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from graphtrain.runtime import dtypes, kvstore
from graphtrain.runtime.kvstore.wire import fastwire, protocol
from graphtrain.runtime.storage.tablelock import NativeLock
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_fastlane import recv_exactly, servers, stats  # noqa: F401 - the fixture
from tests.runtime.kvstore.test_fastlane_push import BOUNDS, DIM, OPTIMIZERS, ROWS, batches, lane_of, table

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "optimizer",
    [OPTIMIZERS[0], OPTIMIZERS[2], OPTIMIZERS[3], OPTIMIZERS[4]],
    ids=["adam", "rowwise", "adagrad", "sgd"],
)
def test_half_table_pushes_on_the_lane_round_as_the_zmq_path_does(
    servers,  # noqa: F811
    dtype: str,
    optimizer: dict,
) -> None:
    """A half table's pushes carry its type; the lane widens them and rounds with the table's next seed
    (TensorShard.round_seed's count, which both paths increment): two servers holding the same table,
    one pushed over its lane and one over ZMQ, hold the same bits, a push the lane leaves to ZMQ (a stale
    description) and a refused one (a NaN) in between included."""
    (on_lane,), (on_zmq,) = servers(), servers()
    fast = kvstore.connect([on_lane.address], TOKEN, timeout=10)
    slow = kvstore.connect([on_zmq.address], TOKEN, timeout=10, fast=False)
    try:
        for c in (fast, slow):
            c.create("t", ROWS, (DIM,), dtype, BOUNDS, {"kind": "uniform", "seed": 4})
            c.set_optimizer("t", optimizer)
        on_lane.tables_changed()
        mean = optimizer.get("duplicate") == "mean"
        t = on_lane.state.tensors["t"]
        assert isinstance(t.lock, NativeLock)
        for step, (ids, grads) in enumerate(batches(7), start=1):
            if step == 3:  # as a new optimizer or an armed checkpoint does: this push goes over ZMQ
                t.lock.stale()
            if step == 4:
                on_lane.tables_changed()  # described again: the lane steps from the count ZMQ left
                grads = grads.copy()
                grads[5, 1] = np.nan
                for c in (fast, slow):
                    with pytest.raises(protocol.RemoteError, match="hold NaN or infinity"):
                        c.push_grad("t", ids, grads, BOUNDS, mean, step=step, half=dtype)
                continue
            for c in (fast, slow):
                c.push_grad("t", ids, grads, BOUNDS, mean, step=step, wait=step % 2 == 0, half=dtype)
            pulled = [c.pull("t", ids[:64], BOUNDS, (DIM,), dtypes.NUMPY[dtype]) for c in (fast, slow)]
            assert np.array_equal(pulled[0], pulled[1])
        (a, sa), (b, sb) = table(on_lane, "t"), table(on_zmq, "t")
        assert a.dtype == getattr(torch, dtype) and torch.equal(a.view(torch.int16), b.view(torch.int16))
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert t.steps == on_zmq.state.tensors["t"].steps == 6
        assert stats(on_lane)["pushes_ok"] == 4 and stats(on_lane)["pushes_busy"] == 1
        assert stats(on_lane)["errors"] == 1  # the NaN push, refused by the lane in the ZMQ path's words
    finally:
        fast.close()
        slow.close()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_tables_malformed_pushes_change_no_row(servers, dtype: str) -> None:  # noqa: F811
    """Gradients for a half table in another type, bits holding NaN or infinity, or bytes that are not
    the rows: refused ("not served": over ZMQ, or in words), no row or state changed, the next good
    push stepped."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("h", ROWS, (DIM,), dtype, BOUNDS, {"kind": "uniform", "seed": 4})
        c.set_optimizer("h", {"kind": "adagrad", "lr": 0.05})
        srv.tables_changed()
        before = table(srv, "h")
        wire = dtypes.NUMPY[dtype]
        row = fastwire.row_type(wire, (DIM,))
        ids = np.array([1, 2, 3], dtype=np.int64)
        good = dtypes.narrowed(np.ones((3, DIM), np.float32), dtype)
        nan, inf = good.copy(), good.copy()
        nan.view(np.uint16)[1, 4] = 0x7E00 if dtype == "float16" else 0x7FC1
        inf.view(np.uint16)[2, 0] = 0x7C00 if dtype == "float16" else 0x7F80

        def push(grads: np.ndarray, rows: bytes | None = row, nbytes: int | None = None) -> tuple[int, bytes]:
            s = lane_of(srv)
            try:
                n = grads.nbytes if nbytes is None else nbytes
                s.sendall(
                    fastwire.push_request(1, b"h", 3, rows, n, None) + ids.tobytes() + grads.tobytes()[:n]
                )
                _, status, _, size = fastwire.REPLY.unpack(recv_exactly(s, fastwire.REPLY.size))
                return status, recv_exactly(s, size)
            finally:
                s.close()

        float32_rows = fastwire.row_type(np.dtype(np.float32), (DIM,))
        assert push(np.ones((3, DIM), np.float32), float32_rows)[0] == fastwire.NOT_HERE
        for bad, first in ((nan, 2), (inf, 3)):
            status, said = push(bad)
            assert status == fastwire.ERROR
            assert said.decode() == (
                "push_grad of 'h': 1 gradient row(s) hold NaN or infinity "
                f"(first id {first}); no row was updated"
            )
        assert push(good, nbytes=good.nbytes - 2)[0] == fastwire.ERROR  # bytes that are not the rows
        after = table(srv, "h")
        assert torch.equal(before[0], after[0]) and all(
            torch.equal(before[1][k], after[1][k]) for k in before[1]
        )
        status, said = push(good)
        assert status == fastwire.OK and fastwire.PUSH_REPLY.unpack(said) == (3,)
        assert not torch.equal(before[0][1:4], srv.state.tensors["h"].data[1:4])
        c.create("odd", 100, (3,), dtype, np.array([0, 100]), {"kind": "zeros"})  # 6 bytes a row
        c.set_optimizer("odd", {"kind": "sgd", "lr": 1.0})
        c.push_grad("odd", np.array([7]), np.ones((1, 3), np.float32), np.array([0, 100]), False, half=dtype)
        assert srv.state.tensors["odd"].data[7].tolist() == [-1.0, -1.0, -1.0]
        assert stats(srv)["pushes_ok"] == 2 and stats(srv)["malformed"] == 0
    finally:
        c.close()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_assigning_anything_the_lanes_description_holds_makes_it_stale(dtype: str) -> None:
    """The description carries pointers (rows, state, a half table's step count) and values (bounds, the
    seed base from the name): each assignment to one of them, even of the same value, leaves the table's
    pushes to ZMQ until it is described again; the step count is not assigned at all."""
    from graphtrain.runtime.kvstore.serving.fastlane import describe
    from graphtrain.runtime.kvstore.tables.state import ShardTensors

    state = ShardTensors(0)
    try:
        state.create("t", ROWS, (DIM,), dtype, 0, ROWS, {"kind": "zeros"})
        state.set_optimizer("t", {"kind": "adagrad", "lr": 0.1})
        t = state.tensors["t"]
        # what describe() reads, or what decides whether the lane may step the table at all
        held = ("data", "config", "state", "snapshot", "keyed", "changed", "lo", "hi", "name")
        for field in held:
            lock = t.lock
            assert isinstance(lock, NativeLock)
            with lock:
                assert describe(t) and lock.described, field
                setattr(t, field, getattr(t, field))
                assert not lock.described, field
        with pytest.raises(AttributeError, match="round_steps is counted in place"):
            t.round_steps = np.zeros(1, dtype=np.int64)  # the lane may hold the old one's address
        old = t.lock
        with old:
            assert describe(t)
        t.lock = NativeLock(old._core)  # noqa: SLF001 - a new lock: the lane's old one is stale
        assert not old.described
    finally:
        state.close()


@pytest.mark.timeout(120)
def test_fuzzed_half_pushes_never_crash_the_lane_and_a_refused_one_changes_no_row() -> None:
    """Hostile authenticated pushes to half tables the lane steps: random ids (in and out of the rows),
    row types, byte counts and gradient bits (NaN and infinities among them). Each is stepped, refused or
    closed; a push not answered "ok" leaves every row, state and the step count as they were; the lane
    answers a good pull after each."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from graphtrain.runtime.kvstore.serving.fastlane import FastLane, LaneLimits
    from graphtrain.runtime.kvstore.tables.state import ShardTensors
    from tests.runtime.kvstore.test_fastlane import lane

    rows = 64
    state = ShardTensors(0)
    for name, dtype in (("h", "bfloat16"), ("f", "float16")):
        state.create(name, rows, (DIM,), dtype, 0, rows, {"kind": "uniform", "seed": 3})
        state.set_optimizer(name, {"kind": "adagrad", "lr": 0.01})
    lane_ = FastLane(("127.0.0.1", 0), TOKEN.encode(), LaneLimits(handshake_seconds=2.0))
    lane_.sync(state.tensors)
    good = lane(lane_)
    push = st.tuples(
        st.sampled_from([b"h", b"f", b"nope"]),
        st.sampled_from(["int16", "float16", "float32", "wide"]),  # the row type sent
        st.lists(st.integers(-3, rows + 3), min_size=0, max_size=12),
        st.integers(-4, 4),  # bytes off the rows'
        st.binary(min_size=0, max_size=12 * DIM * 2),  # gradient bits (zero-padded to the rows)
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    )

    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(push)
    def one(example) -> None:
        name, kind, ids, off, bits, step = example
        shape = (DIM + 1,) if kind == "wide" else (DIM,)
        row = fastwire.row_type(np.dtype(np.float32 if kind == "wide" else kind), shape)
        width = 4 if kind in ("float32", "wide") else 2
        nbytes = max(0, len(ids) * shape[0] * width + off)
        body = bits.ljust(nbytes, b"\0")[:nbytes]
        before = {
            n: (t.data.clone(), {k: v.clone() for k, v in t.state.items()}, t.steps)
            for n, t in state.tensors.items()
        }
        s = socket.create_connection(("127.0.0.1", lane_.port), timeout=10)
        status = None
        try:
            s.sendall(fastwire.hello(TOKEN.encode()))
            recv_exactly(s, 8)
            s.sendall(
                fastwire.push_request(1, name, len(ids), row, nbytes, step)
                + np.array(ids, np.int64).tobytes()
                + body
            )
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            status = fastwire.REPLY.unpack(recv_exactly(s, fastwire.REPLY.size))[1]
        except (OSError, ConnectionError):  # closed by the lane: a framing error
            pass
        finally:
            s.close()
        for n, t in state.tensors.items():
            data, kept, steps = before[n]
            mine = name.decode() == n
            if status != fastwire.OK or not mine:
                assert torch.equal(t.data.view(torch.int16), data.view(torch.int16)), (n, example)
                assert all(torch.equal(t.state[k], kept[k]) for k in kept), (n, example)
                if not (mine and status == fastwire.ERROR):  # a refused NaN counts its step, as over ZMQ
                    assert t.steps == steps, (n, example)
        good.sendall(
            fastwire.request(1, b"h", 2, fastwire.row_type(np.dtype(np.int16), (DIM,)))
            + np.array([0, rows - 1], np.int64).tobytes()
        )
        magic, got, _, size = fastwire.REPLY.unpack(recv_exactly(good, fastwire.REPLY.size))
        assert (magic, got, size) == (fastwire.REPLY_MAGIC, fastwire.OK, 2 * DIM * 2)
        recv_exactly(good, size)

    try:
        one()
        assert lane_.stats()["pushes_ok"] > 0 and lane_.stats()["errors"] > 0
    finally:
        good.close()
        lane_.stop()
        state.close()
