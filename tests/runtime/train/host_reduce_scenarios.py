"""Spawned-rank scenarios of test_host_reduce.py (tests.runtime.collective.ranks runs them)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.train import host_reduce

ROUNDS = 12
NUMEL = 1001


def _share(rank: int, k: int) -> torch.Tensor:
    return torch.randn(NUMEL, generator=torch.Generator().manual_seed(1000 * k + rank)) * 10.0 ** (k % 5 - 2)


def against_gloo(rank: int, world: int, out: Path) -> dict[str, Any]:
    """ROUNDS rounds through the host's memory beside gloo's all_reduce of the same shares; the ranks
    run at different speeds, so some wait for a slot to be read and some for a slot to be written."""
    used = _record_paths()
    reduce = host_reduce.open_host_reduce(NUMEL, rank, world, 30.0)
    assert reduce is not None
    assert used and not any(p.exists() for p in used), "the segment's name is left behind"
    mine, gloo = [], []
    for k in range(ROUNDS):
        share = _share(rank, k)
        time.sleep(0.003 * ((rank + k) % world))  # a different rank is late each round
        reduce.start(list(share.split([7, NUMEL - 7])), world)  # in parts, each divided, as GradSync's
        if (rank + k) % 2:
            time.sleep(0.002)  # work between start and finish, as a step's next sampling
        got = torch.empty(NUMEL)
        reduce.finish(got)
        mine.append(got)
        ref = share / world
        torch_dist.all_reduce(ref)
        gloo.append(ref)
    reduce.close()
    return {"mine": torch.stack(mine).numpy(), "gloo": torch.stack(gloo).numpy()}


def apart(rank: int, world: int, out: Path) -> dict[str, Any]:
    """Ranks that say different places get no HostReduce, every one of them (gloo then)."""
    if rank == 1:
        host_reduce.place_key = lambda: 12345  # type: ignore[assignment] - another host, as far as it says
    reduce = host_reduce.open_host_reduce(NUMEL, rank, world, 30.0)
    return {"none": reduce is None}


def peer_gone(rank: int, world: int, out: Path) -> dict[str, Any]:
    """Rank 1 dies before it publishes; rank 0's wait says so within a few seconds, not the timeout."""
    reduce = host_reduce.open_host_reduce(NUMEL, rank, world, 300.0)
    assert reduce is not None
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    reduce.start([_share(rank, 0)])
    began = time.monotonic()
    try:
        reduce.finish(torch.empty(NUMEL))
        said = ""
    except GraphtrainError as exc:
        said = str(exc)
    return {"said": said, "seconds": time.monotonic() - began}


def no_room(rank: int, world: int, out: Path) -> dict[str, Any]:
    """A /dev/shm too small for the segment (a container's 64 MB): every rank keeps gloo, nothing left."""
    if rank == 0:

        def full(fd: int, offset: int, length: int) -> None:
            raise OSError(28, "No space left on device")

        host_reduce.os.posix_fallocate = full  # type: ignore[attr-defined] - this rank process only
    used = _record_paths()
    reduce = host_reduce.open_host_reduce(NUMEL, rank, world, 30.0)
    return {"none": reduce is None, "left": sum(p.exists() for p in used), "named": len(used)}


def _record_paths() -> list[Path]:
    """The segment paths open_host_reduce names in this rank process, from now on (other tests' ranks
    may hold segments of their own in /dev/shm meanwhile)."""
    used: list[Path] = []
    real = host_reduce._path

    def recorded(token: bytes) -> Path:
        used.append(real(token))
        return used[-1]

    host_reduce._path = recorded  # type: ignore[assignment] - this rank process only
    return used
