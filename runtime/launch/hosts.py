"""Several hosts on one machine, for tests and benchmarks: a local run whose processes are spread over
network namespaces joined by a bridge, with links shaped by tc, so the network between a trainer and
a remote shard costs what a network costs (issue 33: on 2 cores loopback is free and hides it).

The layout (names and addresses are pure, `HostLayout`):
- a block b (10.b.0.0/24, namespaces gth<b>-<k>, bridge gthbr<b>) held by an exclusive flock on
  /run/graphtrain-hosts/<b>.lock for the harness's life; what a block that no one holds still has is a
  killed harness's leftovers, deleted by the next harness to start;
- the bridge in this (the launcher's) namespace at 10.b.0.1, so the launcher reaches its servers;
- host k: namespace gth<b>-<k>, lo up, eth0 at 10.b.0.(k+2) on a veth whose other end is on the bridge;
- shaping: each host's eth0 sends at `rate` (tbf; netem with the one-way delay where asked and the
  kernel has it), and the bridge's end of its veth sends to it at the same rate: a host's NIC is `rate`
  each way (and a round trip between two hosts takes twice the delay). Traffic within a host (a
  trainer and its co-located shard) stays on that namespace's own stack, unshaped, as on a machine;
- a process on host k runs as `ip netns exec gth<b>-<k> unshare --uts` with host name gt-host-<k>: the
  shared-memory fast path keys on the host name (kvstore/shm.host_id), so it is taken within a host and
  never across, although /dev/shm is one file system.
Shard i runs on host i mod N, trainer r on host r mod N. Only the block's addresses are used.

Faults (bench/faults.py): a host's packet loss and a cut between two hosts are iptables rules in the
hosts' namespaces (`lossy`, `cut`; `apply` runs them), gone with the namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch.plan import ProcessPlan

LOCK_DIR = Path("/run/graphtrain-hosts")
NETNS_DIR = Path("/run/netns")
BLOCKS = range(200, 250)  # 10.<block>.0.0/24; the pod runner's blocks are below


@dataclass(frozen=True)
class Link:
    """A host's network link: its rate each way (tc units: 1gbit, 100mbit) and, where the kernel has
    netem, the one-way delay of what it sends (None: none added; this build VM's kernel has no netem,
    "Specified qdisc kind is unknown", so only the rate is shaped here, by tbf)."""

    rate: str = "1gbit"
    delay: str | None = None
    burst: str = "256kb"  # tbf's bucket: at 1 Gbit/s 2 ms of line rate

    def qdisc(self, delay: bool = True) -> list[str]:
        """The root qdisc of one end of the link: netem (delay and rate) when a delay is asked on this
        end, else tbf (rate)."""
        if delay and self.delay is not None:
            return ["netem", "delay", self.delay, "rate", self.rate, "limit", "100000"]
        return ["tbf", "rate", self.rate, "burst", self.burst, "latency", "50ms"]


@dataclass(frozen=True)
class HostLayout:
    """N simulated hosts in block `block`: their names, addresses and the commands that make them."""

    block: int
    count: int
    link: Link | None = Link()

    def namespace(self, k: int) -> str:
        return f"gth{self.block}-{k}"

    @property
    def bridge(self) -> str:
        return f"gthbr{self.block}"

    def veth(self, k: int) -> str:
        """The bridge's end of host k's link (interface names have at most 15 characters)."""
        return f"gth{self.block}v{k}"

    @property
    def hub(self) -> str:
        return f"10.{self.block}.0.1"

    def address(self, k: int) -> str:
        return f"10.{self.block}.0.{k + 2}"

    def hostname(self, k: int) -> str:
        return f"gt-host-{k}"

    def shard_host(self, index: int) -> int:
        return index % self.count

    def trainer_host(self, rank: int) -> int:
        return rank % self.count

    def bind(self, shard: int) -> str:
        """Shard `shard`'s socket: tcp on its host's address, a port it picks."""
        return f"tcp://{self.address(self.shard_host(shard))}:0"

    def rendezvous(self, port: int) -> str:
        return f"tcp://{self.address(self.trainer_host(0))}:{port}"

    def enter(self, k: int) -> list[str]:
        """The argv prefix that runs a command on host k (its namespace and its own host name)."""
        set_name = 'hostname "$0" && exec "$@"'
        # gloo binds the address its host name resolves to: gt-host-k resolves to nothing (a pod's name
        # resolves to its address), so it is told the interface, as one tells it on a multi-NIC host
        return [
            *("ip", "netns", "exec", self.namespace(k), "env", "GLOO_SOCKET_IFNAME=eth0"),
            *("unshare", "--uts", "sh", "-c", set_name),
        ]

    def on_host(self, p: ProcessPlan, k: int) -> ProcessPlan:
        return replace(p, argv=[*self.enter(k), self.hostname(k), *p.argv])

    def setup(self) -> list[list[str]]:
        """The commands that make the hosts, in order (run as root)."""
        cmds = [
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.hub}/24", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ]
        for k in range(self.count):
            ns, veth = self.namespace(k), self.veth(k)
            inside = ["ip", "-n", ns]
            cmds += [
                ["ip", "netns", "add", ns],
                ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                ["ip", "link", "set", veth, "master", self.bridge, "up"],
                [*inside, "link", "set", "lo", "up"],
                [*inside, "addr", "add", f"{self.address(k)}/24", "dev", "eth0"],
                [*inside, "link", "set", "eth0", "up"],
            ]
            if self.link is not None:
                cmds += [
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        "eth0",
                        "root",
                        *self.link.qdisc(),
                    ],
                    ["tc", "qdisc", "add", "dev", veth, "root", *self.link.qdisc(delay=False)],
                ]
        return cmds

    def lossy(self, k: int, probability: float) -> list[list[str]]:
        """The commands that drop each packet host k receives over its link with `probability`
        (iptables' statistic match in its namespace: netem's loss, the usual tool, is not in this VM's
        kernel). On every host, that is each link's loss each way; traffic within a host is kept."""
        rule = ["-i", "eth0", "-m", "statistic", "--mode", "random", "--probability", f"{probability:g}"]
        return [[*self._iptables(k), "-A", "INPUT", *rule, "-j", "DROP"]]

    def cut(self, a: int, b: int, on: bool = True) -> list[list[str]]:
        """The commands that cut (`on`) or heal the path between hosts a and b: each drops what comes
        from the other, as a failed switch port or a firewall does (packets vanish; nothing tells the
        ends, whose connections stay open and retransmit)."""
        verb = "-I" if on else "-D"
        return [
            [*self._iptables(x), verb, "INPUT", "-i", "eth0", "-s", self.address(y), "-j", "DROP"]
            for x, y in ((a, b), (b, a))
        ]

    def _iptables(self, k: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(k), "iptables", "-w", "5"]

    def teardown(self) -> list[list[str]]:
        """The commands that remove everything setup() made (each may fail: it may not exist)."""
        return [
            *(["ip", "netns", "delete", self.namespace(k)] for k in range(self.count)),
            ["ip", "link", "delete", self.bridge],
        ]


def link_bytes(layout: HostLayout) -> dict[int, tuple[int, int]]:
    """(bytes host k sent, bytes it received) so far, read on the bridge's end of its link."""
    out = {}
    for k in range(layout.count):
        stats = Path("/sys/class/net") / layout.veth(k) / "statistics"
        out[k] = (int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text()))
    return out


SBIN = (
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
)  # ip, tc and iptables live here: a root shell's PATH may lack it


def _run(cmd: list[str], check: bool = True) -> None:
    path = os.environ.get("PATH", "")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([path, *(d for d in SBIN if d not in path.split(os.pathsep))]),
    }
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False, env=env)
    if check and done.returncode != 0:
        raise GraphtrainError(f"simulated hosts: `{' '.join(cmd)}` failed: {done.stderr.strip()[-300:]}")


def _leftovers(block: int) -> None:
    """Remove what a killed harness of `block` left (its namespaces, its bridge, its links)."""
    prefix = f"gth{block}-"
    names = [p.name for p in NETNS_DIR.glob(f"{prefix}*")] if NETNS_DIR.is_dir() else []
    for name in names:
        _run(["ip", "netns", "delete", name], check=False)
    # the bridge and the bridge's ends of the links: a namespace's deletion takes its veth pair with it,
    # but the kernel does it later, so a harness started at once after a killed one can meet them
    for link in [f"gthbr{block}", *(p.name for p in Path("/sys/class/net").glob(f"gth{block}v*"))]:
        if Path(f"/sys/class/net/{link}").exists():
            _run(["ip", "link", "delete", link], check=False)


def _clear_free_blocks() -> None:
    """Remove the leftovers of every block no live harness holds, not only of the one taken next: a
    killed harness's namespaces and bridge otherwise stayed until a later one needed that very block."""
    for block in BLOCKS:
        lock = LOCK_DIR / f"{block}.lock"
        if not lock.exists():
            continue
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live harness's block: never touched
            continue
        else:
            _leftovers(block)
        finally:
            os.close(fd)


def apply(cmds: list[list[str]]) -> None:
    """Run fault commands (HostLayout.lossy, HostLayout.cut) as root.

    Raises:
        GraphtrainError: a command failed (named, with its error)."""
    for cmd in cmds:
        _run(cmd)


@contextlib.contextmanager
def simulated_hosts(count: int, link: Link | None = Link()) -> Iterator[HostLayout]:
    """`count` hosts for the duration of the block, removed after it (however it ends).

    Raises:
        GraphtrainError: not root, no free block, or a command failed (what was made is removed).
    """
    if os.geteuid() != 0:
        raise GraphtrainError("simulated hosts need root (network namespaces, tc)")
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    _clear_free_blocks()
    for block in BLOCKS:
        fd = os.open(LOCK_DIR / f"{block}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        layout = HostLayout(block, count, link)
        try:
            _leftovers(block)
            for cmd in layout.setup():
                _run(cmd)
            yield layout
        finally:
            for cmd in layout.teardown():
                _run(cmd, check=False)
            os.close(fd)  # the flock goes with it
        return
    raise GraphtrainError(f"simulated hosts: every block {BLOCKS.start}-{BLOCKS.stop - 1} is taken")
