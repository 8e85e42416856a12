"""The pod runner's network: every pod in a network namespace of its own on a bridge of the runner's
own, and relays from inside each pod to the host's loopback (the API server, and egress).

Why: pods that shared the host's network (each its own 127.x.y.z) shared its ports too, and a server
binding every interface took its port from every pod of the machine. torch's TCPStore binds all
interfaces: a second training's rank 0 found port 29500 taken and its trainers joined the first
training's rendezvous. In a namespace of its own a pod has every port to itself, as on a cluster.

The layout (names and addresses from podnames.py):
- a block per runner: its addresses are 10.<block>.0.0/16 and its namespaces gtpr<block>-*. A runner
  holds its block by an exclusive flock on /run/graphtrain-podrunner/<block>.lock while it lives, and
  the kernel lets go of it when the process ends, however it ends: two runners never share a block,
  and the namespaces of a block that no one holds are a killed runner's leftovers, deleted at start.
- the hub: namespace gtpr<block>-hub holding the bridge br0 (10.<block>.0.1/16). Nothing is added to
  the host's namespace: no interface, no address, no route.
- a pod: namespace gtpr<block>-<seq> (seq counts the runner's admitted pods and is never reused, so a
  re-created pod never meets the namespace of the one still stopping under its name) with lo up and
  eth0 at 10.<block>.x.y/16, a veth pair whose other end is on the hub's bridge. Pods reach each other
  at their addresses, which the runner's hosts file names; each has every port, 0.0.0.0 included.
- the API server listens on the host's loopback, which a pod's namespace does not see. The runner
  listens on 127.0.0.1:<the server's port> inside each pod's namespace and relays every connection to
  the server's address on the host's loopback, so KUBERNETES_SERVICE_HOST=localhost (the name on the
  server's certificate), the port, the token and the CA stay what they were, and nothing listens on a
  host address. How a socket gets into a namespace: a short-lived thread enters it (setns through
  ctypes: a thread's network namespace is its own), makes and binds the socket, and ends; a socket
  stays in the namespace it was made in, so the runner's other threads accept and relay on it from the
  host's namespace. No process per pod and no thread of the runner left in a pod's namespace.
- egress: a pod's namespace has no route out (no NAT without iptables). An HTTP proxy listening the
  same way on the pod's 127.0.0.1 connects out from the host's namespace (CONNECT for https, absolute
  URLs for http; never to a loopback address of the host), and every container gets HTTP(S)_PROXY and
  a NO_PROXY of the loopback, the block and the cluster's names (podnames.egress_env): a partition pod
  downloads its dataset (pip, urllib) as on a cluster with egress.
- probes: the kubelet probes a pod from its node; here a probe thread enters the hub's namespace for
  its life and connects to the pod's address through the bridge.
Every relayed connection closes after IDLE silent seconds or when either side closes; the runner
closes the rest when it stops.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from tests.podrunner import podnames

NETNS_DIR = Path("/run/netns")  # where `ip netns` keeps its namespaces
LOCK_DIR = Path("/run/graphtrain-podrunner")
CLONE_NEWNET = 0x40000000
IDLE = 300.0  # seconds a relayed connection may stay silent
CONNECT_TIMEOUT = 30.0
HEAD_LIMIT = 65536  # bytes of a proxy request's head
ACCEPT_POLL = 0.5  # seconds between two looks at the stop flag while accepting

_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def enter(netns: Path) -> None:
    """Move the calling thread, and only it, into a network namespace (what it creates, sockets and
    child processes, is created there)."""
    fd = os.open(netns, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(netns: Path, fn: Callable[[], T], timeout: float = 30) -> T:
    """fn() on a thread that enters a network namespace first and ends after: what fn creates (a
    socket) is created there, and the caller's thread stays where it is."""
    out: list[T] = []
    error: list[BaseException] = []

    def call() -> None:
        try:
            enter(netns)
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
            error.append(exc)

    thread = threading.Thread(target=call, name="podrunner-netns", daemon=True)
    thread.start()
    thread.join(timeout=timeout)
    if error:
        raise error[0]
    if not out:
        raise OSError(f"nothing from {netns} after {timeout:.0f} s")
    return out[0]


def listen_in(netns: Path, host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port inside a network namespace (run_in)."""

    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        return sock

    return run_in(netns, make)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


def claim_block(lock_dir: Path = LOCK_DIR, blocks: range = podnames.BLOCKS) -> tuple[int, int]:
    """The lowest block no live runner holds, and the descriptor of its lock (held until closed or
    until this process ends)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    for block in blocks:
        fd = os.open(lock_dir / f"{block}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return block, fd
    raise RuntimeError(f"every block of {blocks} is held by a pod runner ({lock_dir})")


def stale_namespaces(own: int, lock_dir: Path = LOCK_DIR, netns_dir: Path = NETNS_DIR) -> list[str]:
    """Pod runners' namespaces that no live runner holds: those of this runner's block `own` (just
    claimed, so any there are a dead runner's) and of every block whose lock is free."""
    names = sorted(p.name for p in netns_dir.iterdir()) if netns_dir.is_dir() else []
    blocks = {b for n in names if (b := podnames.netns_block(n)) is not None}
    free = {own}
    for block in blocks - {own}:
        fd = os.open(lock_dir / f"{block}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released below, with the descriptor
            free.add(block)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return [n for n in names if podnames.netns_block(n) in free]


def proxy_request(head: bytes) -> tuple[str, int, bytes | None]:
    """(host, port, what to send there first) of a proxy request's head (without its blank line):
    CONNECT host:port gives None (answer 200, then relay); an absolute http URL gives its request in
    origin form (the path), without Proxy-* headers and with Connection: close, so that a client's
    next request, perhaps for another host, comes on a new connection. ValueError for anything else."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return host.strip("[]"), int(port), None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"not a proxy request: {lines[0]!r}")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [h for h in lines[1:] if not h.lower().startswith(("proxy-", "connection:"))]
    text = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close"])
    return url.hostname, url.port or 80, text.encode("latin-1")


def _outside(host: str, port: int) -> socket.socket:
    """A connection from the host's namespace to host:port, refused for a loopback address (egress
    reaches out, never the host's own servers)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host} has no address")
    for _, _, _, _, addr in infos:
        where = ipaddress.ip_address(addr[0])
        if where.is_loopback or where.is_unspecified:  # 0.0.0.0 reaches the host's loopback too
            raise OSError(f"{host} is a loopback address of the host")
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(addr)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class PodNet:
    """A pod's namespace: its name, address, and the runner's sockets listening inside it."""

    seq: int
    name: str
    ip: str
    proxy_port: int = 0
    listeners: list[socket.socket] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name


class Network:
    """The runner's block, hub and pod namespaces, and the relays into them (the module's docstring)."""

    def __init__(self, api: tuple[str, int]):
        self.api = api  # the API server's address on the host's loopback
        self.block = -1
        self.hub = ""
        self.stale: list[str] = []  # namespaces of dead runners deleted at start
        self._lock_fd: int | None = None
        self._pods: dict[int, PodNet] = {}
        self._conns: set[socket.socket] = set()
        self._mutex = threading.Lock()
        self._closed = threading.Event()

    def open(self) -> None:
        self.block, self._lock_fd = claim_block()
        self.stale = stale_namespaces(self.block)
        for name in self.stale:
            ip("netns", "delete", name, check=False)
        self.hub = podnames.hub_netns(self.block)
        ip("netns", "add", self.hub)
        ip("-n", self.hub, "link", "set", "lo", "up")
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "addr", "add", f"{podnames.hub_address(self.block)}/16", "dev", "br0")
        ip("-n", self.hub, "link", "set", "br0", "up")

    def add(self, seq: int) -> PodNet:
        """Pod number `seq`'s namespace on the bridge, with the API server's relay and the egress
        proxy listening inside it."""
        pod = PodNet(seq, podnames.pod_netns(self.block, seq), podnames.pod_address(self.block, seq))
        ip("netns", "add", pod.name)
        with self._mutex:
            self._pods[seq] = pod
        veth = f"v{seq}"
        ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod.name)
        ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
        ip("-n", pod.name, "addr", "add", f"{pod.ip}/16", "dev", "eth0")
        ip("-n", pod.name, "link", "set", "eth0", "up")
        ip("-n", pod.name, "link", "set", "lo", "up")
        api = listen_in(pod.path, "127.0.0.1", self.api[1])
        pod.listeners.append(api)
        proxy = listen_in(pod.path, "127.0.0.1", 0)
        pod.listeners.append(proxy)
        pod.proxy_port = proxy.getsockname()[1]
        self._serve(api, self._relay_api)
        self._serve(proxy, self._relay_proxy)
        return pod

    def remove(self, pod: PodNet) -> None:
        """Stop listening in a pod's namespace and delete it (its veth pair goes with it)."""
        with self._mutex:
            self._pods.pop(pod.seq, None)
        for sock in pod.listeners:
            sock.close()
        ip("netns", "delete", pod.name, check=False)

    def close(self) -> None:
        """Every pod's namespace, the hub and the open relays gone, the block let go."""
        self._closed.set()
        with self._mutex:
            pods, conns = list(self._pods.values()), list(self._conns)
        for pod in pods:
            self.remove(pod)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self.hub:
            ip("netns", "delete", self.hub, check=False)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def enter_hub(self) -> None:
        """The calling thread into the hub's namespace (a probe thread, for its life)."""
        enter(NETNS_DIR / self.hub)

    # ---------------------------------------------------------------------------------- relays

    def _serve(self, listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
        def accept() -> None:
            listener.settimeout(ACCEPT_POLL)
            while not self._closed.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:  # closed: the pod is gone
                    return
                conn.settimeout(IDLE)
                threading.Thread(target=self._guarded, args=(handle, conn), daemon=True).start()

        threading.Thread(target=accept, name="podrunner-relay", daemon=True).start()

    def _guarded(self, handle: Callable[[socket.socket], None], conn: socket.socket) -> None:
        self._track(conn)
        try:
            handle(conn)
        except (OSError, ValueError):
            pass
        finally:
            self._untrack(conn)
            conn.close()

    def _relay_api(self, conn: socket.socket) -> None:
        server = socket.create_connection(self.api, timeout=CONNECT_TIMEOUT)
        self._splice(conn, server, b"")

    def _relay_proxy(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk or len(head) > HEAD_LIMIT:
                return
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        try:
            host, port, first = proxy_request(head)
            remote = _outside(host, port)
        except (OSError, ValueError):
            conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        if first is None:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self._splice(conn, remote, rest)
        else:
            self._splice(conn, remote, first + b"\r\n\r\n" + rest)

    def _splice(self, pod_side: socket.socket, other: socket.socket, first: bytes) -> None:
        """Relay both ways until both sides have closed (or IDLE silent seconds), sending `first` to
        `other` before anything else."""
        other.settimeout(IDLE)
        self._track(other)
        try:
            if first:
                other.sendall(first)
            back = threading.Thread(target=_pump, args=(other, pod_side), daemon=True)
            back.start()
            _pump(pod_side, other)
            back.join(timeout=IDLE)
        finally:
            self._untrack(other)
            other.close()

    def _track(self, sock: socket.socket) -> None:
        with self._mutex:
            self._conns.add(sock)
        if self._closed.is_set():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _untrack(self, sock: socket.socket) -> None:
        with self._mutex:
            self._conns.discard(sock)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until src ends (or stays silent IDLE seconds), then end dst's writing side."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
