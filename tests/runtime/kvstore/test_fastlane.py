"""The shard server's fast lane (serving/fastlane.py, cuda/src/fastlane.cpp, client/fastlane.py): its
rows and refusals are the ZMQ path's, it is really used, what it cannot serve goes over ZMQ, and a wrong
token, garbage, a silent peer, a reader that never reads and a full server cost it nothing beyond their
bounds. A real server in this process, real clients over TCP."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import psutil
import pytest

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client.transport import KVAuthError
from graphtrain.runtime.kvstore.serving.fastlane import FastLane, LaneLimits
from graphtrain.runtime.kvstore.serving.server import Limits, ShardServer
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire import fastwire, protocol
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_liveness import wait_for

ROWS, DIM = 4_000, 16
ROW = fastwire.row_type(np.dtype(np.float32), (DIM,))  # what a pull of the tests' tables reads
pytestmark = pytest.mark.timeout(60)


def start(limits: Limits | None = None, shards: int = 1) -> list[ShardServer]:
    out = []
    for s in range(shards):
        srv = ShardServer(ShardTensors(s), TOKEN, "tcp://127.0.0.1:0", workers=2, limits=limits)
        srv.start()
        out.append(srv)
    return out


@pytest.fixture
def servers():
    started: list[ShardServer] = []

    def make(limits: Limits | None = None, shards: int = 1) -> list[ShardServer]:
        started.extend(start(limits, shards))
        return started[-shards:]

    yield make
    for srv in started:
        srv.stop()


def lane(srv: ShardServer | FastLane) -> socket.socket:
    """An authenticated raw connection to the server's (or this) fast lane."""
    fl = srv if isinstance(srv, FastLane) else srv.fastlane
    assert fl is not None
    sock = socket.create_connection(("127.0.0.1", fl.port), timeout=10)
    sock.sendall(fastwire.hello(TOKEN.encode()))
    assert fastwire.HELLO_REPLY.unpack(recv_exactly(sock, 8)) == (fastwire.HELLO_MAGIC, 0)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def closed(sock: socket.socket, seconds: float = 10.0) -> bool:
    """Whether the peer closed `sock` within `seconds` (reading whatever it still sends)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(1 << 16):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def stats(srv: ShardServer) -> dict[str, int]:
    assert srv.fastlane is not None
    return srv.fastlane.stats()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rows_are_the_zmq_paths_in_order_and_scattered_over_two_shards(servers, dtype: str) -> None:
    a, b = servers(shards=2)
    bounds = np.array([0, ROWS // 2, ROWS])
    fast = kvstore.connect([a.address, b.address], TOKEN, timeout=10)
    slow = kvstore.connect([a.address, b.address], TOKEN, timeout=10, fast=False)
    try:
        fast.create("t", ROWS, (2, DIM // 2), dtype, bounds, {"kind": "uniform", "seed": 3})
        rng = np.random.default_rng(0)
        for ids in (np.arange(100, 300, dtype=np.int64), rng.integers(0, ROWS, 700)):  # one shard, both
            want = slow.pull("t", ids, bounds, (2, DIM // 2), fast_dtype(dtype))
            got = fast.pull("t", ids, bounds, (2, DIM // 2), fast_dtype(dtype))
            assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
        assert stats(a)["pulls_ok"] >= 2 and stats(b)["pulls_ok"] >= 1
        assert stats(a)["malformed"] == stats(a)["refused"] == 0
    finally:
        fast.close()
        slow.close()


def fast_dtype(dtype: str):
    from graphtrain.runtime.dtypes import NUMPY

    return NUMPY[dtype]


def test_a_pull_after_a_push_sees_it_and_a_table_in_new_memory_is_served_from_it(servers) -> None:
    (srv,) = servers()
    bounds = np.array([0, ROWS])
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("t", ROWS, (DIM,), "float32", bounds, {"kind": "zeros"})
        ids = np.arange(0, 500, 5, dtype=np.int64)
        for k in range(1, 4):
            c.push("t", ids, np.full((len(ids), DIM), k, np.float32), bounds)
            assert (c.pull("t", ids, bounds, (DIM,), np.float32) == k).all()
        pointer = srv.state.tensors["t"].data.data_ptr()
        before = stats(srv)["pulls_ok"]
        srv.state.tensors["t"].data = srv.state.tensors["t"].data.clone().fill_(7.0)  # new memory ...
        srv.tables_changed()  # ... registered as create, restore and set_optimizer register it
        assert srv.state.tensors["t"].data.data_ptr() != pointer
        assert (c.pull("t", ids, bounds, (DIM,), np.float32) == 7).all()
        assert stats(srv)["pulls_ok"] == before + 1
    finally:
        c.close()


def test_refusals_name_the_id_as_the_zmq_path_does_and_unserved_tables_go_over_zmq(servers) -> None:
    (srv,) = servers()
    bounds = np.array([0, ROWS])
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    slow = kvstore.connect([srv.address], TOKEN, timeout=10, fast=False)
    try:
        c.create("t", ROWS, (DIM,), "float32", bounds, {"kind": "uniform", "seed": 1})
        c.create("k", ROWS, (DIM,), "float32", bounds, {"kind": "zeros"}, evict=False)
        c.pull("t", np.arange(4, dtype=np.int64), bounds, (DIM,), np.float32)  # learns the port
        with pytest.raises(protocol.RemoteError, match=r"id 4000 \(position 1\) of 't' is outside"):
            c.transport.call_many([pull_call("t", [3, ROWS])])
        assert stats(srv)["errors"] == 1
        keys = np.array([10**12, 5], dtype=np.int64)  # a dynamic vocabulary: ZMQ inserts its keys
        got = c.pull("k", keys, bounds, (DIM,), np.float32, keyed=True)
        assert np.array_equal(got, slow.pull("k", keys, bounds, (DIM,), np.float32, keyed=True))
        assert stats(srv)["not_served"] == 1
        c.pull("k", keys, bounds, (DIM,), np.float32, keyed=True)
        assert stats(srv)["not_served"] == 1  # remembered: asked over ZMQ straight away
        big = np.arange(fastwire.MAX_REPLY_BYTES // (DIM * 4) + 1, dtype=np.int64) % ROWS  # over its size
        n = stats(srv)["pulls_ok"]
        got = c.pull("t", big, bounds, (DIM,), np.float32)
        assert np.array_equal(got, slow.pull("t", big, bounds, (DIM,), np.float32))
        assert stats(srv)["pulls_ok"] == n
    finally:
        c.close()
        slow.close()


def pull_call(name: str, ids: list[int]):
    from graphtrain.runtime.kvstore.client.transport import Call

    a = np.array(ids, dtype=np.int64)
    return Call(0, "pull", name, [a], None, np.empty((len(a), DIM), np.float32))


def test_a_lane_that_stops_sends_its_pulls_over_zmq(servers) -> None:
    (srv,) = servers()
    bounds = np.array([0, ROWS])
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        c.create("t", ROWS, (DIM,), "float32", bounds, {"kind": "uniform", "seed": 1})
        ids = np.arange(50, dtype=np.int64)
        want = c.pull("t", ids, bounds, (DIM,), np.float32)
        assert srv.fastlane is not None
        srv.fastlane.stop()  # as a restarted server's old lane: the connection closes
        assert np.array_equal(c.pull("t", ids, bounds, (DIM,), np.float32), want)
        assert c.transport._fast.socks[0] is None  # noqa: SLF001 - closed, retried later
    finally:
        c.close()


def test_a_wrong_token_is_refused_before_anything_else_and_garbage_closes_the_connection(servers) -> None:
    (srv,) = servers()
    assert srv.fastlane is not None
    port = srv.fastlane.port
    bad = socket.create_connection(("127.0.0.1", port), timeout=10)
    bad.sendall(fastwire.hello(b"not-the-token") + fastwire.request(1, b"t", 1, ROW) + bytes(8))
    assert fastwire.HELLO_REPLY.unpack(recv_exactly(bad, 8)) == (fastwire.HELLO_MAGIC, 1)
    assert closed(bad)
    with pytest.raises(KVAuthError, match="refused this client's token"):
        from graphtrain.runtime.kvstore.client.fastlane import FastPulls

        f = FastPulls([f"tcp://127.0.0.1:{port}"], "0" * 32, 5)
        f.learn(0, port)
        f._deadline = time.monotonic() + 5  # noqa: SLF001 - as run() sets it
        f._connect(0)  # noqa: SLF001
    garbage = [
        b"GET / HTTP/1.1\r\n\r\n",  # not a hello
        fastwire.HELLO.pack(fastwire.HELLO_MAGIC, 9, 4) + b"abcd",  # another version
        fastwire.HELLO.pack(fastwire.HELLO_MAGIC, 1, 60000),  # a token longer than any
    ]
    for g in garbage:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(g)
        assert closed(s)
    after_hello = [
        fastwire.REQUEST.pack(b"XXXX", 1, 1, 1, 1, 0),  # not a request
        fastwire.REQUEST.pack(fastwire.REQUEST_MAGIC, 2, 1, 1, 1, 0),  # no such op
        fastwire.REQUEST.pack(fastwire.REQUEST_MAGIC, 1, 0, 1, 1, 0),  # no name
        fastwire.REQUEST.pack(fastwire.REQUEST_MAGIC, 1, 1, 1, fastwire.MAX_IDS + 1, 0),  # too many ids
        fastwire.REQUEST.pack(fastwire.REQUEST_MAGIC, 1, 1, 1, 2**63, 0),  # absurdly many
        fastwire.REQUEST.pack(fastwire.REQUEST_MAGIC, 1, 1, 1, 1, 5),  # reserved bits
    ]
    for g in after_hello:
        s = lane(srv)
        s.sendall(g)
        assert closed(s)
    st = stats(srv)
    assert st["refused"] == 2 and st["malformed"] == len(garbage) + len(after_hello)
    good = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        good.create("t", ROWS, (DIM,), "float32", np.array([0, ROWS]), {"kind": "zeros"})
        rows = good.pull("t", np.arange(3, dtype=np.int64), np.array([0, ROWS]), (DIM,), np.float32)
        assert rows.shape == (3, DIM)
        assert stats(srv)["pulls_ok"] == 1
    finally:
        good.close()


def test_a_silent_peer_a_reader_that_never_reads_and_a_full_lane_are_bounded(servers) -> None:
    (srv,) = servers(Limits(handshake_seconds=1.0, stall_seconds=1.0))
    bounds = np.array([0, ROWS])
    good = kvstore.connect([srv.address], TOKEN, timeout=10)
    good.create("t", ROWS, (DIM,), "float32", bounds, {"kind": "uniform", "seed": 2})
    try:
        silent = socket.create_connection(("127.0.0.1", srv.fastlane.port), timeout=10)
        assert closed(silent, 5)  # no hello within handshake_seconds
        assert stats(srv)["handshake_timeouts"] == 1
        rss = psutil.Process(os.getpid()).memory_info().rss
        hog = lane(srv)
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ids = np.arange(fastwire.MAX_REPLY_BYTES // (DIM * 4), dtype=np.int64) % ROWS
        request = fastwire.request(1, b"t", len(ids), ROW) + ids.tobytes()
        hog.settimeout(0.5)
        for _ in range(2000):  # far more than the socket buffers hold: the lane stops reading it
            try:
                hog.sendall(request)
            except TimeoutError:
                break
        served = stats(srv)["pulls_ok"]
        for _ in range(20):  # meanwhile others are served, by the lane
            good.pull("t", ids[:64], bounds, (DIM,), np.float32)
        assert stats(srv)["pulls_ok"] >= served + 20
        assert wait_for(lambda: stats(srv)["stalled"] == 1, 10)  # closed after stall_seconds
        assert psutil.Process(os.getpid()).memory_info().rss - rss < 64 << 20
        hog.close()
    finally:
        good.close()


def test_past_max_connections_the_lane_closes_new_ones_and_tokenless_peers_cannot_keep_clients_out() -> None:
    """8 connections at most, 2 of them before their token: the one waiting longest makes room for a
    newcomer, so peers without the token cannot hold every slot."""
    state = ShardTensors(0)
    state.create("t", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 4})
    lane_ = FastLane(("127.0.0.1", 0), TOKEN.encode(), LaneLimits(max_connections=8))
    held: list[socket.socket] = []
    try:
        lane_.sync(state.tensors)
        silent = [socket.create_connection(("127.0.0.1", lane_.port), timeout=10) for _ in range(2)]
        time.sleep(0.2)
        held = [lane(lane_) for _ in range(7)]  # clients get in: the oldest silent one went
        assert [closed(s, 1.0) for s in silent].count(True) == 1  # accepted in the same millisecond
        extra = socket.create_connection(("127.0.0.1", lane_.port), timeout=10)
        assert closed(extra, 5)  # 1 silent + 7 clients: full
        st = lane_.stats()
        assert (st["full"], st["open"], st["accepted"]) == (2, 8, 7), str(st)
        for s in silent:
            s.close()
    finally:
        for s in held:
            s.close()
        lane_.stop()
        state.close()


@pytest.fixture(scope="module")
def fuzzed():
    """One lane over a table, shared by the fuzz examples; a reference copy of the table's rows. Table
    "s" has an optimizer, and the lane reads push buffers named gt-fuzz-push-*: pushes from shared
    memory get as far as the buffer's name (none of those exists)."""
    state = ShardTensors(0)
    state.create("t", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 5})
    state.create("s", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 6})
    state.set_optimizer("s", {"kind": "sgd", "lr": 1.0})
    lane_ = FastLane(("127.0.0.1", 0), TOKEN.encode(), LaneLimits(handshake_seconds=2.0))
    lane_.allow_segments("gt-fuzz")
    lane_.sync(state.tensors)
    yield lane_, state.tensors["t"].data.numpy().copy(), state
    lane_.stop()
    state.close()


def frames():
    """Bytes a hostile authenticated peer may send: random, or a request with a random header field,
    name, id count, ids or truncation, a push from shared memory naming a random buffer and offset, or a
    batch of such requests."""
    from hypothesis import strategies as st

    ids = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40)
    shared = st.tuples(st.just("shared"), st.integers(0, 2**64 - 1), st.binary(max_size=140), ids)
    field = st.sampled_from(["magic", "op", "name_len", "rid", "n", "reserved", "cut", "none"])
    request = st.tuples(
        field,
        st.integers(0, 2**64 - 1),
        st.binary(min_size=0, max_size=140),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
    )
    parts = st.lists(st.one_of(request, shared), min_size=1, max_size=3)
    batch = st.tuples(st.just("batch"), st.integers(0, 2**64 - 1), parts)
    return st.one_of(st.binary(max_size=300), request, shared, batch)


def hostile(example) -> bytes:
    if isinstance(example, bytes):
        return example
    if example[0] == "batch":  # a batch of such requests, its count or length sometimes wrong
        _, value, requests = example
        body = b"".join(r.ljust(fastwire.pad8(len(r)), b"\0") for r in map(hostile, requests))
        count = len(requests) if value % 3 else value % 12
        size = len(body) if value % 5 else value % (len(body) + 64)
        return fastwire.batch_request(1, count, size) + body
    what, value, name, ids = example
    if what == "shared":  # a buffer of this job's name or not, its name's length sometimes wrong
        buffer = b"gt-fuzz-push-" + name if value % 2 else name
        head = fastwire.shared_push_request(1, b"s", len(ids), ROW, buffer, value % (1 << 40), None)  # type: ignore[arg-type]
        if value % 7 == 0:
            head = head[:24] + (value & 0xFFFF).to_bytes(8, "little") + head[32:]
        return head + np.array(ids, dtype=np.int64).tobytes()
    name = name or b"t"
    header = dict(magic=fastwire.REQUEST_MAGIC, op=1, name_len=len(name), rid=1, n=len(ids), reserved=0)
    if what == "magic":
        header["magic"] = value.to_bytes(8, "little")[:4]
    elif what in ("op", "name_len"):
        header[what] = value & 0xFFFF
    elif what in ("n", "reserved", "rid"):
        header[what] = value
    body = name.ljust(fastwire.pad8(len(name)), b"\0") + ROW + np.array(ids, dtype=np.int64).tobytes()
    msg = fastwire.REQUEST.pack(*header.values()) + body
    return msg[: value % max(1, len(msg))] if what == "cut" else msg


@pytest.mark.timeout(120)
def test_fuzzed_peers_never_crash_the_lane_nor_change_a_row(fuzzed) -> None:
    """Whatever an authenticated peer sends, the lane answers it, refuses it or closes the connection,
    changes no row, and answers the next good pull."""
    from hypothesis import HealthCheck, given, settings

    lane_, reference, state = fuzzed
    shared = state.tensors["s"].data.clone()
    good = lane(lane_)

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(frames())
    def one(example) -> None:
        s = socket.create_connection(("127.0.0.1", lane_.port), timeout=10)
        try:
            s.sendall(fastwire.hello(TOKEN.encode()))
            recv_exactly(s, 8)
            s.sendall(hostile(example))
            s.shutdown(socket.SHUT_WR)  # nothing more comes: the lane answers, closes, or times out
            s.settimeout(5)
            while s.recv(1 << 16):
                pass
        except OSError:  # closed by the lane (reset, not connected any more) or nothing said in 5 s
            pass
        finally:
            s.close()
        ids = np.array([0, 7, ROWS - 1], dtype=np.int64)
        good.sendall(fastwire.request(1, b"t", 3, ROW) + ids.tobytes())
        magic, status, _, nbytes = fastwire.REPLY.unpack(recv_exactly(good, fastwire.REPLY.size))
        assert (magic, status, nbytes) == (fastwire.REPLY_MAGIC, fastwire.OK, 3 * DIM * 4)
        rows = np.frombuffer(recv_exactly(good, nbytes), np.float32).reshape(3, DIM)
        assert np.array_equal(rows, reference[ids])

    one()
    assert lane_.stats()["loops"] > 0
    assert state.tensors["s"].data.equal(shared)  # no push from shared memory was applied ...
    assert lane_.stats()["pushes_busy"] > 0  # ... though some got as far as their buffer's name
    good.close()


def test_a_server_without_a_lane_says_so_and_its_clients_pull_over_zmq() -> None:
    srv = ShardServer(ShardTensors(0), TOKEN, "tcp://127.0.0.1:0", workers=1, fast_port=-1)
    srv.start()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        assert srv.fastlane is None and c.health()[0]["fast_port"] == 0
        c.create("t", ROWS, (DIM,), "float32", np.array([0, ROWS]), {"kind": "zeros"})
        assert not c.pull("t", np.arange(5, dtype=np.int64), np.array([0, ROWS]), (DIM,), np.float32).any()
        assert c.transport._fast.ports == [0]  # noqa: SLF001 - asked once, never again
    finally:
        c.close()
        srv.stop()


def graph_servers(nodes: int = 600, shards: int = 2) -> tuple[list[ShardServer], np.ndarray]:
    """Servers each holding a partition of a random graph (in-CSR, global sources), and the bounds."""
    from graphtrain.runtime.kvstore.tables.graphpart import GraphPart

    rng = np.random.default_rng(7)
    bounds = np.linspace(0, nodes, shards + 1).astype(np.int64)
    out = []
    for s in range(shards):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        degrees = rng.integers(0, 30, hi - lo)
        indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
        state = ShardTensors(s)
        state.graph = GraphPart(lo, hi, indptr, rng.integers(0, nodes, int(indptr[-1])).astype(np.int64))
        srv = ShardServer(state, TOKEN, "tcp://127.0.0.1:0", workers=1)
        srv.start()
        out.append(srv)
    return out, bounds


def test_samples_are_the_zmq_paths_draws_and_what_the_lane_cannot_sample_goes_over_zmq() -> None:
    srvs, bounds = graph_servers()
    addresses = [s.address for s in srvs]
    fast = kvstore.connect(addresses, TOKEN, timeout=10)
    slow = kvstore.connect(addresses, TOKEN, timeout=10, fast=False)
    try:
        rng = np.random.default_rng(1)
        for fanout, seed in ((5, 0), (10, 3), (1, 1), (1000, 2)):  # 1000: over the lane's reply size
            seeds = rng.integers(0, 600, 300)
            got, want = fast.sample(seeds, fanout, bounds, seed), slow.sample(seeds, fanout, bounds, seed)
            assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        assert sum(stats(s)["samples_ok"] for s in srvs) == 2 * 3  # the first three, on both shards
        everything = fast.sample(np.arange(600), -1, bounds)  # all neighbours: over ZMQ
        assert np.array_equal(everything[1], slow.sample(np.arange(600), -1, bounds)[1])
        assert sum(stats(s)["samples_ok"] for s in srvs) == 6
        with pytest.raises(
            protocol.RemoteError, match=r"seed 700 is outside this partition's nodes \[300, 600\)"
        ):
            from graphtrain.runtime.kvstore.client.transport import Call

            fast.transport.call_many([Call(1, "sample", None, [np.array([700])], {"fanout": 2, "seed": 0})])
    finally:
        fast.close()
        slow.close()
        for s in srvs:
            s.stop()


def test_a_row_type_other_than_the_tables_goes_over_zmq_as_numpy_has_it(servers) -> None:
    """The lane answers only the table's own element type and row shape: an int32 table read as
    float32, or (2, 2) rows read as (4,), get what the ZMQ path gives (numpy's conversion or refusal)."""
    (srv,) = servers()
    bounds = np.array([0, ROWS])
    fast = kvstore.connect([srv.address], TOKEN, timeout=10)
    slow = kvstore.connect([srv.address], TOKEN, timeout=10, fast=False)
    try:
        fast.create("i", ROWS, (2,), "int32", bounds, {"kind": "zeros"})
        fast.push("i", np.arange(3), np.array([[1, 2], [3, 4], [5, 6]], np.int32), bounds)
        fast.create("m", ROWS, (2, 2), "float32", bounds, {"kind": "uniform", "seed": 1})
        ids = np.arange(3)
        got = fast.pull("i", ids, bounds, (2,), np.float32)
        assert np.array_equal(got, slow.pull("i", ids, bounds, (2,), np.float32)) and got[2, 1] == 6.0
        for shape in ((4,), (2,)):
            with pytest.raises(ValueError, match="broadcast"):
                fast.pull("m", ids, bounds, shape, np.float32)
        assert stats(srv)["pulls_ok"] == 0 and stats(srv)["not_served"] >= 1
    finally:
        fast.close()
        slow.close()


def test_stats_racing_stop_never_reads_a_freed_server() -> None:
    import threading

    for _ in range(20):
        lane_ = FastLane(("127.0.0.1", 0), TOKEN.encode())
        done = threading.Event()

        def read(fl: FastLane = lane_, stop: threading.Event = done) -> None:
            while not stop.is_set():
                fl.stats()

        t = threading.Thread(target=read)
        t.start()
        time.sleep(0.005)
        lane_.stop()
        assert lane_.stats() == {}
        done.set()
        t.join(5)


def test_a_lane_that_drips_its_reply_is_given_up_at_the_calls_timeout() -> None:
    """A server that sends a right reply a byte at a time: the call's timeout bounds the whole exchange
    (not each byte's wait), and the pull is left to ZMQ."""
    import threading

    from graphtrain.runtime.kvstore.client.fastlane import FastPulls
    from graphtrain.runtime.kvstore.client.transport import Call

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(fastwire.HELLO_REPLY.pack(fastwire.HELLO_MAGIC, 0))
            reply = fastwire.REPLY.pack(fastwire.REPLY_MAGIC, 0, 1, 4 * DIM) + bytes(4 * DIM)
            for b in reply:
                if stop.wait(0.3):
                    return
                conn.sendall(bytes([b]))

    server = threading.Thread(target=drip, daemon=True)
    server.start()
    pulls = FastPulls([f"tcp://127.0.0.1:{port}"], TOKEN, timeout=1.0)
    pulls.learn(0, port)
    call = Call(0, "pull", "t", [np.array([0])], None, np.empty((1, DIM), np.float32))
    start = time.monotonic()
    try:
        answers, left = pulls.run([call])
        assert (answers, left) == ({}, [call]) and time.monotonic() - start < 3.0
    finally:
        stop.set()
        pulls.close()
        listener.close()
        server.join(5)


def test_a_lane_on_any_port_of_a_host_it_cannot_listen_on_is_left_off_a_numbered_one_fails() -> None:
    from graphtrain.runtime.errors import GraphtrainError

    assert FastLane.open("tcp://lo:0", 0, TOKEN.encode()) is None  # an interface name ZMQ takes
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(GraphtrainError, match="cannot listen on 127.0.0.1"):
            FastLane.open("tcp://127.0.0.1:0", taken.getsockname()[1], TOKEN.encode())
        srv = ShardServer(
            ShardTensors(0), TOKEN, "tcp://127.0.0.1:0", workers=1, fast_port=taken.getsockname()[1]
        )
        with pytest.raises(GraphtrainError):
            srv.start()
        srv.stop()  # returns: nothing of the failed start is left open
    finally:
        taken.close()


@pytest.mark.parametrize(
    "args",
    [{"fanout": 2, "seed": -1}, {"fanout": True, "seed": 0}, {"fanout": 2, "seed": 2**64}, {"fanout": 2}],
)
def test_sample_arguments_the_zmq_path_refuses_are_left_to_it(args: dict) -> None:
    from graphtrain.runtime.kvstore.client.fastlane import FastPulls
    from graphtrain.runtime.kvstore.client.transport import Call

    pulls = FastPulls(["tcp://127.0.0.1:1"], TOKEN, timeout=1.0)
    pulls.learn(0, 1)
    assert pulls.eligible(Call(0, "sample", None, [np.array([1, 2])], {"fanout": 2, "seed": 0}))
    assert not pulls.eligible(Call(0, "sample", None, [np.array([1, 2])], args))


def test_a_table_name_with_a_trailing_newline_is_refused_as_any_bad_name(servers) -> None:
    """The name pattern's end matched before a final newline ($): a 129-byte name passed, and the lane
    (which holds at most 128) then refused it on every later sync."""
    (srv,) = servers()
    c = kvstore.connect([srv.address], TOKEN, timeout=10)
    try:
        with pytest.raises(protocol.RemoteError, match="needs a tensor name"):
            c.create("x" * 128 + "\n", ROWS, (DIM,), "float32", np.array([0, ROWS]))
        c.create("x" * 128, ROWS, (DIM,), "float32", np.array([0, ROWS]))  # the longest name: served
        rows = c.pull("x" * 128, np.arange(3), np.array([0, ROWS]), (DIM,), np.float32)
        assert rows.shape == (3, DIM) and stats(srv)["pulls_ok"] == 1
    finally:
        c.close()
