"""Pushes from shared memory on the fast lane (cuda/src/fastlane.cpp's op 5; serving/fastlane.py's Unix
socket beside an ipc:// server; client/fastlane.py): a client on the servers' host writes its gradients
into its push buffer and sends only the ids and the buffer's name. The rows, optimizer state and
refusals are the ZMQ path's bit for bit (float32 and half tables); a buffer the lane cannot read (not
this job's, a path, gone, too small, a misaligned offset) answers "busy" and nothing is applied; a name
created again is read as the new file; a version-2 peer cannot send the op. Real servers in this
process on ipc:// sockets, real clients."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client.transport import Call
from graphtrain.runtime.kvstore.serving.fastlane import unix_path_of
from graphtrain.runtime.kvstore.serving.server import ShardServer
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire import fastwire, protocol
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_fastlane import closed, recv_exactly

ROWS, DIM = 4_000, 16
BOUNDS = np.array([0, ROWS])
F32 = fastwire.row_type(np.dtype(np.float32), (DIM,))
pytestmark = pytest.mark.timeout(60)


def ipc(tmp_path: Path, job: str, fast_port: int = 0) -> ShardServer:
    """A shard server on an ipc:// socket with its tables in shared memory (`job`: its segments' prefix)."""
    state = ShardTensors(0, use_shm=True, shm_prefix=f"gt-{job}-{os.getpid()}")
    srv = ShardServer(state, TOKEN, f"ipc://{tmp_path}/{job}.sock", workers=2, fast_port=fast_port)
    srv.start()
    return srv


@pytest.fixture
def ipc_server(tmp_path: Path) -> Iterator[ShardServer]:
    srv = ipc(tmp_path, "lanetest")
    yield srv
    srv.stop()


def stats(srv: ShardServer) -> dict[str, int]:
    assert srv.fastlane is not None
    return srv.fastlane.stats()


def pushes(seed: int, n: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (ids := rng.integers(0, ROWS, 300 + 400 * k), rng.standard_normal((len(ids), DIM)).astype(np.float32))
        for k in range(n)
    ]


def test_the_lane_listens_beside_an_ipc_server_and_leaves_no_socket_file(tmp_path: Path) -> None:
    state = ShardTensors(0, use_shm=True, shm_prefix=f"gt-lanetest-{os.getpid()}")
    stale = tmp_path / "shard-0.sock.lane"
    stale.write_bytes(b"left by a killed server")
    srv = ShardServer(state, TOKEN, f"ipc://{tmp_path}/shard-0.sock", workers=1)
    srv.start()
    try:
        assert srv.fastlane is not None and srv.fastlane.path == str(stale) and srv.fastlane.port == 0
        client = kvstore.connect([srv.address], TOKEN, timeout=10)
        health = client.health()[0]
        assert (health["fast_port"], health["fast_path"], health["fast_version"]) == (0, str(stale), 3)
        client.close()
    finally:
        srv.stop()
    assert not stale.exists()
    assert unix_path_of("ipc://relative/path") is None and unix_path_of("tcp://127.0.0.1:0") is None
    assert unix_path_of("ipc:///" + "d" * 120) is None  # longer than a Unix socket's path


@pytest.mark.parametrize(
    ("dtype", "optimizer"),
    [
        ("float32", {"kind": "adam", "lr": 0.01, "step_count": "global"}),
        ("float32", {"kind": "adagrad", "lr": 0.05, "duplicate": "mean"}),
        ("float32", {"kind": "sgd", "lr": 0.1}),
        ("bfloat16", {"kind": "adam", "lr": 0.01}),
        ("float16", {"kind": "rowwise_adagrad", "lr": 0.05}),
    ],
    ids=lambda v: v if isinstance(v, str) else v["kind"],
)
def test_pushes_from_shared_memory_leave_the_zmq_paths_rows_and_state(
    tmp_path: Path, dtype: str, optimizer: dict
) -> None:
    """Two servers alike but for the lane (a half table's rounding seeds come from its name and rows:
    both tables are "t")."""
    servers = [ipc(tmp_path, "lanetest"), ipc(tmp_path, "zmqtest", fast_port=-1)]
    fast, slow = (kvstore.connect([srv.address], TOKEN, timeout=10, shm=True) for srv in servers)
    try:
        for c in (fast, slow):
            c.create("t", ROWS, (DIM,), dtype, BOUNDS, {"kind": "uniform", "seed": 4})
            c.set_optimizer("t", optimizer)
        mean = optimizer.get("duplicate") == "mean"
        for step, (ids, grads) in enumerate(pushes(1), start=1):
            wait = step % 2 == 0  # wait=False too: the next call collects the answer
            for c in (fast, slow):
                c.push_grad("t", ids, grads, BOUNDS, mean, step=step, wait=wait)
        for c in (fast, slow):
            c.transport.settle()
        a, b = (srv.state.tensors["t"] for srv in servers)
        assert torch.equal(a.data, b.data)
        assert a.state.keys() == b.state.keys() and all(torch.equal(a.state[k], b.state[k]) for k in a.state)
        assert stats(servers[0])["pushes_ok"] == 5 and stats(servers[0])["rows_pushed"] > 0  # all on the lane
        assert servers[1].fastlane is None
    finally:
        fast.close()
        slow.close()
        for srv in servers:
            srv.stop()


def test_a_nonfinite_push_from_shared_memory_is_refused_in_the_zmq_paths_words(
    ipc_server: ShardServer,
) -> None:
    srv = ipc_server
    fast = kvstore.connect([srv.address], TOKEN, timeout=10, shm=True)
    slow = kvstore.connect([srv.address], TOKEN, timeout=10, shm=True, fast=False)
    try:
        fast.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "uniform", "seed": 4})
        fast.set_optimizer("t", {"kind": "adam", "lr": 0.01, "step_count": "global"})
        before = srv.state.tensors["t"].data.clone()
        ids = np.array([5, 9, 11], dtype=np.int64)
        grads = np.ones((3, DIM), np.float32)
        grads[1, 3] = np.inf
        words = []
        for c in (fast, slow):
            with pytest.raises(protocol.RemoteError) as err:
                c.push_grad("t", ids, grads, BOUNDS, False, step=1)
            words.append(str(err.value).split("refused push_grad: ", 1)[1])
        nan = "push_grad of 't': 1 gradient row(s) hold NaN or infinity (first id 9); no row was updated"
        assert words == [nan, nan]
        assert stats(srv)["errors"] == 1  # refused on the lane, not left to ZMQ
        assert torch.equal(before, srv.state.tensors["t"].data)
    finally:
        fast.close()
        slow.close()


def lane(srv: ShardServer, version: int = fastwire.VERSION) -> socket.socket:
    """An authenticated raw connection to the server's Unix-socket lane."""
    assert srv.fastlane is not None and srv.fastlane.path is not None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(srv.fastlane.path)
    sock.sendall(fastwire.hello(TOKEN.encode(), version))
    assert fastwire.HELLO_REPLY.unpack(recv_exactly(sock, 8)) == (fastwire.HELLO_MAGIC, 0)
    return sock


def shared_push(sock: socket.socket, rid: int, buffer: str, offset: int, ids: list[int]) -> tuple[int, bytes]:
    head = fastwire.shared_push_request(rid, b"t", len(ids), F32, buffer.encode(), offset, None)  # type: ignore[arg-type]
    sock.sendall(head + np.array(ids, np.int64).tobytes())
    _, status, got, nbytes = fastwire.REPLY.unpack(recv_exactly(sock, fastwire.REPLY.size))
    assert got == rid
    return status, recv_exactly(sock, nbytes)


def test_a_buffer_the_lane_cannot_read_answers_busy_and_a_name_made_again_is_read_anew(
    ipc_server: ShardServer,
) -> None:
    srv = ipc_server
    client = kvstore.connect([srv.address], TOKEN, timeout=10)
    client.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
    client.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
    client.close()
    prefix = srv.state.shm_prefix
    mine = f"{prefix}-push-{os.getpid()}-lanetest"
    other = f"gt-otherjob-push-{os.getpid()}-lanetest"
    segs = [shared_memory.SharedMemory(name=n, create=True, size=4096) for n in (mine, other)]
    try:
        for seg in segs:
            np.ndarray((4096 // 4,), np.float32, buffer=seg.buf)[:] = 1.0
        sock = lane(srv)
        t = srv.state.tensors["t"].data
        # not this job's, a path, gone, rows past the end, a misaligned offset: busy, nothing applied
        for rid, (buffer, offset, ids) in enumerate(
            [
                (other, 0, [1]),
                (f"../{mine}", 0, [1]),
                (f"{prefix}-push-{os.getpid()}-gone", 0, [1]),
                (mine, 4096 - 64, [1, 2]),
                (mine, 2, [1]),
                (mine, 1 << 40, [1]),
            ],
            start=1,
        ):
            status, said = shared_push(sock, rid, buffer, offset, ids)
            assert status == fastwire.BUSY, said
        assert not t.any()
        status, said = shared_push(sock, 10, mine, 64, [3, 7])  # rows 1 and 2 of the buffer
        assert status == fastwire.OK and np.frombuffer(said, np.int64)[0] == 2
        assert torch.equal(t[3], -torch.ones(DIM)) and torch.equal(t[7], -torch.ones(DIM))
        # the name unlinked and created again (another file, twice the ones): read as the new file
        segs[0].close()
        segs[0].unlink()
        segs[0] = shared_memory.SharedMemory(name=mine, create=True, size=4096)
        np.ndarray((4096 // 4,), np.float32, buffer=segs[0].buf)[:] = 2.0
        status, _ = shared_push(sock, 11, mine, 0, [3])
        assert status == fastwire.OK and torch.equal(t[3], -3 * torch.ones(DIM))
        # a FIFO named as a buffer: answered at once ("busy"), the lane not blocked in its open
        fifo = Path("/dev/shm") / f"{prefix}-push-{os.getpid()}-fifo"
        os.mkfifo(fifo)
        try:
            status, _ = shared_push(sock, 12, fifo.name, 0, [3])
            assert status == fastwire.BUSY
        finally:
            fifo.unlink()
        # a buffer its client unlinked is unmapped when the lane maps another
        gone = shared_memory.SharedMemory(name=f"{prefix}-push-{os.getpid()}-gone2", create=True, size=4096)
        assert shared_push(sock, 13, gone.name, 0, [5])[0] == fastwire.OK
        assert gone.name in Path("/proc/self/maps").read_text()  # the lane's mapping (this process)
        gone.close()
        gone.unlink()
        segs.append(
            shared_memory.SharedMemory(name=f"{prefix}-push-{os.getpid()}-new", create=True, size=4096)
        )
        assert shared_push(sock, 14, segs[-1].name, 0, [5])[0] == fastwire.OK
        assert gone.name not in Path("/proc/self/maps").read_text()
        sock.close()
        old = lane(srv, version=2)  # a peer of version 2 has no op 5: its connection is closed
        old.sendall(fastwire.shared_push_request(15, b"t", 1, F32, mine.encode(), 0, None) + bytes(8))  # type: ignore[arg-type]
        assert closed(old)
        old.close()
        assert stats(srv)["malformed"] == 1
    finally:
        for seg in segs:
            seg.close()
            seg.unlink()


def test_a_push_from_shared_memory_steps_at_most_a_turns_work_alone_or_in_a_batch(
    ipc_server: ShardServer,
) -> None:
    """At most fastwire.MAX_SHARED_BYTES of gradients (what a connection's turn of pulls may cost): a
    bigger push answers "busy" (the client sends it over ZMQ, applied once), and so does the push of a
    batch that takes its pushes together past it."""
    srv = ipc_server
    wide, rows = 512, fastwire.MAX_SHARED_BYTES // (512 * 4)  # 2 KiB rows: 2,048 of them fill the bound
    client = kvstore.connect([srv.address], TOKEN, timeout=10, shm=True)
    client.create("w", ROWS, (wide,), "float32", BOUNDS, {"kind": "zeros"})
    client.set_optimizer("w", {"kind": "sgd", "lr": 1.0})
    name = f"{srv.state.shm_prefix}-push-{os.getpid()}-wide"
    seg = shared_memory.SharedMemory(name=name, create=True, size=2 * fastwire.MAX_SHARED_BYTES)
    try:
        np.ndarray((seg.size // 4,), np.float32, buffer=seg.buf)[:] = 1.0
        typ = fastwire.row_type(np.dtype(np.float32), (wide,))
        assert typ is not None

        def request(rid: int, n: int) -> bytes:
            head = fastwire.shared_push_request(rid, b"w", n, typ, name.encode(), 0, None)
            return head + np.arange(n, dtype=np.int64).tobytes()

        sock = lane(srv)
        sock.sendall(request(1, rows + 1))
        _, status, _, nbytes = fastwire.REPLY.unpack(recv_exactly(sock, fastwire.REPLY.size))
        said = recv_exactly(sock, nbytes).decode()
        assert (status, said) == (fastwire.BUSY, "the push is larger than the fast lane steps")
        assert not srv.state.tensors["w"].data.any()
        sock.sendall(request(2, rows))  # the bound itself is stepped
        _, status, _, nbytes = fastwire.REPLY.unpack(recv_exactly(sock, fastwire.REPLY.size))
        assert status == fastwire.OK and np.frombuffer(recv_exactly(sock, nbytes), np.int64)[0] == rows
        assert torch.equal(srv.state.tensors["w"].data[:rows], -torch.ones(rows, wide))
        half = [request(3, rows // 2 + 1), request(4, rows // 2)]  # one row past the bound together
        sock.sendall(fastwire.batch_request(5, 2, sum(map(len, half))) + b"".join(half))
        _, status, _, nbytes = fastwire.REPLY.unpack(recv_exactly(sock, fastwire.REPLY.size))
        replies = recv_exactly(sock, nbytes)
        first = fastwire.REPLY.unpack(replies[: fastwire.REPLY.size])
        second = fastwire.REPLY.unpack(replies[fastwire.REPLY.size + first[3] :][: fastwire.REPLY.size])
        assert (status, first[1], second[1]) == (fastwire.OK, fastwire.OK, fastwire.BUSY)
        sock.close()
        w = srv.state.tensors["w"].data
        assert torch.equal(w[: rows // 2 + 1], -2 * torch.ones(rows // 2 + 1, wide))  # the first one only
        assert torch.equal(w[rows // 2 + 1 : rows], -torch.ones(rows - rows // 2 - 1, wide))
        # through the client: a push past the bound goes over ZMQ, applied once
        before = stats(srv)["pushes_ok"]
        ids = np.arange(rows + 1, dtype=np.int64)
        client.push_grad("w", ids, np.ones((len(ids), wide), np.float32), BOUNDS, False)
        assert torch.equal(w[: rows // 2 + 1], -3 * torch.ones(rows // 2 + 1, wide))
        assert torch.equal(w[rows // 2 + 1 : rows], -2 * torch.ones(rows - rows // 2 - 1, wide))
        assert torch.equal(w[rows], -torch.ones(wide))
        assert stats(srv)["pushes_ok"] == before
    finally:
        client.close()
        seg.close()
        seg.unlink()


def test_the_zmq_paths_buffers_are_checked_against_their_file_as_the_lanes(ipc_server: ShardServer) -> None:
    """A push the lane answers "busy" goes over ZMQ, which maps the same buffer: a name unlinked and made
    again (a reused pid's client) is read there as the new file too, not from the old one's memory."""
    srv = ipc_server
    client = kvstore.connect([srv.address], TOKEN, timeout=10, shm=True, fast=False)
    try:
        client.create("t", ROWS, (DIM,), "float32", BOUNDS, {"kind": "zeros"})
        client.set_optimizer("t", {"kind": "sgd", "lr": 1.0})
        name = f"{srv.state.shm_prefix}-push-{os.getpid()}-zmq"
        for value in (1.0, 2.0):  # the same name, another file the second time
            seg = shared_memory.SharedMemory(name=name, create=True, size=4096)
            np.ndarray((1024,), np.float32, buffer=seg.buf)[:] = value
            call = Call(0, "push_grad", "t", [np.array([3], np.int64)], {"shm": {"name": name, "offset": 0}})
            client.transport.call_many([call])
            seg.close()
            seg.unlink()
        assert torch.equal(srv.state.tensors["t"].data[3], -3 * torch.ones(DIM))
    finally:
        client.close()
