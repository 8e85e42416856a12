"""Gradient capture for embedding tables: what lets a sparse table take part in autograd.

`rows(ids, values)` turns gathered rows into a leaf tensor that requires grad and registers a hook that
records its gradient at backward time. Until then only a weak reference is held, so forward passes
that are never followed by a step (evaluation without no_grad, say) are forgotten instead of piling up
(DGL's NodeEmbedding documents that leak). SparseEmbedding (local) and DistEmbedding (sharded) share it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch


@dataclass
class _Entry:
    ids: torch.Tensor
    rows: weakref.ref
    grad: torch.Tensor | None = None


class GradientCapture:
    def __init__(self, dim: int):
        self.dim = dim
        self._trace: list[_Entry] = []

    def __len__(self) -> int:
        return len(self._trace)

    def rows(self, ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """`values` (the rows of flat `ids`) as a leaf whose gradient will be captured, when grad is on."""
        if torch.is_grad_enabled():
            values.requires_grad_(True)
            entry = _Entry(ids=ids, rows=weakref.ref(values))
            values.register_post_accumulate_grad_hook(lambda t, e=entry: self._capture(e, t))
            self._trace = [t for t in self._trace if t.grad is not None or t.rows() is not None]
            self._trace.append(entry)
        return values

    @staticmethod
    def _capture(entry: _Entry, rows: torch.Tensor) -> None:
        """Take the gradient autograd just gave the rows (their .grad, left None). Taken after it is
        stored, not by a hook on the gradient: a reference held there made autograd store a copy of
        it (a WordNet step's 13,659 x 128 rows: 7 MB) that nothing read."""
        grad, rows.grad = rows.grad, None
        assert grad is not None
        entry.grad = grad if entry.grad is None else entry.grad + grad

    def pending(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """All (ids, grads) captured since the last clear, concatenated in forward order."""
        done = [t for t in self._trace if t.grad is not None]
        if not done:
            return (
                torch.empty(0, dtype=torch.int64, device=device),
                torch.empty((0, self.dim), dtype=torch.float32, device=device),
            )
        if len(done) == 1:  # the usual case: no 51 MB concatenation of one tensor
            return done[0].ids, done[0].grad.reshape(-1, self.dim).to(torch.float32)
        ids = torch.cat([t.ids for t in done])
        grads = torch.cat([t.grad.reshape(-1, self.dim) for t in done]).to(torch.float32)
        return ids, grads

    def clear(self) -> None:
        self._trace.clear()
