"""Pieces every GNN shares: a sparse product with its transpose ready for backward."""

from __future__ import annotations

import torch


class SparseProduct(torch.autograd.Function):
    """A @ h with a precomputed A^T for the gradient (torch would transpose A every call): a block's
    mean over in-neighbours, a feature bag's combination of its words' rows (train/inputs.py)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, h: torch.Tensor, a: torch.Tensor, a_t: torch.Tensor
    ) -> torch.Tensor:
        ctx.a_t = a_t
        return torch.sparse.mm(a, h)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        return torch.sparse.mm(ctx.a_t, grad), None, None
