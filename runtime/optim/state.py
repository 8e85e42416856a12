"""Optimizer state of a table, as named tensors (what a checkpoint stores and a server holds), laid out
as contract/optimizers.py's table says:

- adagrad: "sum" (rows x dim), element-wise sum of squared gradients, starting at initial_accumulator;
- rowwise_adagrad: "sum" (rows,), one accumulator per row;
- adam: "exp_avg", "exp_avg_sq" (rows x dim) and "step": (rows,) int64 per-row counts, or a 1-element
  int64 table count when step_count is "global";
- sgd: no state.
"""

from __future__ import annotations

import torch

from graphtrain.contract.optimizers import BY_NAME, StateEntry
from graphtrain.runtime.native.memory import empty
from graphtrain.runtime.optim.config import OptimConfig


def _filled(
    shape: tuple[int, ...], value: float, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """A filled tensor; on the CPU large ones get huge pages before their first write."""
    return empty(shape, dtype, device).fill_(value)


def _shape(entry: StateEntry, config: OptimConfig, num_rows: int, dim: int) -> tuple[int, ...]:
    if entry.shape == "element":
        return (num_rows, dim)
    if entry.shape == "row":
        return (num_rows,)
    return (num_rows,) if config.step_count == "row" else (1,)  # "step"


def make_state(
    config: OptimConfig, num_rows: int, dim: int, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """The state contract/optimizers.py's table lists for config.kind, filled as it says."""
    out = {}
    for entry in BY_NAME[config.kind].state:
        dtype = torch.int64 if entry.shape == "step" else torch.float32
        value = config.initial_accumulator if entry.fill == "initial_accumulator" else 0
        out[entry.name] = _filled(_shape(entry, config, num_rows, dim), value, dtype, device)
    return out


def check_state(config: OptimConfig, state: dict[str, torch.Tensor], num_rows: int, dim: int) -> None:
    """Raise ValueError naming the entry when `state` does not fit `config` and the table."""
    expected = BY_NAME[config.kind].state
    if set(state) != {e.name for e in expected}:
        raise ValueError(
            f"{config.kind} state needs entries {sorted(e.name for e in expected)}, got {sorted(state)}"
        )
    for entry in expected:
        t = state[entry.name]
        shape = _shape(entry, config, num_rows, dim)
        dtype = torch.int64 if entry.shape == "step" else torch.float32
        if tuple(t.shape) != shape or t.dtype != dtype or not t.is_contiguous():
            raise ValueError(
                f"state {entry.name!r} must be a contiguous {dtype} tensor of shape {shape}, "
                f"got {t.dtype} {tuple(t.shape)}"
            )
