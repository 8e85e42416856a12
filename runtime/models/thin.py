"""Thin products: [x1, x2] @ w_t^T for a w_t of a few rows, GAT's attention scores (each source row scored
for both sides of its edges, per head: 2 x heads columns).

Its inputs are a layer's input rows, often a frozen part (data) beside a learnable one (an embedding),
whose columns follow each other in w_t. On the host the CPU core takes both parts in one pass
(cuda/src/thin_cpu.cpp), where MKL's GEMMs, blocked for wide outputs, ran the forward at a third of one
pass's speed and w's gradient (x^T @ g) at a tenth: on a WordNet GAT batch (14k input rows, 256 + 128
columns, 8 scores) the products took 7 ms of a 62 ms step. Elsewhere (GPU, other dtypes) torch's GEMMs.
"""

from __future__ import annotations

import torch

from graphtrain.runtime.models.layers import native_cpu


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else int(t.data_ptr())


def _native(*tensors: torch.Tensor) -> bool:
    """The core's kernels apply: every tensor float32 on the host (native_cpu reads only the first one's
    dtype, and a float64 part must never be read as float32)."""
    return all(t.dtype == torch.float32 for t in tensors) and native_cpu(*tensors)


class ThinProduct(torch.autograd.Function):
    """out = sum over parts of part @ w_t[:, its columns]^T; the parts' columns follow each other in w_t."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, w_t: torch.Tensor, *parts: torch.Tensor
    ) -> torch.Tensor:
        parts = tuple(p.contiguous() for p in parts)
        w_t = w_t.contiguous()
        ctx.save_for_backward(w_t, *parts)
        rows, k = parts[0].shape[0], w_t.shape[0]
        if len(parts) <= 2 and _native(w_t, *parts):
            from graphtrain.runtime.native import core

            out = w_t.new_empty((rows, k))
            second = parts[1] if len(parts) == 2 else None
            core().gt_thin_product(
                rows,
                _ptr(parts[0]),
                parts[0].shape[1],
                _ptr(second),
                0 if second is None else second.shape[1],
                _ptr(w_t),
                k,
                _ptr(out),
                torch.get_num_threads(),
            )
            return out
        out = None
        at = 0
        for p in parts:
            got = p @ w_t[:, at : at + p.shape[1]].t()
            out = got if out is None else out + got
            at += p.shape[1]
        assert out is not None
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        w_t, *parts = ctx.saved_tensors
        wants = ctx.needs_input_grad[1:]
        grad = grad.contiguous()
        if len(parts) <= 2 and _native(grad, w_t, *parts):
            from graphtrain.runtime.native import core

            grads = [torch.empty_like(p) if want else None for p, want in zip(parts, wants, strict=True)]
            grad_w = torch.empty_like(w_t) if ctx.needs_input_grad[0] else None
            second = parts[1] if len(parts) == 2 else None
            core().gt_thin_product_grad(
                grad.shape[0],
                _ptr(parts[0]),
                parts[0].shape[1],
                _ptr(second),
                0 if second is None else second.shape[1],
                _ptr(w_t),
                w_t.shape[0],
                _ptr(grad),
                _ptr(grads[0]),
                _ptr(grads[1] if len(grads) == 2 else None),
                _ptr(grad_w),
                torch.get_num_threads(),
            )
            return (grad_w, *grads)
        # MKL's fastest forms: (g^T @ x) reads x once; x^T @ g ran at a few GFLOP/s
        grads, w_parts, at = [], [], 0
        for p, want in zip(parts, wants, strict=True):
            w_part = w_t[:, at : at + p.shape[1]]
            at += p.shape[1]
            grads.append(grad @ w_part if want else None)
            if ctx.needs_input_grad[0]:
                w_parts.append(grad.t() @ p)
        grad_w = torch.cat(w_parts, dim=1) if ctx.needs_input_grad[0] else None
        return (grad_w, *grads)


def thin_product(x: torch.Tensor, w_t: torch.Tensor, frozen: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w_t^T, w_t (columns, x's width) a few rows long; with `frozen` (the same rows), [frozen, x] @
    w_t^T, frozen's columns first in w_t (a layer's data, then its learnable input)."""
    if frozen is None:
        return ThinProduct.apply(w_t, x)
    if frozen.shape[0] != x.shape[0]:
        raise ValueError(f"thin_product: frozen has {frozen.shape[0]} rows and x {x.shape[0]}")
    return ThinProduct.apply(w_t, frozen, x)
