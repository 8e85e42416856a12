"""The cores a process may use, and how the cores of a host are shared out to its trainers' torch threads.

`os.cpu_count()` (and torch's default thread count) is the node's cores: a pod limited to 2 CPUs on a
64-core node would start 32-64 OpenMP threads and spend its quota being throttled. Here a process' cores
are its CPU affinity bounded by its cgroup's CPU quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` over
`cpu.cfs_period_us`, the least along its cgroup's ancestors), as Go's automaxprocs and the JVM read them.

On one host (the local launcher, `graphtrain plan`) every trainer and shard server shares the cores:
each process first gets one, and the trainers split what is left for their intra-op threads. A trainer
with two OpenMP threads beside a busy shard server on two cores spins waiting for the thread the
server displaced (bench/RESULTS.md, issue 33), which costs more than the second thread gains.

Pure functions decide (`quota_cores`, `share_threads`, `host_threads`); `available_cores` reads /proc.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _v2_quota(text: str) -> float | None:
    quota, _, period = text.strip().partition(" ")
    if quota == "max" or not period:
        return None
    q, p = float(quota), float(period)
    return q / p if q > 0 and p > 0 else None


def _v1_quota(quota: str, period: str) -> float | None:
    q, p = float(quota.strip()), float(period.strip())
    return q / p if q > 0 and p > 0 else None


def _ancestors(path: str) -> list[str]:
    """`path` and every cgroup above it, deepest first, as relative paths ('' is the root)."""
    parts = PurePosixPath(path).parts[1:] if path.startswith("/") else PurePosixPath(path).parts
    return ["/".join(parts[:n]) for n in range(len(parts), -1, -1)]


def quota_cores(proc_cgroup: str, read: Callable[[str], str | None]) -> float | None:
    """The CPU quota, in cores, of the cgroup that `proc_cgroup` (the text of /proc/self/cgroup) names,
    the least along its ancestors; None when no quota is set or none can be read. `read(relative path
    under /sys/fs/cgroup)` returns a file's text or None.

    In a container the cgroup named may not exist under the mount (the mount's root *is* the container's
    cgroup, v1 without a cgroup namespace): the paths that are not there are skipped, and the mount's
    root (the container's own quota) is read last."""
    found: list[float] = []
    for line in proc_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not hid:
            continue
        if hid == "0" and controllers == "":  # v2 (unified)
            for rel in _ancestors(path):
                text = read(f"{rel}/cpu.max" if rel else "cpu.max")
                cores = _v2_quota(text) if text else None
                if cores is not None:
                    found.append(cores)
        elif "cpu" in controllers.split(","):  # v1: the hierarchy holding the cpu controller
            for mount in (controllers, "cpu", "cpu,cpuacct"):
                for rel in _ancestors(path):
                    base = f"{mount}/{rel}" if rel else mount
                    quota, period = read(f"{base}/cpu.cfs_quota_us"), read(f"{base}/cpu.cfs_period_us")
                    cores = _v1_quota(quota, period) if quota and period else None
                    if cores is not None:
                        found.append(cores)
    return min(found) if found else None


def _read(rel: str) -> str | None:
    try:
        return (CGROUP_ROOT / rel).read_text()
    except (OSError, ValueError):
        return None


def available_cores() -> float:
    """The cores this process may use: its CPU affinity, bounded by its cgroup's CPU quota (at least
    one core's worth is never promised: a quota of 0.5 is 0.5)."""
    try:
        affinity = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        affinity = float(os.cpu_count() or 1)
    try:
        quota = quota_cores(Path("/proc/self/cgroup").read_text(), _read)
    except (OSError, ValueError):
        quota = None
    return min(affinity, quota) if quota else affinity


def share_threads(cores: float, trainers: int, servers: int) -> int:
    """Torch intra-op threads for each of `trainers` trainers sharing `cores` cores with `servers` shard
    servers: every process first gets a core, the trainers split what is left; at least 1."""
    if trainers <= 0:
        return 1
    spare = cores - trainers - servers
    return max(1, 1 + math.floor(spare / trainers + 1e-9))


def host_threads(cores: float, trainers: int, shards: int, hosts: int = 1) -> list[int]:
    """Each trainer rank's torch threads when `trainers` trainers and `shards` shard servers run on
    `hosts` hosts sharing `cores` cores (the local launcher: rank r and shard i on host r mod hosts and
    i mod hosts, every host an even share of the cores)."""
    hosts = max(1, hosts)
    each = cores / hosts
    on = [sum(1 for r in range(trainers) if r % hosts == h) for h in range(hosts)]
    servers = [sum(1 for i in range(shards) if i % hosts == h) for h in range(hosts)]
    return [share_threads(each, on[r % hosts], servers[r % hosts]) for r in range(trainers)]


def role_threads(stated: int | None, given: int | None) -> int:
    """A process' torch threads: the spec's (`stated`), else what its launcher gave it (`given`), else
    the cores it may use."""
    return stated or given or max(1, math.floor(available_cores() + 1e-9))
