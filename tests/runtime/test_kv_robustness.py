"""A shard server facing bad input: every malformed or unauthorised request gets an error reply (or,
for an oversized one, a closed connection), the server keeps serving other clients, and no stored
row or optimizer state changes. A client facing a dead server gets a clear timeout, not a hang."""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore import protocol as P
from graphtrain.runtime.kvstore.client import KVTimeout
from tests.runtime.conftest import TOKEN, free_port, servers, start_server

ROWS, DIM = 1000, 8


def raw_request(address: str, frames: list[bytes], timeout_ms: int = 5000) -> dict | None:
    """Send frames on a fresh DEALER; the reply's header, or None if the connection gave nothing back."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        sock.send_multipart(frames)
        if not sock.poll(timeout_ms):
            return None
        return msgpack.unpackb(sock.recv_multipart()[0], raw=False)
    finally:
        sock.close(linger=0)


def header(
    op: str, name: str | None = "emb", frames: list | None = None, token: str = TOKEN, **args
) -> bytes:
    return msgpack.packb(
        {"v": 1, "op": op, "rid": 42, "token": token, "name": name, "frames": frames or [], "args": args},
        use_bin_type=True,
    )


def ids_bytes(ids: list[int], dtype: str = "int64") -> bytes:
    return np.asarray(ids, dtype=dtype).tobytes()


BAD = [
    ("random bytes", lambda: [os.urandom(200)], "not valid msgpack"),
    ("empty header", lambda: [b""], "not valid msgpack"),
    ("header is a list", lambda: [msgpack.packb([1, 2, 3])], "header must be a map"),
    ("wrong version", lambda: [msgpack.packb({"v": 9, "op": "pull", "rid": 42, "token": TOKEN})], "version"),
    ("unknown op", lambda: [header("drop_table")], "unknown op 'drop_table'"),
    ("missing token", lambda: [msgpack.packb({"v": 1, "op": "stats", "rid": 42})], "token missing"),
    ("wrong token", lambda: [header("stats", None, token="guess")], "authentication failed"),
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
        "ids must be a 1-D int64",
    ),
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
        "3 ids but 2 value rows",
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
            np.zeros((1, DIM), np.float32).tobytes(),
        ],
        "outside this shard",
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
        "create mismatching an existing table",
        lambda: [header("create", "emb", num_rows=ROWS, row_shape=[4], dtype="float32", lo=0, hi=ROWS)],
        "exists as",
    ),
    (
        "bad argument type",
        lambda: [header("barrier", None, key="k", count="two")],
        "argument 'count' must be int",
    ),
    (
        "optimizer with nan lr",
        lambda: [header("set_optimizer", "emb", config={"kind": "adam", "lr": float("nan")})],
        "lr must be a finite number",
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
        yield srv[0], client
        client.close()


def snapshot(client) -> np.ndarray:
    return client.pull("emb", np.arange(ROWS), np.array([0, ROWS]), (DIM,), np.float32)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("case", "frames", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_request_gets_an_error_and_changes_nothing(server, case: str, frames, needle: str) -> None:
    srv, client = server
    before = snapshot(client)
    reply = raw_request(srv.address, frames())
    assert reply is not None, f"{case}: no reply"
    assert reply["ok"] is False
    assert needle in reply["error"], reply["error"]
    assert client.health()[0]["tensors"] >= 1  # still serving
    assert np.array_equal(snapshot(client), before), "a refused request changed rows"


@pytest.mark.timeout(120)
def test_oversized_requests_are_refused(server) -> None:
    """Over the request limit: an error reply. One frame over ZMQ's message-size cap (the limit plus the
    header allowance): ZMQ closes that connection before buffering it. Either way nothing changes."""
    srv, client = server
    before = snapshot(client)
    over = np.zeros((1 << 20) // 4 + 100, np.float32)
    frames = [
        header("push", frames=[["int64", [1]], ["float32", [1, len(over)]]]),
        ids_bytes([1]),
        over.tobytes(),
    ]
    reply = raw_request(srv.address, frames)
    assert reply is not None and "exceeds the limit of 1048576" in reply["error"]
    huge = np.zeros((2 << 20) // 4, np.float32)
    frames = [
        header("push", frames=[["int64", [1]], ["float32", [1, len(huge)]]]),
        ids_bytes([1]),
        huge.tobytes(),
    ]
    assert raw_request(srv.address, frames, timeout_ms=2000) is None
    assert client.health()[0]["shard"] == 0
    assert np.array_equal(snapshot(client), before)


@pytest.mark.timeout(120)
def test_client_reports_a_dead_server(ckroot: Path) -> None:
    srv = start_server(0, free_port(), ckroot)
    try:
        client = kvstore.connect([srv.address], TOKEN, timeout=1.5, retries=1)
        assert client.health()[0]["shard"] == 0
        srv.kill()
        start = time.monotonic()
        with pytest.raises(
            KVTimeout, match=rf"shard 0 \({srv.address}\) did not answer health within 1.5 s \(2 attempts\)"
        ):
            client.health()
        assert time.monotonic() - start < 10
        client.close()
    finally:
        srv.kill()


@pytest.mark.timeout(120)
def test_gradient_pushes_are_not_retried(ckroot: Path) -> None:
    srv = start_server(0, free_port(), ckroot)
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


def test_protocol_validation_is_pure() -> None:
    req = P.parse_request(P.encode_request("pull", 7, "t", "emb", [np.arange(3, dtype=np.int64)]))
    assert req.op == "pull" and req.rid == 7 and req.arrays[0].tolist() == [0, 1, 2]
    with pytest.raises(P.ProtocolError, match="exceeds the limit"):
        P.parse_request(
            P.encode_request("pull", 7, "t", "emb", [np.arange(100, dtype=np.int64)]), max_bytes=64
        )
