"""All-to-all exchanges of keyed rows between trainer ranks: the transport of collective tables.

A key's owner is `key mod world` (SOK's rule), so a rank's keys are grouped by owner with one stable sort
and sent with `all_to_all_single` (gloo on CPU tensors, NCCL on GPU ones: the group's backend for the
tensors' device). Every exchange starts with a header exchange (counts per peer and a status word) so
that a rank refusing its input (an id outside the table, a NaN gradient) makes *every* rank raise the
same error at the same point instead of leaving its peers waiting in the next collective.

Pure helpers (`route`, `unroute`) decide; `Exchange` moves tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.native.keymap import KeyMapFull

OK, BAD_IDS, NON_FINITE, FULL = 0, 1, 2, 3
MOVED = {"sent": 0, "received": 0}  # bytes every Exchange of this process moved to and from other ranks


def moved() -> dict[str, int]:
    """The process' collective bytes so far, by direction (a trainer's metrics read them)."""
    return dict(MOVED)


@dataclass(frozen=True)
class Route:
    """Where this rank's keys go: `order` puts them in owner order, `send[q]` of them go to rank q."""

    order: torch.Tensor
    send: list[int]


def owners(keys: torch.Tensor, world: int) -> torch.Tensor:
    return torch.remainder(keys, world)


def route(keys: torch.Tensor, world: int) -> Route:
    """Group `keys` by owner, keeping their order within each owner (a stable sort)."""
    own = owners(keys, world)
    order = torch.argsort(own, stable=True)
    send = torch.bincount(own, minlength=world).tolist() if len(keys) else [0] * world
    return Route(order=order, send=send)


def local_rows(keys: torch.Tensor, world: int) -> torch.Tensor:
    """The owner's row index of each key it owns (rank r holds keys r, r+world, r+2*world, ...)."""
    return torch.div(keys, world, rounding_mode="floor")


def shard_rows(num_rows: int, world: int, rank: int) -> int:
    """How many of the keys 0..num_rows-1 rank `rank` owns."""
    return max(0, (num_rows - rank + world - 1) // world)


def pack_gradients(sums: torch.Tensor, counts: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A rank's per-key gradient sums and occurrence counts as the rows it sends their owners: float32
    with the count as a last column, or for a half table the sums in its type (rounded to nearest, a
    finite value beyond its range saturating, as a half server table's gradients cross a socket:
    runtime/dtypes.narrowed) beside the count's int32 bytes. Half the bytes of a half table's step."""
    if dtype == torch.float32:
        return torch.cat([sums, counts.to(sums.dtype).unsqueeze(1)], dim=1)
    top = torch.finfo(dtype).max
    half = torch.where(torch.isfinite(sums), sums.clamp(-top, top), sums).to(dtype)
    count_bytes = counts.to(torch.int32).unsqueeze(1).view(torch.uint8)
    return torch.cat([half.view(torch.uint8), count_bytes], dim=1)


def unpack_gradients(got: torch.Tensor, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 sums, float32 counts) of received rows (pack_gradients' form)."""
    if dtype == torch.float32:
        return got[:, :dim], got[:, dim]
    width = dim * dtype.itemsize
    sums = got[:, :width].contiguous().view(dtype).float()
    counts = got[:, width:].contiguous().view(torch.int32).reshape(-1).float()
    return sums, counts


def key_bytes(dim: int, dtype: torch.dtype) -> tuple[int, int]:
    """(lookup, update) bytes one key of a table of `dim`-wide `dtype` rows moves between a rank and its
    owner in a step: its id out and its row back; its id and its gradient with its count out
    (pack_gradients' form)."""
    row = dim * dtype.itemsize
    grad = row + 4 if dtype in (torch.float16, torch.bfloat16) else (dim + 1) * 4
    return 8 + row, 8 + grad


def step_bytes(unique_keys: float, dim: int, dtype: torch.dtype, world: int, hosts: int, rank: int) -> float:
    """Bytes rank `rank` sends to ranks on other hosts in one step of a table it looks up and updates
    once, with `unique_keys` distinct keys a rank (what it receives is the same, by symmetry): keys are
    owned key mod `world`, rank q lives on host q mod `hosts`. It sends its keys and gradients to their
    owners and, as an owner, the rows its peers asked for."""
    if world < 2 or hosts < 2:
        return 0.0
    remote = sum(1 for q in range(world) if q % hosts != rank % hosts) / world
    lookup, update = key_bytes(dim, dtype)
    return remote * unique_keys * (lookup + update)


class CollectiveError(SparseInputError):
    """A peer refused its part of an exchange; raised on every rank, naming the peer."""


@dataclass
class Exchange:
    """All-to-all over `group` (None: the default group). world 1 needs no process group."""

    group: dist.ProcessGroup | None = None
    sent_bytes: int = 0  # rows moved to other ranks by rows() (not the headers): a plan's check
    received_bytes: int = 0

    @property
    def world(self) -> int:
        return dist.get_world_size(self.group) if dist.is_initialized() else 1

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group) if dist.is_initialized() else 0

    @property
    def device_native(self) -> bool:
        """Whether the group moves GPU tensors itself (NCCL: "nccl" or "cpu:gloo,cuda:nccl")."""
        return "nccl" in str(dist.get_backend(self.group))

    def header(
        self, send: list[int], status: int, device: torch.device, what: str, detail: str = ""
    ) -> list[int]:
        """Counts this rank receives from each peer. Raises on every rank when any rank's status is
        not OK: `what` names the operation and the table; `detail`, this rank's own problem, is what
        this rank raises when the problem is its own."""
        if status != OK and detail:
            self._header(send, status, device)  # the peers learn of it, then this rank says what it is
            if status == NON_FINITE:
                raise NonFiniteGradient(detail, -1)
            raise KeyMapFull(detail) if status == FULL else SparseInputError(detail)
        statuses, counts = self._header(send, status, device)
        self._raise(statuses, what)
        return counts

    def _header(self, send: list[int], status: int, device: torch.device) -> tuple[list[int], list[int]]:
        world = self.world
        if world == 1:
            return [status], list(send)
        if device.type != "cpu" and not self.device_native:
            device = torch.device("cpu")
        out = torch.tensor([[c, status] for c in send], dtype=torch.int64, device=device).reshape(-1)
        got = torch.empty_like(out)
        dist.all_to_all_single(got, out, group=self.group)
        pairs = got.view(world, 2).tolist()
        return [s for _, s in pairs], [c for c, _ in pairs]

    def _raise(self, statuses: list[int], what: str) -> None:
        for peer, status in enumerate(statuses):
            if status == NON_FINITE:
                raise NonFiniteGradient(f"{what}: rank {peer} holds a NaN or infinite gradient", -1)
            if status == FULL:
                raise KeyMapFull(f"{what}: the shard of rank {peer} is full (its own message says more)")
            if status != OK:
                raise CollectiveError(f"{what}: rank {peer} refused its input (ids outside the table)")

    def rows(self, data: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        """Send data's rows, already in owner order (`send[q]` rows to rank q); returns the `sum(recv)`
        rows received, in rank order."""
        if self.world == 1:
            return data
        if data.device.type != "cpu" and not self.device_native:  # gloo alone: through host memory
            return self.rows(data.cpu(), send, recv).to(data.device)
        if data.dtype in (torch.float16, torch.bfloat16):  # moved as their bytes (gloo has no bfloat16)
            return self.rows(data.view(torch.uint8), send, recv).view(data.dtype)
        width = math.prod(data.shape[1:])
        tail = tuple(data.shape[1:])
        out = data.new_empty((sum(recv), *tail))
        me = self.rank
        sent = (sum(send) - send[me]) * width * data.element_size()
        received = (sum(recv) - recv[me]) * width * data.element_size()
        self.sent_bytes += sent
        self.received_bytes += received
        MOVED["sent"] += sent
        MOVED["received"] += received
        dist.all_to_all_single(
            out.view(-1) if out.numel() else out.new_empty(0),
            data.contiguous().view(-1) if data.numel() else data.new_empty(0),
            [c * width for c in recv],
            [c * width for c in send],
            group=self.group,
        )
        return out
