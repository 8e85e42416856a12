"""A shard server under attack (issue 14): unauthenticated peers, peers that claim huge frames, clients
that stop reading, and a participant that gives up on a barrier. Each test reproduces one finding of
the issue against real server processes and asserts what must hold: the server keeps answering, its
memory stays bounded, other clients are served. (Latency ratios under attack: bench/attack.py.)"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.client.transport import KVAuthError
from graphtrain.runtime.kvstore.wire import protocol
from graphtrain.runtime.kvstore.wire.protocol import RemoteError
from tests.runtime.conftest import TOKEN, dealer, rss, segments_of, servers

MB = 1 << 20


def v1_request(op: object, payload: list | None = None, token: str = "guess", **fields) -> list[bytes]:
    """A request as the previous protocol (v1, token in every header) framed it: what an attacker
    who read the old code would send."""
    head = {"v": 1, "op": op, "rid": 7, "token": token, "name": "emb", "frames": [], "args": {}, **fields}
    return [msgpack.packb(head, use_bin_type=True), *(payload or [])]


# The four unauthenticated messages that each ended a worker thread of the previous server.
DEAFENING = [
    v1_request(["pull"]),  # op as a list: unhashable
    v1_request("pull", [b"\0" * 8], frames=[[["int64"], [1]]]),  # a list as a frame dtype
    v1_request("pull", [b"\0" * 8], frames=[["int64", [True]]]),  # a bool in a shape
    v1_request("pull", [b""], frames=[["int64", [2**32, 2**32]]]),  # a shape whose product wraps to 0
]


def table(client, rows: int = 1000, dim: int = 8) -> np.ndarray:
    bounds = np.array([0, rows])
    client.create("emb", rows, (dim,), "float32", bounds, {"kind": "uniform", "seed": 1})
    return bounds


@pytest.mark.timeout(120)
@pytest.mark.parametrize("credentials", [None, "guess"], ids=["no-token", "wrong-token"])
def test_unauthenticated_messages_do_not_deafen_the_server(ckroot: Path, credentials: str | None) -> None:
    """Finding 1: four such messages per worker left the process alive, answering nothing."""
    with servers(1, ckroot) as srv:
        attacker = dealer(srv[0].address, credentials)
        for _ in range(3):
            for msg in DEAFENING:
                attacker.send_multipart(msg)
        time.sleep(1.0)
        assert not attacker.poll(100), "an unauthenticated peer got an answer"
        client = kvstore.connect([srv[0].address], TOKEN, timeout=5, retries=0)
        bounds = table(client)
        assert client.pull("emb", np.arange(10), bounds, (8,), np.float32).shape == (10, 8)
        assert client.health()[0]["live"] is True
        attacker.close(linger=0)
        client.close()


@pytest.mark.timeout(60)
def test_a_wrong_token_is_reported_at_once(ckroot: Path) -> None:
    with servers(1, ckroot) as srv:
        client = kvstore.connect([srv[0].address], "not-the-token", timeout=20, retries=0)
        # the handshake's failure (KVAuthError), not the 20 s timeout (KVTimeout): no clock needed
        with pytest.raises(KVAuthError, match=r"shard 0 \(tcp://127.0.0.1:\d+\) refused this client's token"):
            client.health()
        client.close()


def zmtp_greeting(mechanism: bytes = b"PLAIN") -> bytes:
    """A ZMTP 3.0 greeting (RFC 23): signature, version, mechanism, as-server, filler."""
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\0") + b"\0" + b"\0" * 31


def claim(size: int) -> bytes:
    """A long command frame's header claiming `size` bytes (the handshake's first command)."""
    return b"\x06" + struct.pack(">Q", size)


def hostile_peer(port: int, claimed: int, sent: int, hold: float, stop: threading.Event) -> None:
    """A raw TCP peer: greeting, a frame that claims `claimed` bytes, `sent` bytes of garbage, then it
    holds the connection open (without ever authenticating) until `hold` seconds or `stop`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(zmtp_greeting() + claim(claimed))
            chunk = b"\xab" * 65536
            left = sent
            while left > 0 and not stop.is_set():
                s.sendall(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
            stop.wait(hold)
    except OSError:
        pass  # the server closed it: what it should do with an over-limit claim


def rss_peak(pid: int, stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        out.append(rss(pid))
        time.sleep(0.02)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("claimed", "sent"),
    [(1 << 30, 4 * MB), (protocol.MAX_FRAME_BYTES, protocol.MAX_FRAME_BYTES - 1)],
    ids=["claims-1GiB", "claims-the-frame-limit"],
)
def test_unauthenticated_peers_cost_bounded_memory(ckroot: Path, claimed: int, sent: int) -> None:
    """Finding 2 and the acceptance bound: 100 peers that never authenticate, each claiming a huge frame
    and sending garbage (or claiming the most a frame may hold and sending all of it but a byte), grow
    the server by less than 64 MB, and a good client's 1,000-row pulls keep succeeding meanwhile."""
    with servers(1, ckroot) as srv:
        pid, port = srv[0].proc.pid, int(srv[0].address.rsplit(":", 1)[1])
        client = kvstore.connect([srv[0].address], TOKEN, timeout=10, retries=0)
        bounds = table(client, 100_000, 128)
        ids = np.arange(1000)
        for _ in range(50):  # warm: chunk buffers and the allocator reach their steady state
            client.pull("emb", ids, bounds, (128,), np.float32)
        base = rss(pid)
        stop, samples = threading.Event(), []
        watcher = threading.Thread(target=rss_peak, args=(pid, stop, samples))
        watcher.start()
        peers = [
            threading.Thread(target=hostile_peer, args=(port, claimed, sent, 8.0, stop)) for _ in range(100)
        ]
        for p in peers:
            p.start()
        deadline = time.monotonic() + 6.0
        pulls = 0
        while time.monotonic() < deadline:
            client.pull("emb", ids, bounds, (128,), np.float32)  # raises if the server stops answering
            pulls += 1
        stop.set()
        for p in peers:
            p.join(timeout=15)
        watcher.join(timeout=5)
        growth = max(samples) - base
        assert growth < 64 * MB, f"RSS grew by {growth / MB:.1f} MB"
        assert pulls > 20
        assert client.health()[0]["live"]
        client.close()


@pytest.mark.timeout(180)
def test_floods_of_unread_replies_are_bounded(ckroot: Path) -> None:
    """Finding 2: 40,000 wrong-token requests with 60 KB names whose error replies were never read grew
    the server by 3.3 GB. Unauthenticated, nothing is delivered (the connection never completes its
    handshake); authenticated, a peer that floods and never reads is dropped once its backlog passes
    the bound, and what it sent never costs the server more than that bound."""
    big_name = "x" * 60_000
    with servers(1, ckroot, "--metrics-port", "0") as srv:
        pid = srv[0].proc.pid
        client = kvstore.connect([srv[0].address], TOKEN, timeout=10, retries=0)
        table(client)
        base = rss(pid)
        unauthenticated = v1_request("pull", token="guess", name=big_name)  # as the old protocol had it
        authenticated = [msgpack.packb({"v": 2, "op": "pull", "rid": 1, "name": big_name})]
        for credentials, msg in ((None, unauthenticated), (TOKEN, authenticated)):
            flood = dealer(srv[0].address, credentials, RCVHWM=1, SNDHWM=0)
            for _ in range(5000):
                with contextlib.suppress(zmq.Again):  # queued here at most: nothing reaches the server
                    flood.send_multipart(msg, zmq.NOBLOCK)
            time.sleep(3.0)
            growth = rss(pid) - base
            assert growth < 64 * MB, f"{credentials}: RSS grew by {growth / MB:.1f} MB"
            assert client.health()[0]["live"]
            flood.close(linger=0)
        tiny = dealer(srv[0].address, TOKEN, RCVHWM=1, RCVBUF=4096, SNDHWM=0)
        # more small error replies than the socket buffers hold: each is ~65 bytes on the wire, and
        # Linux grows a socket's send buffer up to tcp_wmem's maximum (4 MiB by default), which alone
        # holds ~64,000 of them (50,000 fitted there on a CI run, and nothing was ever dropped)
        for _ in range(200_000):
            tiny.send_multipart([b"\xc1"], zmq.NOBLOCK)
        # the server works through them at its own pace (a loaded machine: longer than 3 s), so wait,
        # bounded, until it has dropped the peer for its backlog
        dropped = 'graphtrain_kvstore_dropped_peers_total{reason="backlog"'
        wait_metrics(srv[0].metrics_port, dropped, 60)
        # then what the peer still sends is turned away, counted as the server reads it: maybe after
        # the scrape that saw the drop (a CI run's, under load), so that is waited for too
        turned_away = 'graphtrain_kvstore_rejected_requests_total{reason="dropped"'
        seen = wait_metrics(srv[0].metrics_port, turned_away, 60)
        assert rss(pid) - base < 64 * MB
        tiny.close(linger=0)
        assert seen['graphtrain_kvstore_handshakes_total{result="failed",shard="0"}'] >= 1
        assert seen['graphtrain_kvstore_rejected_requests_total{reason="malformed",shard="0"}'] >= 256
        assert seen['graphtrain_kvstore_dropped_peers_total{reason="backlog",shard="0"}'] >= 1
        assert seen['graphtrain_kvstore_rejected_requests_total{reason="dropped",shard="0"}'] >= 1
        client.close()


def wait_metrics(port: int, prefix: str, timeout: float) -> dict[str, float]:
    """The server's metrics once a sample whose name starts with `prefix` is at least 1, polled every
    0.2 s for at most `timeout` seconds (then the last scrape, for the test's own assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = metrics(port)
        if any(k.startswith(prefix) and v >= 1 for k, v in seen.items()) or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


def metrics(port: int) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        k: float(v)
        for k, _, v in (line.rpartition(" ") for line in text.splitlines() if not line.startswith("#"))
    }


def stuck_pull(address: str, rows: int) -> zmq.Socket:
    """An authenticated client that asks for a whole table and never reads: a pipe of one message and
    a small kernel buffer, so the server's sends back up at once."""
    sock = dealer(address, TOKEN, RCVHWM=1, RCVBUF=4096)
    ids = protocol.split_rows(np.arange(rows, dtype=np.int64))
    sock.send_multipart(protocol.encode_request("pull", 1, "emb", ids), copy=False)
    return sock


@pytest.mark.timeout(120)
def test_a_flood_of_small_pulls_never_read_is_bounded_and_dropped(ckroot: Path) -> None:
    """Small pulls are answered on the I/O thread (inline.py), past the per-peer queue's bound: a peer
    that sends thousands and reads none holds at most its outbox backlog, is dropped as such, and a
    good client is served throughout."""
    rows, dim = 20_000, 128  # a 64-row pull: 32 KB, answered inline
    with servers(1, ckroot, "--metrics-port", "0") as srv:
        pid = srv[0].proc.pid
        client = kvstore.connect([srv[0].address], TOKEN, timeout=10, retries=0)
        bounds = table(client, rows, dim)
        base = rss(pid)
        flood = dealer(srv[0].address, TOKEN, RCVHWM=1, RCVBUF=4096, SNDHWM=0)
        ids = protocol.split_rows(np.arange(64, dtype=np.int64))
        for rid in range(5000):
            with contextlib.suppress(zmq.Again):
                flood.send_multipart(
                    protocol.encode_request("pull", rid, "emb", ids), zmq.NOBLOCK, copy=False
                )
        want = client.pull("emb", np.arange(64), bounds, (dim,), np.float32)
        time.sleep(2.0)
        for _ in range(20):
            np.testing.assert_array_equal(client.pull("emb", np.arange(64), bounds, (dim,), np.float32), want)
        assert rss(pid) - base < 64 * MB
        assert client.health()[0]["live"]
        # dropped once ~450 replies wait (pipe, socket buffer, backlog): soon, but on a loaded machine
        # maybe after the 2 s above, so waited for, bounded
        seen = wait_metrics(
            srv[0].metrics_port, 'graphtrain_kvstore_dropped_peers_total{reason="backlog"', 60
        )
        assert seen['graphtrain_kvstore_dropped_peers_total{reason="backlog",shard="0"}'] >= 1
        flood.close(linger=0)
        client.close()


@pytest.mark.timeout(240)
def test_clients_that_stop_reading_do_not_stall_the_others(ckroot: Path) -> None:
    """Finding 3: 4 whole-table pulls never read made every 1,000-row pull of a good client time out."""
    rows, dim = 200_000, 128  # 100 MB: 25 chunks per pull
    with servers(1, ckroot) as srv:
        client = kvstore.connect([srv[0].address], TOKEN, timeout=10, retries=0)
        bounds = table(client, rows, dim)
        stuck = [stuck_pull(srv[0].address, rows) for _ in range(4)]
        time.sleep(1.0)  # their streams are out and stuck
        ids = np.random.default_rng(0).integers(0, rows, 1000)
        expected = client.pull("emb", ids, bounds, (dim,), np.float32)
        for _ in range(100):
            assert np.array_equal(client.pull("emb", ids, bounds, (dim,), np.float32), expected)
        health = client.health()[0]
        assert health["live"]
        for s in stuck:
            s.close(linger=0)
        client.close()


@pytest.mark.timeout(120)
def test_a_participant_that_gave_up_is_not_counted_in_the_next_round(ckroot: Path) -> None:
    """Finding 10: the next round released one party at once and left the other to its timeout."""
    with servers(1, ckroot) as srv:
        a = kvstore.connect([srv[0].address], TOKEN, timeout=20, retries=0)
        b = kvstore.connect([srv[0].address], TOKEN, timeout=20, retries=0)
        with pytest.raises(RemoteError, match=r"barrier 'k' timed out: 1 of 2 participants arrived"):
            a.barrier("k", 2, timeout=1.0)
        done: dict[str, float] = {}

        def arrive(client, who: str) -> None:
            client.barrier("k", 2, timeout=10.0)
            done[who] = time.monotonic()

        first = threading.Thread(target=arrive, args=(a, "a"))
        first.start()
        time.sleep(0.5)
        assert "a" not in done, "the round was released before its second participant arrived"
        arrive(b, "b")
        first.join(timeout=15)
        assert set(done) == {"a", "b"}
        assert abs(done["a"] - done["b"]) < 2.0
        a.close()
        b.close()


@pytest.mark.timeout(120)
def test_a_failed_shared_memory_create_leaves_no_segment_and_names_its_cause(ckroot: Path) -> None:
    """Finding 5: a create that failed in restore leaked its segment, and every later create said only
    `internal error in create: FileExistsError`."""

    with servers(1, ckroot, "--shm") as srv:
        c = kvstore.connect([srv[0].address], TOKEN, timeout=20)
        bounds = np.array([0, 14])
        c.create("entity", 14, (128,), "float32", bounds, {"kind": "normal", "seed": 2})
        c.checkpoint("ck", root=ckroot)
        from graphtrain.runtime.checkpoint import mark_latest

        mark_latest(ckroot, "ck")
        c.shutdown()
        c.close()
    with servers(1, ckroot, "--shm", "--restore", "latest") as srv:
        c = kvstore.connect([srv[0].address], TOKEN, timeout=20, retries=0)
        for _ in range(2):  # the second try gets the same cause, not a leftover segment's name clash
            with pytest.raises(
                RemoteError, match=r"checkpoint of 'entity' is 14x\(128,\) float32, the table is 14x\(64,\)"
            ):
                c.create("entity", 14, (64,), "float32", bounds)
            assert not [f for f in segments_of([srv[0].proc.pid]) if f.endswith("-entity")]
        c.create("entity", 14, (128,), "float32", bounds)  # the right shape restores
        c.close()
