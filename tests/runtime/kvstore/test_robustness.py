"""A shard server facing bad input from an authenticated peer: every malformed request gets an error
reply naming the problem (and never echoing more than a few dozen characters of it), the server keeps
serving other clients, and no stored row or optimizer state changes. A client facing a dead server
gets a clear timeout, not a hang. (Unauthenticated peers: test_kv_attacks.py.)"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from graphtrain.contract import failures
from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client.kvclient import KVTimeout
from graphtrain.runtime.kvstore.wire import protocol
from tests.runtime.conftest import TOKEN, dealer, request, servers, start_server

ROWS, DIM = 1000, 8


def header(op: str, name: str | None = "emb", frames: list | None = None, **args) -> bytes:
    return msgpack.packb(
        {"v": 2, "op": op, "rid": 42, "name": name, "frames": frames or [], "args": args}, use_bin_type=True
    )


def ids_bytes(ids: list[int], dtype: str = "int64") -> bytes:
    return np.asarray(ids, dtype=dtype).tobytes()


def raw_header(**fields) -> bytes:
    return msgpack.packb({"v": 2, "rid": 42, "frames": [], "args": {}, **fields}, use_bin_type=True)


ROW = np.zeros((1, DIM), np.float32)
BAD = [
    ("random bytes", lambda: [os.urandom(200)], "not valid msgpack"),
    ("empty header", lambda: [b""], "not valid msgpack"),
    ("header is a list", lambda: [msgpack.packb([1, 2, 3])], "header must be a map"),
    ("wrong version", lambda: [msgpack.packb({"v": 1, "op": "pull", "rid": 42})], "version 1 is not 2"),
    ("unknown op", lambda: [header("drop_table")], "unknown op 'drop_table'"),
    # issue 14, finding 1: each of these ended a worker thread for good
    ("op as a list", lambda: [raw_header(op=["pull"], name="emb")], "unknown op ['pull']"),
    (
        "dtype as a list",
        lambda: [header("pull", frames=[[["int64"], [1]]]), ids_bytes([1])],
        "frames[0] has unsupported dtype ['int64']",
    ),
    (
        "shape holding True",
        lambda: [header("pull", frames=[["int64", [True]]]), ids_bytes([1])],
        "frames[0] has an invalid shape [True]",
    ),
    (
        "shape whose product wraps int64",
        lambda: [header("pull", frames=[["int64", [2**32, 2**32]]]), b""],
        "holds 0 bytes but int64[4294967296, 4294967296] needs 147573952589676412928",
    ),
    ("rid as a float", lambda: [raw_header(op="stats", rid=1.5)], "rid must be a non-negative integer"),
    ("name on an op without one", lambda: [header("stats", name="x")], "stats takes no tensor name"),
    (
        "a 60 KB name is not echoed",
        lambda: [header("pull", "x" * 60_000, frames=[["int64", [1]]]), ids_bytes([1])],
        "got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...",
    ),
    (
        "truncated frames",
        lambda: [header("pull", frames=[["int64", [4]]])],
        "describes 1 frames but 0 were sent",
    ),
    (
        "frame shorter than its shape",
        lambda: [header("pull", frames=[["int64", [4]]]), ids_bytes([1, 2])],
        "holds 16 bytes but int64[4] needs 32",
    ),
    (
        "unsupported dtype",
        lambda: [header("pull", frames=[["object", [2]]]), ids_bytes([1, 2])],
        "unsupported dtype",
    ),
    (
        "float ids",
        lambda: [header("pull", frames=[["float64", [2]]]), ids_bytes([1, 2], "float64")],
        "pull ids must be a 1-D int64",
    ),
    ("pull without ids", lambda: [header("pull")], "at least one frame of ids"),
    (
        "ids outside the shard",
        lambda: [header("pull", frames=[["int64", [2]]]), ids_bytes([1, ROWS + 5])],
        f"id {ROWS + 5} (position 1)",
    ),
    ("negative id", lambda: [header("pull", frames=[["int64", [1]]]), ids_bytes([-3])], "id -3"),
    (
        "unknown tensor",
        lambda: [header("pull", "nope", frames=[["int64", [1]]]), ids_bytes([1])],
        "no tensor named 'nope'",
    ),
    (
        "bad tensor name",
        lambda: [header("pull", "../etc", frames=[["int64", [1]]]), ids_bytes([1])],
        "needs a tensor name",
    ),
    (
        "push value shape",
        lambda: [
            header("push", frames=[["int64", [2]], ["float32", [2, 3]]]),
            ids_bytes([1, 2]),
            np.zeros((2, 3), np.float32).tobytes(),
        ],
        "rows of shape (8,)",
    ),
    (
        "push row count",
        lambda: [
            header("push", frames=[["int64", [3]], ["float32", [2, DIM]]]),
            ids_bytes([1, 2, 3]),
            np.zeros((2, DIM), np.float32).tobytes(),
        ],
        "push holds 2 value rows for 3 ids",
    ),
    (
        "push without values",
        lambda: [header("push", frames=[["int64", [1]]]), ids_bytes([1])],
        "push takes frames [ids..., values...], got 1",
    ),
    (
        "grad with wrong dtype",
        lambda: [
            header("push_grad", frames=[["int64", [1]], ["float64", [1, DIM]]]),
            ids_bytes([1]),
            np.zeros((1, DIM)).tobytes(),
        ],
        "must be float32 rows",
    ),
    (
        "grad ids outside",
        lambda: [
            header("push_grad", frames=[["int64", [1]], ["float32", [1, DIM]]]),
            ids_bytes([ROWS * 3]),
            ROW.tobytes(),
        ],
        "outside this shard",
    ),
    # issue 14, finding 4: non-finite values were stored for good
    (
        "push of NaN",
        lambda: [
            header("push", frames=[["int64", [1]], ["float32", [1, DIM]]]),
            ids_bytes([5]),
            np.full((1, DIM), np.nan, np.float32).tobytes(),
        ],
        "push of 'emb': 1 row(s) hold NaN or infinity (first id 5); nothing was written",
    ),
    (
        "gradient with an infinity",
        lambda: [
            header("push_grad", frames=[["int64", [2]], ["float32", [2, DIM]]]),
            ids_bytes([3, 4]),
            np.array([[0.5] * DIM, [np.inf] + [0.0] * (DIM - 1)], np.float32).tobytes(),
        ],
        "1 gradient row(s) hold NaN or infinity (first id 4); no row was updated",
    ),
    (
        "checkpoint escapes root",
        lambda: [header("checkpoint", None, path="../../x")],
        "leaves the checkpoint root",
    ),
    (
        "create with a bad range",
        lambda: [header("create", "t2", num_rows=10, row_shape=[4], dtype="float32", lo=5, hi=50)],
        "does not fit",
    ),
    (
        "create beyond this machine's memory",
        lambda: [header("create", "t3", num_rows=2**39, row_shape=[256], dtype="float32", lo=0, hi=2**39)],
        "needs 524288.00 GiB; this server has",
    ),
    (
        "create with a NaN init",
        lambda: [
            header(
                "create", "t4", num_rows=4, row_shape=[2], dtype="float32", lo=0, hi=4, init={"mean": np.nan}
            )
        ],
        "argument 'mean' must be a finite number",
    ),
    (
        "create mismatching an existing table",
        lambda: [header("create", "emb", num_rows=ROWS, row_shape=[4], dtype="float32", lo=0, hi=ROWS)],
        "exists as",
    ),
    (
        "bad argument type",
        lambda: [header("barrier", None, key="k", count="two")],
        "argument 'count' must be int",
    ),
    ("bool for an int", lambda: [header("barrier", None, key="k", count=True)], "must be int, got bool"),
    (
        "optimizer with nan lr",
        lambda: [header("set_optimizer", "emb", config={"kind": "adam", "lr": float("nan")})],
        "lr must be a finite number",
    ),
    (
        "optimizer with an unknown key",
        lambda: [header("set_optimizer", "emb", config={"kind": "adam", "lr": 0.1, "x": 1})],
        "optimizer of 'emb'",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("ck")
    with servers(1, root, "--max-request-bytes", str(1 << 20)) as srv:
        client = kvstore.connect([srv[0].address], TOKEN, timeout=20)
        from graphtrain.runtime.optim import OptimConfig
        from graphtrain.runtime.tensor import DistEmbedding

        emb = DistEmbedding(ROWS, DIM, "emb", client=client)
        emb.attach(OptimConfig("adagrad", 0.1))
        raw = dealer(srv[0].address)
        yield srv[0], client, raw
        raw.close(linger=0)
        client.close()


def snapshot(client) -> np.ndarray:
    return client.pull("emb", np.arange(ROWS), np.array([0, ROWS]), (DIM,), np.float32)


def optimizer_state(client) -> dict:
    return client.stats()[0]["tensors"]["emb"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("case", "frames", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_request_gets_an_error_and_changes_nothing(server, case: str, frames, needle: str) -> None:
    srv, client, raw = server
    before = snapshot(client)
    reply = request(raw, frames())
    assert reply is not None, f"{case}: no reply"
    assert reply["ok"] is False
    assert needle in reply["error"], reply["error"]
    assert len(reply["error"]) <= 500
    assert client.health()[0]["live"] is True  # still serving
    assert np.array_equal(snapshot(client), before), "a refused request changed rows"


@pytest.mark.timeout(120)
def test_every_worker_survives_a_burst_of_bad_requests(server) -> None:
    """Each of the four messages that used to end a worker thread, many times over, then real work."""
    srv, client, raw = server
    for case in BAD[5:9]:
        for _ in range(10):
            raw.send_multipart(case[1]())
    for _ in range(40):
        assert raw.poll(5000)
        assert msgpack.unpackb(raw.recv_multipart()[0])["ok"] is False
    health = client.health()[0]
    assert health["live"] and health["workers"] == 4
    assert snapshot(client).shape == (ROWS, DIM)


@pytest.mark.timeout(120)
def test_oversized_requests_are_refused(server) -> None:
    """Over the request limit (1 MiB here): an error reply. One frame over the frame limit (ZMQ's
    message-size cap): ZMQ closes that connection before buffering it. Either way nothing changes and
    the server keeps serving."""
    srv, client, raw = server
    before = snapshot(client)
    rows = protocol.MAX_FRAME_BYTES // (DIM * 4)
    piece = [["int64", [rows]], ["float32", [rows, DIM]]]
    ids, values = ids_bytes(list(range(rows))), np.zeros((rows, DIM), np.float32).tobytes()
    over = (1 << 20) // protocol.MAX_FRAME_BYTES + 1  # pieces: just over the 1 MiB request limit
    reply = request(raw, [header("push", frames=piece * over), *([ids, values] * over)])
    assert reply is not None and "exceeds the limit of 1048576" in reply["error"]
    big = dealer(srv.address)
    huge = np.zeros(protocol.MAX_FRAME_BYTES // 4 + 100, np.float32)
    frames = [
        header("push", frames=[["int64", [1]], ["float32", [1, len(huge)]]]),
        ids_bytes([1]),
        huge.tobytes(),
    ]
    assert request(big, frames, timeout_ms=2000) is None
    big.close(linger=0)
    assert client.health()[0]["live"]
    assert np.array_equal(snapshot(client), before)


@pytest.mark.timeout(120)
def test_client_reports_a_dead_server(ckroot: Path) -> None:
    srv = start_server(0, ckroot)
    try:
        client = kvstore.connect([srv.address], TOKEN, timeout=1.5, retries=1)
        assert client.health()[0]["shard"] == 0
        srv.kill()
        with pytest.raises(
            KVTimeout, match=rf"shard 0 \({srv.address}\) did not answer health within 1.5 s \(2 attempts\)"
        ) as said:
            client.health()
        assert failures.lost_shard(failures.ERROR + str(said.value)) == 0  # as the executors read it
        client.close()
    finally:
        srv.kill()


@pytest.mark.timeout(120)
def test_gradient_pushes_are_not_retried(ckroot: Path) -> None:
    srv = start_server(0, ckroot)
    try:
        client = kvstore.connect([srv.address], TOKEN, timeout=1.0, retries=3)
        client.create("g", 10, (2,), "float32", np.array([0, 10]))
        client.set_optimizer("g", {"kind": "sgd", "lr": 0.1})
        srv.kill()
        with pytest.raises(KVTimeout, match=r"push_grad of 'g' within 1 s \(1 attempt\)"):
            client.push_grad("g", np.array([1]), np.ones((1, 2), np.float32), np.array([0, 10]), mean=False)
        client.close()
    finally:
        srv.kill()


@pytest.mark.timeout(120)
def test_a_push_given_up_never_reaches_the_next_server_at_its_address(ckroot: Path) -> None:
    """ZMQ queues what a DEALER sends while its server is down and delivers it to whichever server
    listens at the address next. A push_grad reported as failed must not be applied there later: the
    client drops the connection it gave the call up on. Deterministic: the next server holds the table
    from its start, and the pull below goes after anything still queued on the old connection."""
    from graphtrain.runtime.kvstore.serving.server import ShardServer
    from graphtrain.runtime.kvstore.tables.state import ShardTensors

    bounds, sgd = np.array([0, 10]), {"kind": "sgd", "lr": 1.0}
    srv = start_server(0, ckroot)
    client = kvstore.connect([srv.address], TOKEN, timeout=2.0, retries=0, fast=False)  # ZMQ's path
    client.create("g", 10, (2,), "float32", bounds, {"kind": "zeros"})
    client.set_optimizer("g", sgd)
    srv.kill()
    with pytest.raises(KVTimeout, match="push_grad of 'g'"):
        client.push_grad("g", np.array([1]), np.ones((1, 2), np.float32), bounds, mean=False)
    state = ShardTensors(0)
    state.create("g", 10, (2,), "float32", 0, 10, {"kind": "zeros"})
    state.set_optimizer("g", sgd)
    again = ShardServer(state, TOKEN, srv.address, workers=1, fast_port=None)
    again.start()
    try:
        got = client.pull("g", np.array([1]), bounds, (2,), np.float32)
        assert (got == 0).all() and (state.get("g").data == 0).all(), "the abandoned push was applied"
    finally:
        client.close()
        again.stop()


@pytest.mark.timeout(120)
def test_a_call_that_raised_leaves_nothing_queued_for_the_next_server(ckroot: Path) -> None:
    """One call_many to two shards: shard 1 refuses its part (no such table) while shard 0's server is
    down, so shard 0's overwrite push waits in its socket's queue when the call raises. A caller that goes
    on (catches the error) must not have that push applied later, by the next server at shard 0's address:
    the exchange drops every connection it still waited on. Deterministic, as the test above."""
    from graphtrain.runtime.kvstore.serving.server import ShardServer
    from graphtrain.runtime.kvstore.tables.state import ShardTensors

    srv0, srv1 = start_server(0, ckroot), start_server(1, ckroot)
    bounds = np.array([0, 5, 10])
    solo = kvstore.connect([srv0.address], TOKEN, timeout=5.0, retries=0, fast=False)
    solo.create("t", 10, (2,), "float32", bounds[:2], {"kind": "zeros"})  # on shard 0 only
    solo.close()
    client = kvstore.connect([srv0.address, srv1.address], TOKEN, timeout=5.0, retries=0, fast=False)
    client.health()  # both connections up (a handshake cut short would be reported instead)
    srv0.kill()
    # the close seen before the push: else it may come during the call, which then fails on shard 0
    # (closed before answering) before shard 1's refusal arrives, a race CI lost under load
    deadline = time.monotonic() + 30
    while not client.transport.check_handshakes({0}):
        assert time.monotonic() < deadline, "the client never saw shard 0's connection close"
        time.sleep(0.01)
    with pytest.raises(protocol.RemoteError, match="shard 1 .* refused push: .*no tensor named 't'"):
        client.push("t", np.array([1, 7]), np.ones((2, 2), np.float32), bounds)
    state = ShardTensors(0)
    state.create("t", 10, (2,), "float32", 0, 5, {"kind": "zeros"})
    again = ShardServer(state, TOKEN, srv0.address, workers=1, fast_port=None)
    again.start()
    try:
        got = client.pull("t", np.array([1]), bounds, (2,), np.float32)  # after anything still queued
        assert (got == 0).all() and (state.get("t").data == 0).all(), "the failed call's push was applied"
    finally:
        client.close()
        again.stop()
        srv1.kill()


@pytest.mark.timeout(60)
def test_a_resend_goes_behind_its_first_copy_and_its_answer_counts() -> None:
    """A slow server (a stand-in that answers nothing until the resend has come) gets the resend of an
    idempotent call on the connection of its first copy, after it: a server starts one peer's requests in
    the order they came (fairqueue.py), so the first copy can never start after the caller's next
    request, as it could from another connection. Its late answer is dropped; the resend's counts."""
    import zmq

    from graphtrain.runtime.kvstore.wire import auth

    ctx = zmq.Context()
    zap = ctx.socket(zmq.REP)  # the token is checked as a shard server checks it
    zap.bind(auth.ZAP_ENDPOINT)
    router = ctx.socket(zmq.ROUTER)
    auth.secure_server(router)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    got: list[tuple[bytes, int]] = []

    def slow_server() -> None:
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(router, zmq.POLLIN)
        while len(got) < 2:  # the first copy, then (after the client's timeout) the resend
            events = dict(poller.poll(10_000))
            if not events:
                return
            if zap in events:
                zap.send_multipart(auth.zap_reply(zap.recv_multipart(), TOKEN.encode())[0])
            if router in events:
                peer, header, *_ = router.recv_multipart()
                got.append((peer, msgpack.unpackb(header)["rid"]))
        for n, (peer, rid) in enumerate(got, 1):
            router.send_multipart([peer, *protocol.encode_reply(rid, result={"copy": n})])

    server = threading.Thread(target=slow_server, daemon=True)
    server.start()
    client = kvstore.connect([f"tcp://127.0.0.1:{port}"], TOKEN, timeout=1.0, retries=1, fast=False)
    try:
        assert client.stats() == [{"copy": 2}]
    finally:
        client.close()
        server.join(10)
        ctx.destroy(linger=0)
    (first, rid1), (second, rid2) = got
    assert first == second and rid1 < rid2, "the resend left on another connection"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("call", ["barrier", "stats"])
def test_a_server_that_dies_while_a_call_waits_is_reported_at_once(ckroot: Path, call: str) -> None:
    """A call waits on the server when it is killed: the closed connection fails it at once, saying so,
    not after the call's 30 s (the reply can never come). A barrier waits by design (one participant of
    two; non-idempotent, never resent); a `stats` call (idempotent, no retries left) waits on a server
    stopped first (SIGSTOP: it reads nothing)."""
    import signal

    srv = start_server(0, ckroot)
    try:
        client = kvstore.connect([srv.address], TOKEN, timeout=30.0, retries=3 if call == "barrier" else 0)
        assert client.health()[0]["shard"] == 0
        if call == "stats":
            srv.proc.send_signal(signal.SIGSTOP)
            deadline = time.monotonic() + 30  # stopped before the call is sent (a signal lands later)
            while Path(f"/proc/{srv.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
                assert time.monotonic() < deadline, "the server did not stop"
                time.sleep(0.01)
        killer = threading.Timer(1.0, srv.kill)  # SIGKILL ends a stopped process too
        killer.start()
        began = time.monotonic()
        closed = rf"shard 0 \({srv.address}\) closed the connection before answering {call}"
        with pytest.raises(KVTimeout, match=closed + (r" \(1 attempt\)" if call == "stats" else "")) as said:
            if call == "barrier":
                client.barrier("two", 2, timeout=30.0)
            else:
                client.stats()
        assert failures.lost_shard(failures.ERROR + str(said.value)) == 0
        assert time.monotonic() - began < 10
        killer.join()
        client.close()
    finally:
        srv.kill()
