"""Small pulls answered on the I/O thread (kvstore/serving/inline.py): which requests qualify, that their rows
and errors are a worker's, and that a peer with work in flight keeps its order (its pull goes to a
worker). A real server in this process, a real client over TCP."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client.transport import Call
from graphtrain.runtime.kvstore.serving import inline
from graphtrain.runtime.kvstore.serving import server as server_module
from graphtrain.runtime.kvstore.serving.server import ShardServer
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire import opargs, protocol
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_liveness import block_stats

ROWS, DIM = 5_000, 64
BOUNDS = np.array([0, ROWS])
INLINE_ROWS = inline.INLINE_BYTES // (DIM * 4)  # 1,024


def pull_req(name: str, n: int) -> tuple[protocol.Request, opargs.PullArgs]:
    ids = np.arange(n, dtype=np.int64)
    return protocol.Request(op="pull", rid=1, name=name, arrays=[ids]), opargs.PullArgs(ids=[ids])


def test_only_small_pulls_of_host_tables_qualify() -> None:
    state = ShardTensors()
    state.create("t", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 1})
    state.create(
        "k", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "zeros"}, keyed={"shards": 1, "evict": False}
    )
    assert inline.fits(state, *pull_req("t", 64))
    assert inline.fits(state, *pull_req("t", INLINE_ROWS))  # at the limit
    assert not inline.fits(state, *pull_req("t", INLINE_ROWS + 1))  # a worker streams it in chunks
    assert not inline.fits(state, *pull_req("nope", 64))  # a worker answers the error
    assert not inline.fits(state, *pull_req("k", 64))  # a dynamic table's pull may insert keys
    req, _ = pull_req("t", 64)
    push = protocol.Request(op="push", rid=1, name="t", arrays=[])
    assert not inline.fits(state, push, opargs.PullArgs(ids=req.arrays))


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch):
    """A server with table "t", a client, and the rids each answering path took."""
    state = ShardTensors()
    srv = ShardServer(state, TOKEN, "tcp://127.0.0.1:0", workers=2)
    srv.start()
    answered: list[int] = []
    real = inline.answer

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if args[4].op == "pull":  # the inline pulls (pushes are counted where a test asks)
            answered.append(args[4].rid)
        return real(*args, **kwargs)

    monkeypatch.setattr(server_module.inline, "answer", counted)
    client = kvstore.connect([srv.address], TOKEN, timeout=30, retries=0, fast=False)  # ZMQ's path
    client.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 1})
    yield srv, state, client, answered
    client.close()
    srv.stop()


@pytest.mark.timeout(60)
def test_small_pulls_are_answered_inline_with_a_workers_rows_and_errors(served) -> None:  # noqa: ANN001
    srv, state, client, answered = served
    rng = np.random.default_rng(0)
    table = state.get("t").data.numpy()
    small = rng.integers(0, ROWS, 64)
    big = rng.integers(0, ROWS, INLINE_ROWS * 3)  # three chunks' worth: the workers' stream

    def pull_inline(ids: np.ndarray, count: int) -> np.ndarray:
        """A pull the I/O thread answers (the count-th inline answer), at once: a worker frees its peer
        before it posts the reply, so a pull right behind a worker's request finds the peer idle."""
        got = client.pull("t", ids, BOUNDS, (DIM,), np.float32)
        assert len(answered) == count, f"{len(answered)} inline answers, not {count}"
        return got

    got_small = pull_inline(small, 1)
    got_big = client.pull("t", big, BOUNDS, (DIM,), np.float32)
    assert len(answered) == 1  # not inline
    np.testing.assert_array_equal(got_small, table[small])
    np.testing.assert_array_equal(got_big, table[big])
    # a push (a worker's) is seen by the next pull (inline)
    before = table[:64].copy()
    client.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
    client.push_grad("t", np.arange(64), np.ones((64, DIM), np.float32), BOUNDS, mean=False)
    after = pull_inline(np.arange(64), 2)
    np.testing.assert_allclose(after, before - 1.0, rtol=1e-6)
    with pytest.raises(protocol.RemoteError, match="outside this shard's rows"):  # refused inline ...
        client.pull("t", np.array([ROWS + 5]), np.array([0, ROWS + 10]), (DIM,), np.float32)
    assert len(answered) == 3  # ... and the server serves on
    assert client.pull("t", small[:3], BOUNDS, (DIM,), np.float32).shape == (3, DIM)
    ok = srv.metrics.requests.labels(srv.metrics.shard, "pull", "ok")._value.get()
    assert ok >= 4


@pytest.mark.timeout(60)
def test_a_pull_behind_the_same_peers_running_request_goes_to_a_worker(served) -> None:  # noqa: ANN001
    """Sent in one exchange behind a request still on a worker, a small pull is not answered ahead of
    it by the I/O thread: a peer's requests keep the order of the queue."""
    srv, state, client, answered = served
    release = block_stats(srv)
    out = np.empty((64, DIM), np.float32)
    ids = np.arange(64, dtype=np.int64)
    calls = [Call(0, "stats"), Call(0, "pull", "t", client._frames(ids), {}, out)]
    done = threading.Event()
    result: list = []

    def exchange() -> None:
        result.extend(client.transport.call_many(calls))
        done.set()

    threading.Thread(target=exchange, daemon=True).start()
    time.sleep(0.5)  # both sent; stats holds a worker
    release.set()
    assert done.wait(20)
    assert answered == []  # the pull went to a worker
    np.testing.assert_array_equal(out, state.get("t").data[:64].numpy())


@pytest.mark.timeout(60)
def test_a_bug_in_an_inline_pull_is_answered_and_the_server_serves_on(served, monkeypatch) -> None:  # noqa: ANN001
    """An unexpected exception on the I/O thread's pull reaches the client as an internal error (as a
    worker's does), not as a timeout, and the next pull is served."""
    srv, state, client, answered = served
    run = srv.dispatcher.run

    def broken(req, args, who=None, now=None):  # noqa: ANN001, ANN202
        if req.op == "pull" and len(opargs.joined(args.ids)) == 7:
            raise RuntimeError("planted")
        return run(req, args, who, now)

    monkeypatch.setattr(srv.dispatcher, "run", broken)
    with pytest.raises(protocol.RemoteError, match="internal error in pull: RuntimeError: planted"):
        client.pull("t", np.arange(7), BOUNDS, (DIM,), np.float32)
    assert len(answered) == 1
    got = client.pull("t", np.arange(8), BOUNDS, (DIM,), np.float32)
    np.testing.assert_array_equal(got, state.get("t").data[:8].numpy())


def push_req(name: str, n: int) -> tuple[protocol.Request, opargs.PushArgs]:
    ids, grads = np.arange(n, dtype=np.int64), np.zeros((n, DIM), np.float32)
    return protocol.Request(op="push_grad", rid=1, name=name, arrays=[ids, grads]), opargs.PushArgs(
        ids=[ids], values=[grads]
    )


def test_small_gradient_pushes_to_a_table_with_an_optimizer_qualify() -> None:
    state = ShardTensors()
    state.create("t", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 1})
    assert not inline.fits(state, *push_req("t", 64))  # no optimizer yet: a worker answers the error
    state.set_optimizer("t", {"kind": "sgd", "lr": 0.1})
    assert inline.fits(state, *push_req("t", 64))
    assert inline.fits(state, *push_req("t", INLINE_ROWS))
    assert not inline.fits(state, *push_req("t", INLINE_ROWS + 1))


@pytest.mark.timeout(60)
def test_a_small_push_is_stepped_inline_unless_its_table_is_locked_and_the_io_thread_never_waits(
    served, monkeypatch
) -> None:  # noqa: ANN001
    srv, state, client, _ = served
    stepped: list[bool] = []
    real = server_module.inline.answer  # the fixture's: it counts the pulls

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        done = real(*args, **kwargs)
        if args[4].op == "push_grad":
            stepped.append(done)
        return done

    monkeypatch.setattr(server_module.inline, "answer", counted)
    client.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
    table = state.get("t")
    before = table.data[:64].numpy().copy()
    client.push_grad("t", np.arange(64), np.ones((64, DIM), np.float32), BOUNDS, mean=False)
    assert stepped == [True]  # stepped by the I/O thread
    np.testing.assert_allclose(table.data[:64].numpy(), before - 1.0, rtol=1e-6)
    # the table's lock held (as a worker writing a checkpoint under it holds it): the push goes to a
    # worker, which waits for the lock; the I/O thread serves another client meanwhile
    other = kvstore.connect([srv.address], TOKEN, timeout=30, retries=0, fast=False)
    table.lock.acquire()
    try:
        client.push_grad("t", np.arange(64), np.ones((64, DIM), np.float32), BOUNDS, mean=False, wait=False)
        deadline = time.monotonic() + 10
        while len(stepped) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stepped == [True, False]  # found the lock taken: handed to a worker
        start = time.monotonic()
        assert other.pull("t", np.arange(3), BOUNDS, (DIM,), np.float32).shape == (3, DIM)
        assert time.monotonic() - start < 2.0  # answered while the push waits for the lock
    finally:
        table.lock.release()
    client.settle()  # the worker's step, once the lock was free
    np.testing.assert_allclose(table.data[:64].numpy(), before - 2.0, rtol=1e-6)
    # a background checkpoint copying the table: a write may first save its rows to the file, which is
    # a worker's wait, so the push goes to one
    saved: list[np.ndarray] = []
    table.snapshot = SimpleNamespace(preserve=lambda local: saved.append(np.asarray(local)))
    try:
        client.push_grad("t", np.arange(64), np.ones((64, DIM), np.float32), BOUNDS, mean=False)
    finally:
        table.snapshot = None
    assert stepped == [True, False, False] and len(saved) == 1  # stepped by a worker, rows saved first
    np.testing.assert_allclose(table.data[:64].numpy(), before - 3.0, rtol=1e-6)
    other.close()
