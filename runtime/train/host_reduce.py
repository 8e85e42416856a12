"""The dense gradients' sum over trainers that share a host, through shared memory instead of gloo's TCP.

`graphtrain run`'s trainers all live on one host. gloo sends each step's dense gradients over loopback
TCP: in WordNet's 2 shard servers x 2 trainers on 2 cores, its TCP loop and run loops took 5-7 % of each
trainer's CPU (617 KB a step each way), beside 83-88 % on the training thread. Here each trainer writes
its share into its own slot of one shared segment and raises its counter; each then adds every slot,
in rank order, so every trainer holds the same bits (with 2 trainers, gloo's: a + b == b + a).

The protocol, per round k (a step's gradients), with two counters per rank, each on a cache line of its
own: `published[r]` (rank r's slot holds round k) and `read[r]` (rank r has added round k). A rank
writes its slot for round k only once every rank has read round k - 1, and adds only once every rank
has published round k. x86's stores are seen in program order and its loads are not reordered with each
other, so a counter seen raised means its slot is seen written; other machines take gloo (`eligible`).
A wait that outlives its timeout raises; one whose peer process is gone says so in gloo's line for a lost
peer (dist.lost_line), so the launcher tells the cause from the consequence.

Opened collectively (`open_host_reduce`): every rank says which host, IPC and PID namespace it is in; only
if all agree does rank 0 create the segment (0600, a random name), the others map it, and rank 0 unlinks
its name once all have it mapped (nothing is left in /dev/shm, whatever happens later).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import platform
import secrets
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as torch_dist

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.tables.shm import host_id
from graphtrain.runtime.train.dist import lost_line

LINE = 64  # bytes: one counter a cache line, so two ranks' counters never share one
NAME_BYTES = 16
SHM = Path("/dev/shm")
SPINS = 50  # checks before a wait starts sleeping between them
NAP = 20e-6  # seconds asleep between checks after that (the kernel's timer slack makes it ~70 us)
BRIEF = 0.005  # seconds of short naps; a longer wait (a peer's checkpoint, its evaluation) naps LONG_NAP
LONG_NAP = 0.001
PEER_CHECK = 1.0  # seconds between checks that the peers still live, while waiting


def eligible() -> bool:
    """Whether this machine's memory order lets the counters publish the slots (x86: TSO)."""
    return platform.machine().lower() in {"x86_64", "amd64"} and SHM.is_dir()


def place_key() -> int:
    """63 bits naming where this process can share memory and see its peers' PIDs: host and boot, IPC
    and PID namespaces. Equal on every rank only when a segment and a liveness check work between them."""
    parts = [host_id()]
    for ns in ("ipc", "pid"):
        try:
            parts.append(str(os.stat(f"/proc/self/ns/{ns}").st_ino))
        except OSError:
            parts.append(f"unknown-{os.getpid()}")  # never equal across processes: gloo then
    digest = hashlib.sha256("\n".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class HostReduce:
    """Sums a float32 vector of `numel` over `world` ranks on one host (the module docstring)."""

    def __init__(self, buf: mmap.mmap, numel: int, rank: int, world: int, timeout: float):
        self.numel, self.rank, self.world, self.timeout = numel, rank, world, timeout
        self._buf = buf
        lines = np.frombuffer(buf, dtype=np.int64, count=3 * world * LINE // 8).reshape(3 * world, LINE // 8)
        self.published, self.read, self.pids, self.starts = (
            lines[:world, 0],
            lines[world : 2 * world, 0],
            lines[2 * world :, 0],
            lines[2 * world :, 1],  # when each pid started: a pid reused after its rank died is not it
        )
        slots = np.frombuffer(buf, dtype=np.float32, count=world * numel, offset=header_bytes(world))
        self.slots = [torch.from_numpy(s) for s in slots.reshape(world, numel)]
        self.pids[rank] = os.getpid()
        self.starts[rank] = _stat(os.getpid())[1]
        self.round = 0

    def start(self, parts: list[torch.Tensor], divisor: int = 1) -> None:
        """Publish this rank's share for the next round: `parts` (float32, `numel` elements in all) laid
        end to end in its slot, each divided by `divisor` (written there, with no buffer of their own)."""
        if int(self.read[self.rank]) != self.round:  # waiting on itself would wait out the timeout
            raise RuntimeError("HostReduce.start: the last round was started but never finished here")
        if sum(t.numel() for t in parts) != self.numel:
            raise ValueError(f"HostReduce.start: {sum(t.numel() for t in parts)} elements for {self.numel}")
        k = self.round + 1
        self._wait(self.read, k - 1, "read the last step's gradients")  # my slot is free again
        slot = self.slots[self.rank]
        torch.cat([t.reshape(-1) for t in parts], out=slot)
        if divisor != 1:
            slot.div_(divisor)
        self.published[self.rank] = k
        self.round = k

    def finish(self, out: torch.Tensor) -> None:
        """`out` = the sum of every rank's share of this round, added in rank order."""
        k = self.round
        self._wait(self.published, k, "published this step's gradients")
        if self.world == 2:
            torch.add(self.slots[0], self.slots[1], out=out)
        else:
            out.copy_(self.slots[0])
            for slot in self.slots[1:]:
                out.add_(slot)
        self.read[self.rank] = k

    def close(self) -> None:
        self.slots = []
        self.published = self.read = self.pids = self.starts = np.empty(0, np.int64)
        with contextlib.suppress(BufferError):  # a view still held elsewhere: the mapping goes with it
            self._buf.close()

    def _wait(self, counters: np.ndarray, k: int, what: str) -> None:
        if k <= 0 or int(counters.min()) >= k:
            return
        began = time.monotonic()
        checked = began
        spins = 0
        while int(counters.min()) < k:
            spins += 1
            if spins <= SPINS:
                continue
            now = time.monotonic()
            time.sleep(NAP if now - began < BRIEF else LONG_NAP)  # a long wait leaves the core to peers
            if now - checked >= PEER_CHECK:
                checked = now
                self._check_peers(counters, k, what)
            if now - began > self.timeout:
                late = [r for r in range(self.world) if counters[r] < k]
                raise RuntimeError(f"trainers {late} have not {what} after {self.timeout:.0f} s")

    def _check_peers(self, counters: np.ndarray, k: int, what: str) -> None:
        for r in range(self.world):
            if counters[r] < k and not _alive(int(self.pids[r]), int(self.starts[r])):
                said = lost_line(f"trainer {r}, pid {int(self.pids[r])}, ended before it {what}")
                raise GraphtrainError(f"trainer {self.rank}: {said}")


def _alive(pid: int, started: int) -> bool:
    """Whether process `pid`, started at `started` (clock ticks after boot), runs: not a zombie (dead, its
    parent not yet told), and not another process given the same pid since."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    state, start = _stat(pid)
    return state not in ("Z", "X") and (start == 0 or started == 0 or start == started)


def _stat(pid: int) -> tuple[str, int]:
    """(state, start time in clock ticks after boot) from /proc/<pid>/stat; ("", 0) where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return "", 0


def header_bytes(world: int) -> int:
    return 3 * world * LINE


def open_host_reduce(numel: int, rank: int, world: int, timeout: float) -> HostReduce | None:
    """A HostReduce over the process group's ranks where all of them share this host (collective: call it
    on every rank; each gets one, or each gets None and keeps gloo)."""
    keys = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    mine = torch.tensor([place_key() if eligible() else -1 - rank], dtype=torch.int64)
    torch_dist.all_gather(keys, mine)
    if len({int(k) for k in keys}) != 1 or int(keys[0]) < 0:
        return None
    name = torch.zeros(NAME_BYTES, dtype=torch.uint8)
    size = header_bytes(world) + world * numel * 4
    fd = -1
    if rank == 0:
        token = secrets.token_bytes(NAME_BYTES)
        name.copy_(torch.frombuffer(bytearray(token), dtype=torch.uint8))
        fd = _create(_path(token), size)
    try:  # rank 0: the name goes whatever happens in the collectives (a peer lost, a stop)
        torch_dist.broadcast(name, src=0)
        if rank != 0:
            with contextlib.suppress(OSError):
                fd = os.open(_path(bytes(name.tolist())), os.O_RDWR)
        buf = None
        if fd >= 0:
            with contextlib.suppress(OSError, ValueError):
                buf = mmap.mmap(fd, size)
            os.close(fd)
        ok = torch.tensor([1 if buf is not None else 0], dtype=torch.int64)
        torch_dist.all_reduce(ok, op=torch_dist.ReduceOp.MIN)  # every rank has mapped it, or none uses it
    finally:
        if rank == 0:
            with contextlib.suppress(OSError):
                os.unlink(_path(bytes(name.tolist())))
    if not int(ok):
        if buf is not None:
            buf.close()
        return None
    assert buf is not None
    reduce = HostReduce(buf, numel, rank, world, timeout)
    torch_dist.barrier()  # every pid is written before anyone may check it
    return reduce


def _create(path: Path, size: int) -> int:
    """A new segment file of `size` bytes, its pages taken now (a full /dev/shm, as a container's 64 MB
    default, is ENOSPC here rather than SIGBUS mid-step); -1 where it cannot be had."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return -1
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return -1
    return fd


def _path(token: bytes) -> Path:
    return SHM / f"graphtrain-reduce-{token.hex()}"
