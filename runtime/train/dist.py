"""This trainer's place among the trainers: the gloo/NCCL rendezvous, collective sums and decisions, the
global seed (the dense gradients' average is gradsync.py's).

One trainer (world 1) needs no process group: every collective is then the identity, so standalone runs
take the same code path as distributed ones.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as torch_dist

from graphtrain.contract.roles import PEER_LOST, PORT_FILE
from graphtrain.runtime.errors import GraphtrainError


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global generators from `seed`: a task seeds before it builds its
    model, so the initial weights follow training.seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_seed(seed: int, rank: int, epoch: int) -> int:
    """The seed of a trainer's epoch stream (its order and negatives): a hash of (training.seed, rank,
    epoch) under a tag of its own. The plain sum used until 2026-11-30 (seed * 1,000,003 + rank * 7,919
    + epoch) gave rank 0's epoch k the seed of a table's init block k (storage/inits.py): epoch 0 drew
    its order and negatives from the raw numbers of the first entity rows' init."""
    hi, lo = np.random.SeedSequence([seed, rank, epoch, _EPOCH_STREAM]).generate_state(2, np.uint32)
    return int(hi) << 31 | int(lo) >> 1  # 63 bits


_EPOCH_STREAM = 0x6570_6F63  # "epoc": this stream's tag


RENDEZVOUS_SECONDS = 600


def port_file_store(path: Path, rank: int, world: int, wait: dt.timedelta) -> torch_dist.TCPStore:
    """The rendezvous store of --init portfile:PATH (contract/roles.py): rank 0 serves it on 127.0.0.1
    and writes its port to `path` (renamed into place: never read half-written); the others wait for the
    file, up to `wait`. The launcher's port, picked ahead and bound by rank 0 seconds later, after its
    imports (tcp://), was once taken in between: EADDRINUSE under load."""
    if rank == 0:
        store = torch_dist.TCPStore("127.0.0.1", 0, world, True, timeout=wait, wait_for_workers=False)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(str(store.port))
        partial.replace(path)
        return store
    deadline = time.monotonic() + wait.total_seconds()
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no rendezvous port from trainer 0 in {path} after {wait.total_seconds():.0f} s"
            )
        time.sleep(0.05)
    return torch_dist.TCPStore("127.0.0.1", int(path.read_text()), world, False, timeout=wait)


@dataclass
class Dist:
    """This trainer's place among the trainers."""

    rank: int = 0
    world: int = 1
    init_method: str | None = None  # tcp://host:port of rank 0 (gloo rendezvous)
    backend: str = "gloo"

    def __enter__(self) -> Dist:
        if self.world > 1:
            if not self.init_method:
                raise ValueError("several trainers need an init method (tcp://host:port of rank 0)")
            wait = dt.timedelta(seconds=RENDEZVOUS_SECONDS)
            if self.init_method.startswith(PORT_FILE):
                store = port_file_store(Path(self.init_method[len(PORT_FILE) :]), self.rank, self.world, wait)
                torch_dist.init_process_group(
                    self.backend, store=store, rank=self.rank, world_size=self.world, timeout=wait
                )
                return self
            torch_dist.init_process_group(
                self.backend,
                init_method=self.init_method,
                rank=self.rank,
                world_size=self.world,
                timeout=wait,
            )
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        # Not after a failure: destroying the group waits for its collectives, and one in flight whose
        # peer is gone or cut off waits out the group's timeout (600 s) before the trainer can say why
        # it failed and leave (roles/train.py leave_failed leaves without it).
        if self.world > 1 and torch_dist.is_initialized() and kind is None:
            torch_dist.destroy_process_group()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over all trainers (evaluation counts, the epoch's loss)."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            torch_dist.all_reduce(t)
        return t.tolist()

    def gather_max(self, values: list[float]) -> list[float]:
        """Element-wise maximum over all trainers."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
        return t.tolist()

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Every trainer's `rows` (n_i, d) of float32 on the host, concatenated in rank order: the
        shares of a computation split by rank (link prediction's node embeddings)."""
        if self.world == 1:
            return rows
        sizes = torch.zeros(self.world, dtype=torch.int64)
        sizes[self.rank] = len(rows)
        torch_dist.all_reduce(sizes)
        most = int(sizes.max())
        padded = rows.new_zeros((most, *rows.shape[1:]))
        padded[: len(rows)] = rows
        out = [torch.empty_like(padded) for _ in range(self.world)]
        torch_dist.all_gather(out, padded.contiguous())
        return torch.cat([o[: int(n)] for o, n in zip(out, sizes, strict=True)])

    def share(self, batch_size: int) -> int:
        """This trainer's part of a global batch: N trainers with DDP take the steps one trainer would
        (same effective batch, same learning rate schedule), so results do not depend on N."""
        return max(1, batch_size // self.world)

    def barrier(self) -> None:
        if self.world > 1:
            torch_dist.barrier()

    def agree(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank: one decision, taken once (early stopping)."""
        return self.broadcast_text("1" if flag else "") == "1"

    def broadcast_text(self, text: str, limit: int = 256) -> str:
        """Rank 0's `text` (at most `limit` bytes of UTF-8) on every rank."""
        if self.world == 1:
            return text
        raw = text.encode()
        if len(raw) > limit:
            raise ValueError(f"{len(raw)} bytes to broadcast, at most {limit}")
        buf = torch.zeros(limit, dtype=torch.uint8)
        buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
        torch_dist.broadcast(buf, src=0)
        return bytes(buf.tolist()).rstrip(b"\0").decode()


_GLOO_TRANSPORT = "/gloo/transport/"  # where gloo raises a peer's lost connection (pair.cc)


def peer_lost(text: str) -> str | None:
    """What gloo's error `text` says of a peer trainer that went away (its connection closed or reset
    mid-collective), in a line; None for any other error. gloo raises it as a bare RuntimeError, e.g.
    "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.7]:11429. This is typically
    caused by a remote worker crashing. Check the logs of the remote worker before reporting an error.
    GLHF!"."""
    if _GLOO_TRANSPORT not in text:
        return None
    reason = text.split("] ", 1)[-1].split(". This is typically", 1)[0].strip()
    return lost_line(reason)


def lost_line(reason: str) -> str:
    """The line of a peer trainer gone away, whichever channel found it (gloo, host_reduce): the
    launcher tells a consequence from a cause by roles.PEER_LOST in it."""
    return (
        f"{PEER_LOST} ({reason}): its own log says why; the newest complete checkpoint "
        "is where a restart resumes"
    )


@contextlib.contextmanager
def peers_named(rank: int) -> Iterator[None]:
    """A peer lost inside (gloo's RuntimeError) becomes one GraphtrainError line naming this trainer: a
    pod's log and termination message then say so, not torch's 50-line traceback with every line
    prefixed `[rankN]:`. Any other error passes unchanged."""
    try:
        yield
    except RuntimeError as exc:
        said = peer_lost(str(exc))
        if said is None:
            raise
        raise GraphtrainError(f"trainer {rank}: {said}") from None
