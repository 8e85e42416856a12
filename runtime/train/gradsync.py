"""The dense gradients averaged over the trainers, with the wait for the slowest trainer put to use.

DistributedDataParallel all-reduces inside backward and returns only when the reduction is done: a
trainer whose backward ends first sits idle until the slowest one has finished its own. Trainers that
share cores with each other and with their shard servers differ by several milliseconds a step (a GAT
step on WordNet, 2 trainers on 2 cores: gloo's all-reduce took 8 ms a step, of which about 1 ms is the
reduction). Here the reduction starts when backward ends, one flat buffer per dtype and device, and is
waited for only when the weights are next read: the next step's forward, a checkpoint, an evaluation.
The sparse pushes and the next batch's sampling run in between, so a trainer that is ahead spends its
wait on the next step's work.

Trainers that share a host (every `graphtrain run`) sum through shared memory instead (host_reduce.py):
gloo's loopback TCP cost each of WordNet's 2x2 trainers 5-7 % of its CPU. The gradients are laid out
straight into the trainer's slot there, and the sums land in one buffer kept for the run: no flat
buffer made and freed each step. Elsewhere, and for gradients not all float32 on the host, gloo.

The average is DDP's: each gradient divided by the number of trainers, then summed. A parameter
without a gradient on a trainer counts as zeros there (where DDP, without find_unused_parameters,
refuses the step). Every trainer starts from rank 0's parameters and buffers, as under DDP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist
from torch import nn

from graphtrain.runtime.train.host_reduce import HostReduce, open_host_reduce

HOST_WAIT_SECONDS = 600.0  # as long as the process group's collectives wait (train/dist.py)


@dataclass
class _Bucket:
    params: list[nn.Parameter]
    flat: torch.Tensor
    work: torch_dist.Work | None  # None: through the host's shared memory (host_reduce)


def _groups(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """Indices of `tensors` grouped by (dtype, device), in first-seen order: each group is one buffer."""
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.device), []).append(i)
    return list(groups.values())


class GradSync:
    """The dense gradients of `module` averaged over `world` trainers: start() after backward, finish()
    before the weights are read (both no-ops for one trainer)."""

    def __init__(self, module: nn.Module, world: int):
        self.world = world
        self.params = [p for p in module.parameters() if p.requires_grad]
        self._buckets = [[self.params[i] for i in group] for group in _groups(self.params)]  # fixed per run
        self._pending: list[_Bucket] = []
        self._host: HostReduce | None = None
        if world > 1:
            self._broadcast([*module.parameters(), *module.buffers()])
            one = self._buckets[0] if len(self._buckets) == 1 else []
            if one and one[0].dtype == torch.float32 and one[0].device.type == "cpu":
                numel = sum(p.numel() for p in one)
                self._host = open_host_reduce(numel, torch_dist.get_rank(), world, HOST_WAIT_SECONDS)
                self._reduced = torch.empty(numel)  # the sums' one buffer, reused every step

    @staticmethod
    def _broadcast(tensors: list[torch.Tensor]) -> None:
        """Rank 0's values everywhere: the same start on every trainer, whatever each one drew."""
        for group in _groups(tensors):
            part = [tensors[i].detach() for i in group]
            flat = torch.cat([t.reshape(-1) for t in part])
            torch_dist.broadcast(flat, src=0)
            with torch.no_grad():
                for t, got in zip(part, flat.split([t.numel() for t in part]), strict=True):
                    t.copy_(got.view_as(t))

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def start(self) -> None:
        """Start averaging the gradients backward left (asynchronous: gloo's or NCCL's own thread)."""
        if self.world == 1 or not self.params:
            return
        if self._pending:
            raise RuntimeError("GradSync.start: the last step's gradients are still being averaged")
        for params in self._buckets:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            if self._host is not None:
                self._host.start(grads, self.world)
                self._pending.append(_Bucket(params, self._reduced, None))
                continue
            flat = torch.cat([g.reshape(-1) for g in grads]).div_(self.world)
            self._pending.append(_Bucket(params, flat, torch_dist.all_reduce(flat, async_op=True)))

    def finish(self) -> None:
        """Wait for the averages and make them the parameters' gradients (views of the reduced buffers)."""
        pending, self._pending = self._pending, []
        for bucket in pending:
            if bucket.work is None:
                assert self._host is not None
                self._host.finish(bucket.flat)
            else:
                bucket.work.wait()
            sizes = [p.numel() for p in bucket.params]
            for p, g in zip(bucket.params, bucket.flat.split(sizes), strict=True):
                p.grad = g.view_as(p)
