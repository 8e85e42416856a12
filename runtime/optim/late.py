"""A captured step's checks, found on the device and read one step late (issue 45, item 4).

A step replayed as a CUDA graph cannot stop to look at a host value: a lookup's range check or the
sparse step's refusal of a bad id or a non-finite gradient would each wait for the device, and a wait
cannot be captured at all. So in a captured step every check leaves its verdict in a slot of three int64
on the device ({first bad position, first non-finite gradient row, unique rows}, -1 for none): the
lookup clamps its ids and flags the first bad one, and the CUDA core's deferred step
(gt_cuda_sparse_step with flags_out) touches nothing when a flag is set, as its waited call does. After
step k is launched, `collect(k)` reads step k-1's slots (by then done, while step k runs) and raises for
the first flagged one, naming its step; then it starts copying step k's slots to the host.

Slots are handed out in call order (`begin()` at the start of each step): a step makes the same checks
in the same order every time, which is what a graph replays anyway. On a CPU the same slots are filled
by the CPU twin (optim/functional.py), which can look at once, so the late reading is tested there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError

NONE = -1


def first_true(mask: torch.Tensor) -> torch.Tensor:
    """The first position where 1-D `mask` holds, or -1: a 0-d int64 on its device, read by no one."""
    n = len(mask)
    if n == 0:
        return torch.full((), NONE, dtype=torch.int64, device=mask.device)
    pos = torch.where(mask, torch.arange(n, device=mask.device), n).amin()
    return torch.where(pos < n, pos, NONE)


def first_bad(ids: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The first position of an id outside [0, num_rows), or -1 (first_true)."""
    return first_true((ids < 0) | (ids >= num_rows))


@dataclass
class Slot:
    """One check of a step: what it checks (for the message), its table's rows and its verdict."""

    what: str
    rows: int
    flags: torch.Tensor  # (3,) int64 on the table's device


class LateFlags:
    """The slots of a captured step's checks, and the step whose verdicts are on their way to the host."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.slots: list[Slot] = []
        self._next = 0
        self._workspaces: dict[tuple[str, int], torch.Tensor] = {}
        self._host: torch.Tensor | None = None
        self._pending: tuple[int, torch.cuda.Event | None] | None = None
        self._rows: torch.Tensor | None = None  # the slots' flags as rows of one tensor (_flat)

    def begin(self) -> None:
        """A step starts: its checks take the slots from the first again."""
        self._next = 0

    def slot(self, what: str, rows: int) -> Slot:
        """The next check's slot (made by the first step; later steps must ask in the same order)."""
        if self._next == len(self.slots):
            flags = torch.full((3,), NONE, dtype=torch.int64, device=self.device)
            self.slots.append(Slot(what, rows, flags))
        found = self.slots[self._next]
        if found.what != what:
            raise RuntimeError(f"a captured step's checks changed order: {what} where {found.what} was")
        self._next += 1
        return found

    def screen(self, what: str, grads: torch.Tensor) -> None:
        """A check of its own on gradients before any table steps: their first non-finite row. Every
        table's screened first, a step is gated by them all (`gate`), so none changes a table alone."""
        flags = self.slot(what + " (before any step)", len(grads)).flags
        if grads.numel():
            flags[1].copy_(first_true(~torch.isfinite(grads).all(dim=1)))

    def gate(self, ids: torch.Tensor, rows: int) -> torch.Tensor:
        """`ids`, or every one of them out of [0, rows) when a check before this one in the step flagged:
        the step it feeds then touches nothing (the core refuses a bad id before any write), so a step
        whose lookup or gradients were refused changes no table, not only the one that was."""
        earlier = self.slots[: self._next]
        if not earlier:
            return ids
        if self._rows is not None and len(self._rows) == len(self.slots):  # one reduction over the rows
            flagged = self._rows[: self._next, :2].max() >= 0
        else:  # the first step: the slots are tensors of their own still
            flagged = torch.stack([s.flags[:2].max() for s in earlier]).max() >= 0
        return torch.where(flagged, rows, ids)

    def workspace(self, what: str, table: torch.Tensor, n: int) -> torch.Tensor | None:
        """The CUDA core's workspace of one deferred step of `n` ids (its own: a graph keeps its address),
        None on a CPU."""
        if table.device.type != "cuda":
            return None
        key = (what, n)
        if key not in self._workspaces:
            from graphtrain.runtime.native import cuda  # the CUDA bindings only where a GPU steps

            self._workspaces[key] = cuda.step_workspace(table, n)
        return self._workspaces[key]

    def collect(self, step: int) -> None:
        """Step `step` was launched: raise for the one before it if a check flagged it, then start copying
        this step's verdicts to the host (pinned memory, no wait).

        Raises:
            SparseInputError: an id of the earlier step was outside its table (that step changed nothing).
            NonFiniteGradient: a gradient row of the earlier step held NaN or infinity (ditto).
        """
        self.check()
        if not self.slots:
            return
        flat = self._flat()
        cuda = self.device.type == "cuda"
        if self._host is None or self._host.numel() != flat.numel():
            self._host = torch.empty(flat.numel(), dtype=torch.int64, pin_memory=cuda)
        self._host.copy_(flat, non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        self._pending = (step, event)

    def _flat(self) -> torch.Tensor:
        """Every slot's verdict in one tensor. After the first step the slots become rows of one (k, 3)
        tensor, so each later step copies it as it is, without a concatenation (a kernel and an
        allocation a step); the capture comes after that, so the graph writes into those rows."""
        if self._rows is None:
            self._rows = torch.stack([s.flags for s in self.slots])
            for slot, row in zip(self.slots, self._rows, strict=True):
                slot.flags = row
        if len(self._rows) == len(self.slots):
            return self._rows.view(-1)
        return torch.cat([s.flags for s in self.slots])  # a step that asked for more checks than the first

    def check(self) -> None:
        """Read the verdicts on their way (waiting for their step to end) and raise for a flagged one."""
        if self._pending is None or self._host is None:
            return
        step, event = self._pending
        self._pending = None
        if event is not None:
            event.synchronize()
        verdicts = self._host.view(-1, 3).tolist()
        for slot, (bad, nonfinite, _) in zip(self.slots, verdicts, strict=True):
            late = "found on the device, reported a step late"
            if bad != NONE:
                raise SparseInputError(
                    f"step {step}: {slot.what}: ids[{bad}] is outside the table's rows [0, {slot.rows}) "
                    f"({late}; the step changed nothing)"
                )
            if nonfinite != NONE:
                raise NonFiniteGradient(
                    f"step {step}: {slot.what}: gradient row {nonfinite} holds NaN or infinity ({late}; "
                    "the step changed nothing)",
                    nonfinite,
                )
