"""Fused ReLU + dropout and ELU + dropout for CPU trainers (cuda/src/nn_cpu.cpp), with the torch
fallbacks they replace.

torch spends five passes over a hidden layer's activations on relu, the random draw, the comparison
and the masked, scaled multiply, and as many backward; the native kernel takes one pass each way and
keeps a byte mask for backward. Everything else (GPU tensors, other dtypes, no native core) takes the
torch path, which keeps an element with probability 1 - p as well.
"""

from __future__ import annotations

import torch

from graphtrain.runtime.native import core
from graphtrain.runtime.native.backend import CoreBackend, choose

_SEED_BOUND = 2**63 - 1


def _threads() -> int:
    return max(1, torch.get_num_threads())


def _draw(x: torch.Tensor, p: float) -> tuple[torch.Tensor, float, int, int]:
    """(an empty byte mask like x, the kept elements' scale, a seed from torch's generator, the 32-bit
    draw below which an element is dropped): every kernel's draw alike, reproducible under the seed."""
    seed = int(torch.randint(0, _SEED_BOUND, (1,)))
    drop_below = min(int(round(p * 2**32)), 2**32 - 1)
    return torch.empty(x.shape, dtype=torch.uint8), 1.0 / (1.0 - p), seed, drop_below


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, p: float) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        mask, scale, seed, drop_below = _draw(x, p)
        core().gt_relu_dropout(
            x.numel(), x.data_ptr(), out.data_ptr(), mask.data_ptr(), drop_below, scale, seed, _threads()
        )
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        (mask,) = ctx.saved_tensors
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        core().gt_mask_scale(
            grad.numel(), grad.data_ptr(), mask.data_ptr(), ctx.scale, out.data_ptr(), _threads()
        )
        return out, None


def relu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """dropout(relu(x), p): each element kept with probability 1 - p and scaled by 1 / (1 - p)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return torch.relu(x)
    if x.dtype == torch.float32 and choose(x.device) is CoreBackend.CPU:
        return _ReluDropout.apply(x, p)
    keep = torch.rand_like(x) >= p
    return torch.relu(x) * keep * (1.0 / (1.0 - p))


class _BiasReluDropout(torch.autograd.Function):
    """dropout(relu(x + bias)) in place over x, the fresh output of a layer's GEMMs (nothing saves it):
    the bias added in the same pass rather than broadcast into the GEMM's output first, and its
    gradient summed in backward's one pass."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, bias: torch.Tensor, p: float
    ) -> torch.Tensor:
        rows, cols = x.shape
        mask, scale, seed, drop_below = _draw(x, p)  # relu_dropout's draw: the same mask
        b = bias.detach().contiguous()
        core().gt_bias_relu_dropout(
            rows,
            cols,
            x.data_ptr(),
            b.data_ptr(),
            x.data_ptr(),
            mask.data_ptr(),
            drop_below,
            scale,
            seed,
            _threads(),
        )
        ctx.mark_dirty(x)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return x

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        (mask,) = ctx.saved_tensors
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        bias_grad = torch.empty(grad.shape[1], dtype=grad.dtype)
        core().gt_mask_scale_bias_grad(
            grad.shape[0],
            grad.shape[1],
            grad.data_ptr(),
            mask.data_ptr(),
            ctx.scale,
            out.data_ptr(),
            bias_grad.data_ptr(),
            _threads(),
        )
        return out, bias_grad if ctx.needs_input_grad[1] else None, None


def bias_relu_dropout(x: torch.Tensor, bias: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """relu_dropout(x + bias, p, training) for a (rows x cols) x and a bias of cols, with the same mask
    for the same generator state. On the CPU core it runs in place over x: x must be a fresh result
    that nothing else reads (a layer's GEMM output)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    native = (
        training
        and p > 0.0
        and x.dim() == 2
        and x.is_contiguous()
        and x.dtype == bias.dtype == torch.float32
        and bias.shape == (x.shape[1],)
        and choose(x.device) is CoreBackend.CPU
    )
    if native:
        return _BiasReluDropout.apply(x, bias, p)
    return relu_dropout(x + bias, p, training)


class _EluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, p: float) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        mask, scale, seed, drop_below = _draw(x, p)
        core().gt_elu_dropout(
            x.numel(), x.data_ptr(), out.data_ptr(), mask.data_ptr(), drop_below, scale, seed, _threads()
        )
        ctx.save_for_backward(x, mask)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        x, mask = ctx.saved_tensors
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        core().gt_elu_dropout_grad(
            grad.numel(),
            grad.data_ptr(),
            x.data_ptr(),
            mask.data_ptr(),
            ctx.scale,
            out.data_ptr(),
            _threads(),
        )
        return out, None


def elu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """dropout(elu(x), p): each element kept with probability 1 - p and scaled by 1 / (1 - p)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return torch.nn.functional.elu(x)
    if x.dtype == torch.float32 and choose(x.device) is CoreBackend.CPU:
        return _EluDropout.apply(x, p)
    return torch.nn.functional.dropout(torch.nn.functional.elu(x), p, True)
