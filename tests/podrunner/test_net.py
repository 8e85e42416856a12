"""The runner's network (net.py): blocks held by a lock, stale namespaces found, proxy requests read,
and, as root with iproute2, real namespaces: two pods on one port, reaching each other and the
API server's stand-in on the host's loopback, all of it gone after close."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.podrunner import net, podnames

BLOCKS = range(podnames.BLOCKS[0], podnames.BLOCKS[0] + 3)


def test_blocks_are_held_by_one_runner_until_it_lets_go(tmp_path: Path) -> None:
    first, fd1 = net.claim_block(tmp_path, BLOCKS)
    second, fd2 = net.claim_block(tmp_path, BLOCKS)
    third, fd3 = net.claim_block(tmp_path, BLOCKS)
    assert [first, second, third] == list(BLOCKS)
    with pytest.raises(RuntimeError, match="every block"):
        net.claim_block(tmp_path, BLOCKS)
    os.close(fd2)  # that runner ended (the kernel lets go of the lock however it ends)
    again, fd = net.claim_block(tmp_path, BLOCKS)
    assert again == second
    for d in (fd1, fd3, fd):
        os.close(d)


def test_stale_namespaces_are_those_of_blocks_no_runner_holds(tmp_path: Path) -> None:
    locks, spaces = tmp_path / "locks", tmp_path / "netns"
    spaces.mkdir()
    a, b, c = BLOCKS
    for name in [
        podnames.hub_netns(a),
        podnames.pod_netns(a, 3),
        podnames.hub_netns(b),
        podnames.pod_netns(c, 0),
    ]:
        (spaces / name).touch()
    (spaces / "someone-elses").touch()
    own, fd_own = net.claim_block(locks, range(a, a + 1))  # this runner: a (its leftovers are stale)
    live, fd_live = net.claim_block(locks, range(b, b + 1))  # a live runner: b
    stale = net.stale_namespaces(own, locks, spaces)
    assert stale == sorted([podnames.hub_netns(a), podnames.pod_netns(a, 3), podnames.pod_netns(c, 0)])
    # looking did not take c's lock for good
    taken, fd_c = net.claim_block(locks, range(c, c + 1))
    assert taken == c
    for d in (fd_own, fd_live, fd_c):
        os.close(d)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443", ("pypi.org", 443, None)),
        (b"CONNECT [2001:db8::1]:8443 HTTP/1.1", ("2001:db8::1", 8443, None)),
        (
            b"GET http://deb.debian.org/debian/pool/x.deb?a=1 HTTP/1.1\r\nHost: deb.debian.org\r\n"
            b"Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*",
            (
                "deb.debian.org",
                80,
                b"GET /debian/pool/x.deb?a=1 HTTP/1.1\r\nHost: deb.debian.org\r\nAccept: */*\r\n"
                b"Connection: close",
            ),
        ),
        (b"GET http://mirror:8080 HTTP/1.0", ("mirror", 8080, b"GET / HTTP/1.0\r\nConnection: close")),
    ],
)
def test_proxy_requests(head: bytes, expected: tuple) -> None:
    assert net.proxy_request(head) == expected


def test_a_request_that_is_not_for_a_proxy_is_refused() -> None:
    with pytest.raises(ValueError, match="not a proxy request"):
        net.proxy_request(b"GET /index.html HTTP/1.1\r\nHost: x")


# ---------------------------------------------------------------------------- real namespaces

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and iproute2"
)


@pytest.fixture
def api() -> Iterator[socket.socket]:
    """The API server's stand-in: a server on the host's loopback answering b'api:' + what it reads."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                conn.sendall(b"api:" + conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server
    stop.set()
    thread.join(timeout=10)
    server.close()


def connect_from(netns: Path, host: str, port: int, send: bytes = b"") -> bytes:
    """Connect to host:port from inside a namespace, send, and read the answer (b'' if none)."""

    def talk() -> bytes:
        with socket.create_connection((host, port), timeout=10) as sock:
            if send:
                sock.sendall(send)
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(100)

    return net.run_in(netns, talk)


def echo_once(listener: socket.socket, answer: bytes) -> threading.Thread:
    def serve() -> None:
        listener.settimeout(10)
        with contextlib.suppress(OSError), listener.accept()[0] as conn:
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@needs_root
def test_pods_in_namespaces_share_no_port_and_reach_each_other_and_the_api(api: socket.socket) -> None:
    network = net.Network(api.getsockname())
    network.open()
    try:
        a, b = network.add(0), network.add(1)
        assert (a.ip, b.ip) == (
            podnames.pod_address(network.block, 0),
            podnames.pod_address(network.block, 1),
        )
        # both pods bind every interface on the rendezvous port: the clash of issue 32 item 7
        rendezvous = [net.listen_in(p.path, "0.0.0.0", 29500) for p in (a, b)]  # noqa: S104 - in the pods
        served = [echo_once(r, name) for r, name in zip(rendezvous, (b"a", b"b"), strict=True)]
        assert connect_from(b.path, a.ip, 29500) == b"a"  # across the bridge
        assert connect_from(a.path, b.ip, 29500) == b"b"
        for t in served:
            t.join(timeout=10)
        # the API server on the host's loopback, at its own port on the pod's 127.0.0.1
        assert connect_from(a.path, "127.0.0.1", api.getsockname()[1], b"get") == b"api:get"
        # the hub (where the runner's probes come from) reaches a pod's address
        probe = net.listen_in(a.path, a.ip, 9090)
        echo_once(probe, b"ok")
        assert connect_from(net.NETNS_DIR / network.hub, a.ip, 9090) == b"ok"
        # egress never reaches the host's loopback
        answer = connect_from(a.path, "127.0.0.1", a.proxy_port, b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 502")
        for sock in [*rendezvous, probe]:
            sock.close()
        network.remove(a)
        assert not a.path.exists() and b.path.exists()
    finally:
        network.close()
    names = [p.name for p in net.NETNS_DIR.iterdir()] if net.NETNS_DIR.is_dir() else []
    assert not [n for n in names if podnames.netns_block(n) == network.block]


@needs_root
def test_a_killed_runners_namespaces_are_removed_by_the_next(api: socket.socket) -> None:
    block, fd = net.claim_block()
    stale = podnames.pod_netns(block, 7)
    net.ip("netns", "add", stale)
    os.close(fd)  # the runner was killed: its lock went with it, its namespace stayed
    network = net.Network(api.getsockname())
    try:
        network.open()
        assert stale in network.stale and not (net.NETNS_DIR / stale).exists()
    finally:
        network.close()
        net.ip("netns", "delete", stale, check=False)
