"""Batches on the shard server's fast lane (wire version 2, cuda/src/fastlane.cpp's op 4,
client/lanecalls.py): several calls to one shard go in one message and come back in one reply, each
answered as if sent alone; a refusal among them names its id and leaves the others answered and the
connection usable; a malformed batch closes the connection before any of its requests is applied; a
batch's replies past their room answer "busy" and go over ZMQ; a version-1 peer is still served. A
real server in this process, real clients, raw sockets for what a client would never send."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque

import numpy as np
import pytest

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client import lanecalls
from graphtrain.runtime.kvstore.client.transport import Call
from graphtrain.runtime.kvstore.wire import fastwire, protocol
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_fastlane import (  # noqa: F401 - servers is a fixture
    closed,
    graph_servers,
    lane,
    recv_exactly,
    servers,
    stats,
)

ROWS, DIM = 4_000, 16
BOUNDS = np.array([0, ROWS])
ROW = fastwire.row_type(np.dtype(np.float32), (DIM,))
pytestmark = pytest.mark.timeout(60)


def pull(name: str, ids, dim: int = DIM, shard: int = 0) -> Call:
    a = np.asarray(ids, dtype=np.int64)
    return Call(shard, "pull", name, [a], None, np.empty((len(a), dim), np.float32))


def push(name: str, ids, step: int | None = None) -> Call:
    a = np.asarray(ids, dtype=np.int64)
    return Call(0, "push_grad", name, [a, np.full((len(a), DIM), 0.5, np.float32)], {"step": step})


def raw_pull(rid: int, name: bytes, ids) -> bytes:
    a = np.asarray(ids, dtype=np.int64)
    return fastwire.request(rid, name, len(a), ROW) + a.tobytes()


def raw_batch(rid: int, requests: list[bytes], count: int | None = None, body: int | None = None) -> bytes:
    padded = b"".join(r.ljust(fastwire.pad8(len(r)), b"\0") for r in requests)
    head = fastwire.batch_request(
        rid, len(requests) if count is None else count, len(padded) if body is None else body
    )
    return head + padded


def read_reply(sock: socket.socket) -> tuple[int, int, bytes]:
    magic, status, rid, nbytes = fastwire.REPLY.unpack(recv_exactly(sock, fastwire.REPLY.size))
    assert magic == fastwire.REPLY_MAGIC
    return status, rid, recv_exactly(sock, nbytes)


def replies(payload: bytes) -> list[tuple[int, int, bytes]]:
    out, at = [], 0
    while at < len(payload):
        magic, status, rid, n = fastwire.REPLY.unpack_from(payload, at)
        assert magic == fastwire.REPLY_MAGIC
        at += fastwire.REPLY.size
        out.append((status, rid, payload[at : at + n]))
        at += n
    return out


def test_a_shards_pulls_samples_and_push_go_in_one_batch_with_the_zmq_paths_answers() -> None:
    (a, b), bounds = graph_servers()
    fast = kvstore.connect([a.address, b.address], TOKEN, timeout=10)
    slow = kvstore.connect([a.address, b.address], TOKEN, timeout=10, fast=False)
    try:
        for name, dim in (("x", DIM), ("e", 8)):
            fast.create(name, 600, (dim,), "float32", bounds, {"kind": "uniform", "seed": 2})
        fast.set_optimizer("e", {"kind": "sgd", "lr": 0.5})
        ids = np.arange(0, 300, 3)
        seeds = np.arange(10, 290, 7)

        def calls() -> list[Call]:
            grads = np.ones((4, 8), np.float32)
            return [
                pull("x", ids, DIM),
                Call(0, "sample", None, [seeds], {"fanout": 5, "seed": 11}),
                pull("e", ids, 8),
                Call(0, "push_grad", "e", [np.array([1, 2, 3, 4]), grads], {"step": None}),
                pull("e", [1, 2, 3, 4], 8),  # after the push, in the same batch: sees it
            ]

        got, want = calls(), calls()
        before = slow.pull("e", np.array([1, 2, 3, 4]), bounds, (8,), np.float32)
        zmq_answers = slow.transport.call_many(want[:3])  # before the batch's push
        answers = fast.transport.call_many(got)
        assert stats(a)["batches"] == 1 and stats(a)["pulls_ok"] == 3 and stats(a)["samples_ok"] == 1
        assert stats(a)["pushes_ok"] == 1 and stats(b)["batches"] == 0
        assert np.array_equal(got[0].out, want[0].out) and np.array_equal(got[2].out, want[2].out)
        for x, y in zip(answers[1].arrays, zmq_answers[1].arrays, strict=True):
            assert np.array_equal(x, y)  # the same draws
        assert answers[3].result["rows"] == 4
        after = slow.pull("e", np.array([1, 2, 3, 4]), bounds, (8,), np.float32)
        assert np.array_equal(got[4].out, after) and np.allclose(after, before - 0.5)
    finally:
        fast.close()
        slow.close()
        for s in (a, b):
            s.stop()


def test_a_refusal_in_a_batch_names_its_id_and_the_others_are_answered_on_a_usable_connection(
    servers,  # noqa: F811 - the fixture
) -> None:
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 3})
        good = pull("t", [1, 2, 3])
        with pytest.raises(protocol.RemoteError, match=r"id 4000 \(position 1\) of 't' is outside"):
            fast.transport.call_many([good, pull("t", [5, ROWS]), pull("t", [7])])
        assert stats(srv)["batches"] == 1 and stats(srv)["pulls_ok"] == 2 and stats(srv)["errors"] == 1
        want = fast.pull("t", np.array([1, 2, 3]), BOUNDS, (DIM,), np.float32)
        assert np.array_equal(good.out, want)
        assert stats(srv)["pulls_ok"] == 3 and stats(srv)["malformed"] == 0  # the same connection, in step
    finally:
        fast.close()


def test_malformed_batches_close_the_connection_before_any_request_is_applied(servers) -> None:  # noqa: F811
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 3})
        fast.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        before = srv.state.tensors["t"].data.clone()
        g = push("t", [9])
        good_push = b"".join(bytes(memoryview(p)) for p in lanecalls.encode(g, 5))
        good = raw_pull(2, b"t", [1, 2])
        inner = raw_batch(3, [good, good])
        cases = {
            "one request": raw_batch(1, [good_push]),
            "nine requests": raw_batch(1, [good] * 9),
            "a batch in a batch": raw_batch(1, [good_push, inner]),
            "body shorter than its requests": raw_batch(1, [good_push, good], body=len(good_push)),
            "body longer than its requests": raw_batch(
                1, [good_push, good], body=len(good_push) + len(good) + 8
            )
            + bytes(8),
            "a request's bad magic": raw_batch(1, [good_push, b"XXXX" + good[4:]]),
            "a body over 512 KiB": raw_batch(1, [good_push, good], body=fastwire.MAX_BATCH_BYTES + 8),
        }
        for what, msg in cases.items():
            sock = lane(srv)
            sock.sendall(msg)
            assert closed(sock), what
            sock.close()
        assert stats(srv)["malformed"] == len(cases) and stats(srv)["pushes_ok"] == 0
        assert srv.state.tensors["t"].data.equal(before)  # the push in each was never applied
    finally:
        fast.close()


def test_a_version_1_peer_is_served_pulls_and_its_batch_closes_the_connection(servers) -> None:  # noqa: F811
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 3})
        assert srv.fastlane is not None
        sock = socket.create_connection(("127.0.0.1", srv.fastlane.port), timeout=10)
        token = TOKEN.encode()
        sock.sendall(fastwire.HELLO.pack(fastwire.HELLO_MAGIC, 1, len(token)) + token)
        assert fastwire.HELLO_REPLY.unpack(recv_exactly(sock, 8)) == (fastwire.HELLO_MAGIC, 0)
        sock.sendall(raw_pull(1, b"t", [4, 5]))
        status, rid, rows = read_reply(sock)
        assert (status, rid, len(rows)) == (fastwire.OK, 1, 2 * DIM * 4)
        sock.sendall(raw_batch(2, [raw_pull(3, b"t", [1]), raw_pull(4, b"t", [2])]))
        assert closed(sock)
        sock.close()
        for version in (0, fastwire.VERSION + 1):  # versions the server does not speak
            s = socket.create_connection(("127.0.0.1", srv.fastlane.port), timeout=10)
            s.sendall(fastwire.HELLO.pack(fastwire.HELLO_MAGIC, version, len(token)) + token)
            assert closed(s)
            s.close()
    finally:
        fast.close()


def test_a_batchs_replies_past_their_room_answer_busy_and_go_over_zmq(servers) -> None:  # noqa: F811
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 3})
        ids = np.arange(1_500)  # 1,500 rows of 64 bytes: 94 KiB each, two fit a batch's 256 KiB
        sock = lane(srv)
        sock.sendall(raw_batch(9, [raw_pull(i, b"t", ids) for i in (1, 2, 3)]))
        status, rid, payload = read_reply(sock)
        got = replies(payload)
        assert (status, rid) == (fastwire.OK, 9)
        assert [(s, r) for s, r, _ in got] == [(fastwire.OK, 1), (fastwire.OK, 2), (fastwire.BUSY, 3)]
        assert stats(srv)["not_served"] == 1 and stats(srv)["pushes_busy"] == 0
        sock.sendall(raw_pull(4, b"t", [0]))  # in step after the batch
        assert read_reply(sock)[:2] == (fastwire.OK, 4)
        sock.close()
        # a client never sends such a batch (lanecalls.take), and goes over ZMQ for a busy answer
        calls = [pull("t", ids) for _ in range(3)]
        fast.transport.call_many(calls)
        want = fast.pull("t", ids, BOUNDS, (DIM,), np.float32)
        assert all(np.array_equal(c.out, want) for c in calls)
    finally:
        fast.close()


def test_take_groups_a_shards_calls_within_the_batch_bounds() -> None:
    small = [pull("t", [1, 2]) for _ in range(10)]
    assert [len(g) for g in groups(small)] == [8, 2]
    big = [pull("t", np.arange(2_000), DIM) for _ in range(3)]  # 125 KiB replies: two fit 256 KiB
    assert [len(g) for g in groups(big)] == [2, 1]
    pushes = [push("t", np.arange(3_000)) for _ in range(3)]  # 211 KiB requests
    assert [len(g) for g in groups(pushes)] == [2, 1]
    for g in groups(big + small + pushes):
        if len(g) > 1:
            assert sum(map(lanecalls.request_bytes, g)) <= fastwire.MAX_BATCH_BYTES
            assert sum(map(lanecalls.reply_bytes, g)) <= fastwire.MAX_REPLY_BYTES
    # the encoded batch is the length its header says, and each request the length request_bytes says
    parts = [lanecalls.encode(c, i) for i, c in enumerate(small[:3] + pushes[:1])]
    msg = b"".join(bytes(memoryview(p)) for p in lanecalls.batch(parts, 99))
    assert fastwire.REQUEST.unpack_from(msg)[5] == len(msg) - fastwire.REQUEST.size
    assert len(msg) - fastwire.REQUEST.size == sum(map(lanecalls.request_bytes, small[:3] + pushes[:1]))


def groups(calls: list[Call]) -> list[list[Call]]:
    q, out = deque(calls), []
    while q:
        g = lanecalls.take(q)
        out.append(g)
        for _ in g:
            q.popleft()
    return out


@pytest.mark.parametrize("fast", [False, True])
def test_a_push_the_lane_leaves_is_applied_when_a_call_beside_it_is_refused(servers, fast: bool) -> None:  # noqa: F811
    """One call_many: a push the lane cannot carry (float64 gradients), refused over ZMQ (no such table),
    and a push the lane answers "busy" (its table locked). The refusal raises, and the busy push is still
    sent over ZMQ and applied once, as without the lane (found by an attacker: it was never sent)."""
    a, b = servers(shards=2)
    bounds = np.array([0, ROWS // 2, ROWS])
    c = kvstore.connect([a.address, b.address], TOKEN, timeout=10, fast=fast)
    try:
        c.create("t", ROWS, (DIM,), "float32", bounds, {"kind": "zeros"})
        c.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        c.push_grad("t", np.array([ROWS - 1]), np.ones((1, DIM), np.float32), bounds, False)  # described
        t = b.state.tensors["t"]
        row = np.array([ROWS // 2 + 5], np.int64)
        calls = [
            Call(0, "push_grad", "missing", [np.array([1], np.int64), np.ones((1, DIM))], {"step": None}),
            Call(1, "push_grad", "t", [row, np.full((1, DIM), 0.5, np.float32)], {"step": None}),
        ]
        errors: list[BaseException] = []

        def go() -> None:
            try:
                c.transport.call_many(calls)
            except protocol.RemoteError as exc:
                errors.append(exc)

        with t.lock:  # the lane answers "busy"; the ZMQ worker waits for the lock
            th = threading.Thread(target=go)
            th.start()
            th.join(1.0)
        th.join(20)
        assert len(errors) == 1 and "missing" in str(errors[0])
        assert stats(b)["pushes_busy"] == (1 if fast else 0)
        want = np.full((1, DIM), -0.5, np.float32)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not np.array_equal(t.data.numpy()[[5]], want):
            time.sleep(0.05)  # the ZMQ worker applies it once the caller stopped waiting
        assert np.array_equal(t.data.numpy()[[5]], want)
    finally:
        c.close()


def test_a_server_whose_health_names_no_lane_version_is_greeted_as_version_1_and_sent_no_batch(
    servers,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server older than batches says no `fast_version` (and closes a version-2 hello): a newer client
    greets it as version 1 and sends it one request at a time, so the lane keeps serving it."""
    from graphtrain.runtime.kvstore.serving.status import ServerStatus

    health = ServerStatus.health
    monkeypatch.setattr(ServerStatus, "health", lambda self: {**health(self), "fast_version": None})
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 3})
        got = [pull("t", [1, 2]), pull("t", [3])]
        fast.transport.call_many(got)
        assert stats(srv)["pulls_ok"] == 2 and stats(srv)["batches"] == 0 and stats(srv)["malformed"] == 0
        want = fast.pull("t", np.array([1, 2, 3]), BOUNDS, (DIM,), np.float32)
        assert np.array_equal(np.concatenate([got[0].out, got[1].out]), want)
    finally:
        fast.close()


def test_padding_that_is_not_zeros_closes_the_connection(servers) -> None:  # noqa: F811
    (srv,) = servers()
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 3})
        fast.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        odd = push("t", [9])
        odd.arrays = [odd.arrays[0], np.full((1, 3), 0.5, np.float32)]  # 12 bytes of gradients: padded
        request = b"".join(bytes(memoryview(p)) for p in lanecalls.encode(odd, 5))
        assert len(request) % 8 == 4
        sock = lane(srv)
        sock.sendall(
            raw_batch(1, [request + b"\xff" * 4, raw_pull(2, b"t", [1])], body=len(request) + 4 + 80)
        )
        assert closed(sock)
        assert stats(srv)["malformed"] == 1 and stats(srv)["pulls_ok"] == 0
    finally:
        fast.close()
