"""The most memory this process may use: the machine's, its cgroup's memory.max (in a pod, the container's
limit) or its address-space limit (`ulimit -v`), the least.

The input checks (a graph's CSR, an .npy header) compared with the machine's memory only. In a pod
limited to 4 GiB on a 512 GiB node a file declaring 100 GiB passed them, and the kernel's OOM killer
ended the partition Job with no message. Pure decision (`least`), thin readers beside it.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import psutil

CGROUP_MAX = Path("/sys/fs/cgroup/memory.max")


def cgroup_limit(path: Path = CGROUP_MAX) -> int | None:
    """This process's cgroup v2 memory limit, None when unlimited ("max") or unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def address_space_limit() -> int | None:
    """RLIMIT_AS (ulimit -v) in bytes, None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


@dataclass(frozen=True)
class Ceiling:
    """A memory bound in bytes and, in words, what sets it (for the message that names it)."""

    bytes: int
    source: str


def least(total: int, cgroup: int | None, address_space: int | None) -> Ceiling:
    """The least of the machine's memory and the limits that are set; the machine's on a tie."""
    found = Ceiling(total, "this machine's memory")
    for limit, source in ((cgroup, "the cgroup memory limit"), (address_space, "the address-space limit")):
        if limit is not None and limit < found.bytes:
            found = Ceiling(limit, source)
    return found


def ceiling() -> Ceiling:
    """The bound of this process now (read each call: a test or a launcher may set a limit)."""
    return least(int(psutil.virtual_memory().total), cgroup_limit(), address_space_limit())
