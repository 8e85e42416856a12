"""The torch reference backend: the sparse optimizers' formulas written with torch ops.

This is the oracle of the parity tests (the native CPU and CUDA cores must match it, and it must match
torch.optim and DGL's documented formulas) and the fallback when no native core is built. It is
clear rather than fast: torch.unique + index_add_ for dedup, gathered rows updated and written back.
"""

from __future__ import annotations

import torch

from graphtrain.runtime.errors import NonFiniteGradient
from graphtrain.runtime.optim.config import OptimConfig


def dedup(ids: torch.Tensor, grads: torch.Tensor, duplicate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Unique ids (sorted) and their gradients, summed or averaged over duplicates."""
    uids, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    reduced = torch.zeros((len(uids), grads.shape[1]), dtype=grads.dtype, device=grads.device)
    reduced.index_add_(0, inverse, grads)
    if duplicate == "mean":
        reduced /= counts.unsqueeze(1).to(grads.dtype)
    return uids, reduced


def adam_coefficients(
    config: OptimConfig, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, e) of w -= a * m / (sqrt(v) * b + e) at step counts t (see optim_math.h)."""
    t64 = t.to(torch.float64)
    bc1 = 1.0 - torch.pow(torch.tensor(config.beta1, dtype=torch.float64), t64)
    bc2 = 1.0 - torch.pow(torch.tensor(config.beta2, dtype=torch.float64), t64)
    inv_sqrt_bc2 = 1.0 / torch.sqrt(bc2)
    a = (config.lr / bc1).to(torch.float32)
    b = inv_sqrt_bc2.to(torch.float32)
    eps = config.eps * inv_sqrt_bc2 if config.step_count == "global" else torch.full_like(bc2, config.eps)
    return a, b, eps.to(torch.float32)


def step(
    config: OptimConfig,
    table: torch.Tensor,
    state: dict[str, torch.Tensor],
    ids: torch.Tensor,
    grads: torch.Tensor,
    finite: bool = False,
) -> int:
    """Apply one sparse step (ids already validated, every row finite if `finite`; the global Adam
    count already incremented). With `finite`, an id whose finite rows reduce to infinity is refused
    before any row changes, as the native cores refuse it (NonFiniteGradient naming its first row)."""
    uids, g = dedup(ids, grads, config.duplicate)
    if len(uids) == 0:
        return 0
    if finite and not bool(torch.isfinite(g).all()):
        uid = uids[torch.nonzero(~torch.isfinite(g).all(dim=1))[0, 0]]
        row = int(torch.nonzero(ids == uid)[0, 0])
        raise NonFiniteGradient(f"the gradients of row {row}'s id sum to infinity", row)
    w = table[uids]
    if config.weight_decay:
        g = g + config.weight_decay * w
    if config.kind == "sgd":
        w -= config.lr * g
    elif config.kind == "adagrad":
        acc = state["sum"][uids] + g * g
        state["sum"][uids] = acc
        w -= config.lr * g / (torch.sqrt(acc) + config.eps)
    elif config.kind == "rowwise_adagrad":
        acc = state["sum"][uids] + (g * g).mean(dim=1)
        state["sum"][uids] = acc
        w -= (config.lr / (torch.sqrt(acc) + config.eps)).unsqueeze(1) * g
    elif config.kind == "adam":
        if config.step_count == "row":
            t = state["step"][uids] + 1
            state["step"][uids] = t
        else:
            t = state["step"].expand(len(uids))
        m = config.beta1 * state["exp_avg"][uids] + (1.0 - config.beta1) * g
        v = config.beta2 * state["exp_avg_sq"][uids] + (1.0 - config.beta2) * g * g
        state["exp_avg"][uids] = m
        state["exp_avg_sq"][uids] = v
        a, b, e = adam_coefficients(config, t)
        w -= a.unsqueeze(1) * m / (torch.sqrt(v) * b.unsqueeze(1) + e.unsqueeze(1))
    table[uids] = w
    return len(uids)
