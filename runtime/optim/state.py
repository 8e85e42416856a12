"""Optimizer state of a table, as named tensors (what a checkpoint stores and a server holds).

- adagrad: "sum" (rows x dim), element-wise sum of squared gradients, starting at initial_accumulator;
- rowwise_adagrad: "sum" (rows,), one accumulator per row;
- adam: "exp_avg", "exp_avg_sq" (rows x dim) and "step": (rows,) int64 per-row counts, or a 1-element
  int64 table count when step_count is "global";
- sgd: no state.
"""

from __future__ import annotations

import torch

from graphtrain.runtime.native.memory import empty
from graphtrain.runtime.optim.config import OptimConfig


def _filled(
    shape: tuple[int, ...], value: float, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """A filled tensor; on the CPU large ones get huge pages before their first write."""
    return empty(shape, dtype, device).fill_(value)


def make_state(
    config: OptimConfig, num_rows: int, dim: int, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    f32 = torch.float32
    if config.kind == "adagrad":
        return {"sum": _filled((num_rows, dim), config.initial_accumulator, f32, device)}
    if config.kind == "rowwise_adagrad":
        return {"sum": _filled((num_rows,), config.initial_accumulator, f32, device)}
    if config.kind == "adam":
        steps = (num_rows,) if config.step_count == "row" else (1,)
        return {
            "exp_avg": _filled((num_rows, dim), 0.0, f32, device),
            "exp_avg_sq": _filled((num_rows, dim), 0.0, f32, device),
            "step": _filled(steps, 0, torch.int64, device),
        }
    return {}


def _expected(config: OptimConfig, dim: int) -> dict[str, torch.Tensor]:
    meta = "meta"
    if config.kind == "adagrad":
        return {"sum": torch.empty((0, dim), device=meta)}
    if config.kind == "rowwise_adagrad":
        return {"sum": torch.empty((0,), device=meta)}
    if config.kind == "adam":
        return {
            "exp_avg": torch.empty((0, dim), device=meta),
            "exp_avg_sq": torch.empty((0, dim), device=meta),
            "step": torch.empty((0,), dtype=torch.int64, device=meta),
        }
    return {}


def check_state(config: OptimConfig, state: dict[str, torch.Tensor], num_rows: int, dim: int) -> None:
    """Raise ValueError naming the entry when `state` does not fit `config` and the table."""
    expected = _expected(config, dim)
    if set(state) != set(expected):
        raise ValueError(f"{config.kind} state needs entries {sorted(expected)}, got {sorted(state)}")
    for key, ref in expected.items():
        t = state[key]
        shape = (1,) if (key == "step" and config.step_count == "global") else (num_rows, *ref.shape[1:])
        if tuple(t.shape) != shape or t.dtype != ref.dtype or not t.is_contiguous():
            raise ValueError(
                f"state {key!r} must be a contiguous {ref.dtype} tensor of shape {shape}, "
                f"got {t.dtype} {tuple(t.shape)}"
            )
