"""Gradient pushes on the shard server's fast lane (cuda/src/fastlane.cpp's op 3, serving/fastlane.py's
description of the step, client/fastlane.py): the rows and optimizer state they leave are the ZMQ path's
bit for bit (half tables: test_fastlane_push_half.py), their refusals are its words, a locked or
re-armed table goes over ZMQ without losing or doubling a step, the next incremental checkpoint sees
the rows the lane wrote, and a push whose connection fails after it was sent is never sent twice. A
real server in this process, real clients."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.checkpoint.increment import Changed
from graphtrain.runtime.kvstore.client.transport import KVTimeout
from graphtrain.runtime.kvstore.wire import fastwire, protocol
from graphtrain.runtime.storage.tablelock import NativeLock
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_fastlane import recv_exactly, servers, stats  # noqa: F401 - the fixture

ROWS, DIM = 4_000, 16
BOUNDS = np.array([0, ROWS])
pytestmark = pytest.mark.timeout(60)

OPTIMIZERS = [
    {"kind": "adam", "lr": 0.01, "step_count": "global"},
    {"kind": "adam", "lr": 0.01},
    {"kind": "rowwise_adagrad", "lr": 0.05},
    {"kind": "adagrad", "lr": 0.05, "duplicate": "mean"},
    {"kind": "adagrad", "lr": 0.1, "eps": 1e-8, "initial_accumulator": 0.1},  # the two-servers test's
    {"kind": "sgd", "lr": 0.1},
    {"kind": "adam", "lr": 0.01, "row_norm": 1.0},  # TransE's entities: the core scales them in its loop
]


def batches(seed: int, n: int = 6) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pushes with repeated ids (the client reduces them), of up to 1,500 rows of 16 (96 KiB)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        ids = rng.integers(0, ROWS, 200 + 250 * k)
        out.append((ids, rng.standard_normal((len(ids), DIM)).astype(np.float32)))
    return out


def lane_and_zmq(srv, optimizer: dict) -> tuple[kvstore.KVClient, kvstore.KVClient]:
    """A client on the lane and one on ZMQ only, and tables "lane" and "zmq" alike with `optimizer`."""
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    slow = kvstore.connect([srv.address], TOKEN, timeout=10, fast=False)
    for name in ("lane", "zmq"):
        fast.create(name, ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 4})
        fast.set_optimizer(name, optimizer)
    return fast, slow


def table(srv, name: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    t = srv.state.tensors[name]
    return t.data.clone(), {k: v.clone() for k, v in t.state.items()}


@pytest.mark.parametrize(
    "optimizer",
    OPTIMIZERS,
    ids=lambda o: f"{o['kind']}-{o.get('step_count', 'row')}{'-norm' * ('row_norm' in o)}",
)
def test_lane_pushes_leave_the_zmq_paths_rows_and_state_bit_for_bit(servers, optimizer: dict) -> None:  # noqa: F811
    (srv,) = servers()
    fast, slow = lane_and_zmq(srv, optimizer)
    try:
        mean = optimizer.get("duplicate") == "mean"
        for step, (ids, grads) in enumerate(batches(1), start=1):
            wait = step % 2 == 0  # wait=False too: the next call collects the answer
            fast.push_grad("lane", ids, grads, BOUNDS, mean, step=step, wait=wait)
            slow.push_grad("zmq", ids, grads, BOUNDS, mean, step=step, wait=wait)
            seen = fast.pull("lane", ids[:64], BOUNDS, (DIM,), np.float32)  # sees the push just made
            assert np.array_equal(seen, slow.pull("zmq", ids[:64], BOUNDS, (DIM,), np.float32))
        (a, sa), (b, sb) = table(srv, "lane"), table(srv, "zmq")
        assert torch.equal(a, b)
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert stats(srv)["pushes_ok"] == 6 and stats(srv)["rows_pushed"] > 0
    finally:
        fast.close()
        slow.close()


def test_a_non_finite_or_misplaced_push_is_refused_whole_in_the_zmq_paths_words(servers) -> None:  # noqa: F811
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    slow = kvstore.connect([srv.address], TOKEN, timeout=10, fast=False)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 4})
        fast.set_optimizer("t", {"kind": "adam", "lr": 0.01, "step_count": "global"})
        before = table(srv, "t")
        ids = np.array([5, 9, 11], dtype=np.int64)
        grads = np.ones((3, DIM), np.float32)
        grads[1, 3] = np.nan
        words = refusals((fast, slow), lambda c: c.push_grad("t", ids, grads, BOUNDS, False, step=1))
        nan = "push_grad of 't': 1 gradient row(s) hold NaN or infinity (first id 9); no row was updated"
        assert words == [nan, nan]
        assert stats(srv)["errors"] == 1  # the lane's refusal, not a fall back to ZMQ
        after = table(srv, "t")
        assert torch.equal(before[0], after[0]) and all(
            torch.equal(before[1][k], after[1][k]) for k in before[1]
        )
        with pytest.raises(protocol.RemoteError, match=r"id 4000 \(position 0\) of 't' is outside"):
            fast.transport.call_many([push_call("t", [ROWS, 1])])
    finally:
        fast.close()
        slow.close()


def refusals(clients: tuple[Any, ...], push: Callable[[Any], Any]) -> list[str]:
    """What the server said, refusing `push` from each of `clients` (the words after the shard's name)."""
    words = []
    for c in clients:
        with pytest.raises(protocol.RemoteError) as err:
            push(c)
        words.append(str(err.value).split("refused push_grad: ", 1)[1])
    return words


def push_call(name: str, ids: list[int], value: float = 1.0):
    from graphtrain.runtime.kvstore.client.transport import Call

    a = np.array(ids, dtype=np.int64)
    return Call(0, "push_grad", name, [a, np.full((len(a), DIM), value, np.float32)], {"step": None})


def test_finite_rows_of_one_id_summing_to_infinity_are_refused_as_on_zmq(servers) -> None:  # noqa: F811
    """A push whose ids repeat (a client that did not deduplicate) is reduced by the server: two finite
    3e38 rows of one id sum to infinity, refused whole, on the lane as over ZMQ; of two such ids the
    smaller is named."""
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    slow = kvstore.connect([srv.address], TOKEN, timeout=10, fast=False)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 4})
        fast.set_optimizer("t", {"kind": "sgd", "lr": 1e-38})
        before = table(srv, "t")
        words = refusals((fast, slow), lambda c: c.transport.call_many([push_call("t", [8, 3, 8, 3], 3e38)]))
        assert words == ["push_grad of 't': the gradients of id 3 sum to infinity; no row was updated"] * 2
        assert stats(srv)["errors"] == 1  # the lane's refusal, not a fall back to ZMQ
        assert torch.equal(before[0], table(srv, "t")[0])
    finally:
        fast.close()
        slow.close()


def test_a_locked_table_is_pushed_over_zmq_once_it_is_free_and_no_step_is_lost(servers) -> None:  # noqa: F811
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        c.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        ids = np.arange(10, dtype=np.int64)
        c.push_grad("t", ids, np.ones((10, DIM), np.float32), BOUNDS, False)  # on the lane: -1
        t = srv.state.tensors["t"]
        assert isinstance(t.lock, NativeLock)
        t.lock.acquire()  # a worker's step or a checkpoint's copy
        done = threading.Event()
        pusher = threading.Thread(
            target=lambda: (c.push_grad("t", ids, np.ones((10, DIM), np.float32), BOUNDS, False), done.set())
        )
        pusher.start()
        time.sleep(0.5)
        assert not done.is_set()  # the lane said "busy"; the ZMQ path's worker waits for the lock
        t.lock.release()
        pusher.join(timeout=20)
        assert done.is_set()
        assert stats(srv)["pushes_busy"] == 1 and stats(srv)["pushes_ok"] == 1
        assert (c.pull("t", ids, BOUNDS, (DIM,), np.float32) == -2.0).all()  # each step once
    finally:
        c.close()


def test_rows_the_lane_writes_are_marked_for_the_next_incremental_checkpoint(servers) -> None:  # noqa: F811
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        c.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        t = srv.state.tensors["t"]
        with t.lock:  # as increment.arm does: the description goes stale ...
            t.changed = Changed(Path("base"), 0, t.config, t.rows, np.zeros(t.rows, dtype=bool))
        first = np.array([3, 30, 300], dtype=np.int64)
        c.push_grad("t", first, np.ones((3, DIM), np.float32), BOUNDS, False)  # ... so over ZMQ
        assert stats(srv)["pushes_busy"] == 1 and stats(srv)["pushes_ok"] == 0
        srv.tables_changed()  # the next sync (the I/O thread's, within a second) describes it again
        second = np.array([7, 70, 3999], dtype=np.int64)
        c.push_grad("t", second, np.ones((3, DIM), np.float32), BOUNDS, False)
        assert stats(srv)["pushes_ok"] == 1
        assert np.flatnonzero(t.changed.mask).tolist() == sorted([*first, *second])
    finally:
        c.close()


def test_a_push_whose_lane_fails_after_sending_it_is_not_sent_again(servers) -> None:  # noqa: F811
    """A lane that reads the push and closes without an answer (a server killed mid-step): the client
    cannot know whether it was applied, so it raises, and nothing reaches the server over ZMQ."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    fake = socket.create_server(("127.0.0.1", 0))
    try:
        c.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        c.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        c.pull("t", np.arange(4, dtype=np.int64), BOUNDS, (DIM,), np.float32)  # learns the lane's port
        fast = c.transport._fast  # noqa: SLF001 - pointed at a lane that dies mid-push
        fast._fail(0)  # noqa: SLF001
        fast.ports[0] = fake.getsockname()[1]

        def die() -> None:
            conn, _ = fake.accept()
            recv_exactly(conn, fastwire.HELLO.size + len(TOKEN))
            conn.sendall(fastwire.HELLO_REPLY.pack(fastwire.HELLO_MAGIC, 0))
            recv_exactly(conn, fastwire.REQUEST.size)
            conn.close()

        peer = threading.Thread(target=die)
        peer.start()
        with pytest.raises(KVTimeout, match="not retried: it may have been applied"):
            c.push_grad("t", np.arange(10, dtype=np.int64), np.ones((10, DIM), np.float32), BOUNDS, False)
        peer.join(timeout=10)
        slow = kvstore.connect([srv.address], TOKEN, timeout=10, fast=False)
        try:
            assert (slow.pull("t", np.arange(10, dtype=np.int64), BOUNDS, (DIM,), np.float32) == 0).all()
        finally:
            slow.close()
    finally:
        fake.close()
        c.close()


def test_tables_the_lane_does_not_step_go_over_zmq(servers) -> None:  # noqa: F811
    """A unit-circle projection (after the step), a half table's row norm (after it too) and skipped
    non-finite gradients stay on the Python path, with its results."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        cases = {
            "half": ("bfloat16", {"kind": "adam", "lr": 0.01, "nonfinite": "skip"}),
            "halfnorm": ("float16", {"kind": "adam", "lr": 0.01, "row_norm": 1.0}),  # scaled after
            "unit": ("float32", {"kind": "adam", "lr": 0.01, "unit_complex": True}),
            "skip": ("float32", {"kind": "sgd", "lr": 0.1, "nonfinite": "skip"}),
        }
        for name, (dtype, opt) in cases.items():
            c.create(name, ROWS, (DIM,), dtype, BOUNDS, {"kind": "uniform", "seed": 2})
            c.set_optimizer(name, opt)
            ids = np.arange(0, 40, dtype=np.int64)
            c.push_grad(
                name,
                ids,
                np.ones((40, DIM), np.float32),
                BOUNDS,
                False,
                half=dtype if dtype != "float32" else None,
            )
        rows = c.pull("unit", np.arange(40, dtype=np.int64), BOUNDS, (DIM,), np.float32)
        assert np.allclose(np.hypot(rows[:, : DIM // 2], rows[:, DIM // 2 :]), 1.0, atol=1e-5)
        normed = c.pull("halfnorm", np.arange(40, dtype=np.int64), BOUNDS, (DIM,), np.float16)
        assert (np.linalg.norm(normed.astype(np.float32), axis=1) <= 1.0 + 1e-3).all()
        assert stats(srv)["pushes_ok"] == 0
    finally:
        c.close()


def test_malformed_pushes_are_refused_or_closed_and_change_no_row(servers) -> None:  # noqa: F811
    """An authenticated peer's push with its sizes, row type, ids or gradients wrong: refused in words
    or the connection closed, no row or state changed, and the lane answers the next good push."""
    from tests.runtime.kvstore.test_fastlane import closed, lane

    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 4})
        c.set_optimizer("t", {"kind": "adam", "lr": 0.01, "step_count": "global"})
        srv.tables_changed()
        before = table(srv, "t")
        row = fastwire.row_type(np.dtype(np.float32), (DIM,))
        ids = np.array([1, 2, 3], dtype=np.int64)
        grads = np.ones((3, DIM), np.float32)

        def push(name=b"t", n=3, rows=row, nbytes=grads.nbytes, body=None) -> bytes:
            payload = ids.tobytes() + grads.tobytes() if body is None else body
            return fastwire.push_request(1, name, n, rows, nbytes, 5) + payload

        answered = {  # each answered in words, the connection kept
            "bytes not the rows'": (
                push(nbytes=grads.nbytes - 8, body=ids.tobytes() + grads.tobytes()[:-8]),
                1,
            ),
            "a row type not the table's": (push(rows=fastwire.row_type(np.dtype(np.float64), (DIM,))), 2),
            "an unknown table": (push(name=b"nope"), 2),
            "an id outside": (push(body=np.array([1, ROWS, 3], np.int64).tobytes() + grads.tobytes()), 1),
            "an infinite gradient": (
                push(body=ids.tobytes() + np.full((3, DIM), np.inf, np.float32).tobytes()),
                1,
            ),
        }
        for what, (msg, status) in answered.items():
            s = lane(srv)
            s.sendall(msg)
            magic, got, _, nbytes = fastwire.REPLY.unpack(recv_exactly(s, fastwire.REPLY.size))
            assert (magic, got) == (fastwire.REPLY_MAGIC, status), what
            recv_exactly(s, nbytes)
            s.close()
        closes = {  # framing errors: the connection is closed
            "gradient bytes past the replies' bound": push(nbytes=fastwire.MAX_REPLY_BYTES + 8),
            "gradient bytes not whole elements": push(nbytes=grads.nbytes - 3),
        }
        for what, msg in closes.items():
            s = lane(srv)
            s.sendall(msg[: fastwire.REQUEST.size])
            assert closed(s, 5.0), what
            s.close()
        after = table(srv, "t")
        assert torch.equal(before[0], after[0]) and all(
            torch.equal(before[1][k], after[1][k]) for k in before[1]
        )
        s = lane(srv)
        s.sendall(push())
        magic, got, _, nbytes = fastwire.REPLY.unpack(recv_exactly(s, fastwire.REPLY.size))
        assert got == fastwire.OK and fastwire.PUSH_REPLY.unpack(recv_exactly(s, nbytes)) == (3,)
        assert int(srv.state.tensors["t"].state["step"][0]) == 5
        s.close()
    finally:
        c.close()


def test_a_push_left_to_zmq_after_wait_false_carries_its_own_rows_not_the_next_pushs(servers) -> None:  # noqa: F811
    """The client's dedup reuses its buffers: a push the lane does not apply, resent over ZMQ at the
    next call, must still carry its own gradients (training pushes each table with wait=False in turn)."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("a", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        c.set_optimizer("a", {"kind": "sgd", "lr": 1.0, "nonfinite": "skip"})  # not stepped by the lane
        c.create("b", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        c.set_optimizer("b", {"kind": "sgd", "lr": 1.0})
        c.push_grad("a", np.array([1, 2]), np.ones((2, DIM), np.float32), BOUNDS, False, wait=False)
        c.push_grad("b", np.array([50, 60]), np.full((2, DIM), 3, np.float32), BOUNDS, False, wait=False)
        got = c.pull("a", np.array([1, 2, 50, 60]), BOUNDS, (DIM,), np.float32)
        assert (got[:2] == -1).all() and (got[2:] == 0).all()
        assert (c.pull("b", np.array([50, 60]), BOUNDS, (DIM,), np.float32) == -3).all()
    finally:
        c.close()


def test_odd_widths_late_answers_and_a_restarted_server_are_a_lane_pushs_business_too(servers) -> None:  # noqa: F811
    """Rows of 3 floats (a push's bytes a multiple of 4, not 8); a wait=False push collected after more
    than the call timeout; and a push after the server restarted at its address (the idle lane
    connection to the old one is dropped before the push is sent, not after)."""
    from graphtrain.runtime.kvstore.serving.server import ShardServer
    from graphtrain.runtime.kvstore.tables.state import ShardTensors

    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=1.0)
    try:
        c.create("odd", 100, (3,), "float32", np.array([0, 100]), {"kind": "zeros"})
        c.set_optimizer("odd", {"kind": "sgd", "lr": 1.0})
        c.push_grad("odd", np.array([7]), np.ones((1, 3), np.float32), np.array([0, 100]), False, wait=False)
        time.sleep(1.5)  # past the call's timeout: the answer waits on the socket, as over ZMQ
        assert (c.pull("odd", np.array([7]), np.array([0, 100]), (3,), np.float32) == -1).all()
        assert stats(srv)["pushes_ok"] == 1 and stats(srv)["malformed"] == 0
        address = srv.address
        srv.stop()
        again = ShardServer(ShardTensors(0), TOKEN, address, workers=2)
        again.start()
        try:
            c.create("odd", 100, (3,), "float32", np.array([0, 100]), {"kind": "zeros"})
            c.set_optimizer("odd", {"kind": "sgd", "lr": 1.0})
            c.push_grad("odd", np.array([7]), np.ones((1, 3), np.float32), np.array([0, 100]), False)
            assert (again.state.tensors["odd"].data[7] == -1).all()
        finally:
            again.stop()
    finally:
        c.close()


@pytest.mark.parametrize("step", [0, -3, 2**62 + 1])
def test_a_step_outside_one_to_2_62_is_refused_on_either_path(servers, step: int) -> None:  # noqa: F811
    """Adam's bias corrections divide by 1 - beta^step: step 0 would turn rows into NaN."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        c.set_optimizer("t", {"kind": "adam", "lr": 0.01, "step_count": "global"})
        call = push_call("t", [1, 2])
        call.args["step"] = step
        want = rf"argument 'step' must be in \[1, {2**62}\], got {step}"
        with pytest.raises(protocol.RemoteError, match=want):  # the client leaves it to ZMQ
            c.transport.call_many([call])
        s = lane_of(srv)
        s.sendall(
            fastwire.REQUEST.pack(fastwire.REQUEST_MAGIC, fastwire.OP_PUSH, 1, 1, 2, 2 * DIM * 4)
            + b"t".ljust(8, b"\0")
            + fastwire.row_type(np.dtype(np.float32), (DIM,))
            + fastwire.PUSH_ARGS.pack(step)
            + np.array([1, 2], np.int64).tobytes()
            + np.ones((2, DIM), np.float32).tobytes()
        )
        _, status, _, nbytes = fastwire.REPLY.unpack(recv_exactly(s, fastwire.REPLY.size))
        assert status == fastwire.ERROR and recv_exactly(s, nbytes).decode().startswith(
            want.replace("\\", "")[:30]
        )
        s.close()
        assert torch.equal(srv.state.tensors["t"].data, torch.zeros(ROWS, DIM))
    finally:
        c.close()


def lane_of(srv):
    from tests.runtime.kvstore.test_fastlane import lane

    return lane(srv)


def test_a_push_the_lane_does_not_step_leaves_the_tables_pulls_on_it(servers) -> None:  # noqa: F811
    """A unit-circle table (RotatE's relations) is registered without its lock: its pushes are "not
    served" (once; then ZMQ straight away), and its pulls stay on the lane."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("n", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 1})
        c.set_optimizer("n", {"kind": "adam", "lr": 0.01, "unit_complex": True})
        for _ in range(3):
            c.push_grad("n", np.arange(5), np.ones((5, DIM), np.float32), BOUNDS, False)
        assert stats(srv)["not_served"] == 1 and stats(srv)["pushes_busy"] == 0
        pulls = stats(srv)["pulls_ok"]
        rows = c.pull("n", np.arange(5), BOUNDS, (DIM,), np.float32)
        assert stats(srv)["pulls_ok"] == pulls + 1
        assert np.allclose(np.hypot(rows[:, : DIM // 2], rows[:, DIM // 2 :]), 1.0, atol=1e-5)
    finally:
        c.close()


def test_a_server_told_to_step_on_the_reference_steps_no_push_on_the_lane(
    servers,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GRAPHTRAIN_OPTIM_BACKEND=torch puts a server's optimizer steps on the torch reference; the lane
    (the CPU core) then steps none, so every push gives the reference's rows, as over ZMQ."""
    from graphtrain.runtime.native.backend import ENV_BACKEND

    monkeypatch.setenv(ENV_BACKEND, "torch")
    (srv,) = servers()
    fast, slow = lane_and_zmq(srv, {"kind": "adam", "lr": 0.01, "row_norm": 1.0})
    try:
        for step, (ids, grads) in enumerate(batches(3, 3), start=1):
            fast.push_grad("lane", ids, grads, BOUNDS, False, step=step)
            slow.push_grad("zmq", ids, grads, BOUNDS, False, step=step)
        (a, sa), (b, sb) = table(srv, "lane"), table(srv, "zmq")
        assert torch.equal(a, b) and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert stats(srv)["pushes_ok"] == 0
    finally:
        fast.close()
        slow.close()
