"""What a sparse optimizer is: its kind, hyper-parameters and duplicate rule, validated once.

The same frozen config drives the torch reference, the native CPU core, the CUDA core and (next) the
shard servers, so a table's optimizer is described in exactly one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from graphtrain.contract.optimizers import BY_NAME

Kind = Literal["sgd", "adagrad", "rowwise_adagrad", "adam"]  # for the type checker: SPARSE_OPTIMIZERS' names
KINDS: tuple[str, ...] = tuple(BY_NAME)  # contract/optimizers.py's table
FLOAT32_NORMAL = (1.1754943508222875e-38, 3.4028234663852886e38)  # the smallest normal and largest float32


@dataclass(frozen=True)
class OptimConfig:
    """A sparse optimizer.

    step_count (adam): "row" counts steps per row and adds eps to sqrt(v_hat) (DGL's SparseAdam);
    "global" counts steps per table and adds eps to sqrt(v) (torch.optim.SparseAdam). Each matches its
    model exactly. duplicate: "sum" (torch.optim on nn.Embedding(sparse=True)) or "mean" (DGL).
    nonfinite (shard servers): a gradient push holding NaN or infinity is refused whole ("refuse") or
    its rows holding one are skipped and counted ("skip").
    """

    kind: Kind
    lr: float
    eps: float = 1e-10
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    initial_accumulator: float = 0.0
    step_count: Literal["row", "global"] = "row"
    duplicate: Literal["sum", "mean"] = "sum"
    row_norm: float = 0.0  # > 0: every updated row is then scaled to this L2 norm (KGE entity constraint)
    # every updated row's complex numbers (real parts, then imaginary) then scaled to modulus 1: RotatE's
    # relation constraint (PyKEEN's complex_normalize after each step)
    unit_complex: bool = False
    nonfinite: Literal["refuse", "skip"] = "refuse"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"optimizer kind must be one of {KINDS}, got {self.kind!r}")
        for name in ("lr", "eps", "beta1", "beta2", "weight_decay", "initial_accumulator", "row_norm"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"optimizer {name} must be a finite number, got {value!r}")
        if self.lr <= 0:
            raise ValueError(f"optimizer lr must be > 0, got {self.lr}")
        for name in ("eps", "weight_decay", "initial_accumulator", "row_norm"):
            if getattr(self, name) < 0:
                raise ValueError(f"optimizer {name} must be >= 0, got {getattr(self, name)}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"optimizer {name} must be in [0, 1), got {getattr(self, name)}")
        if self.step_count not in ("row", "global"):
            raise ValueError(f"step_count must be 'row' or 'global', got {self.step_count!r}")
        if self.duplicate not in ("sum", "mean"):
            raise ValueError(f"duplicate must be 'sum' or 'mean', got {self.duplicate!r}")
        if not isinstance(self.unit_complex, bool):
            raise ValueError(f"unit_complex must be a bool, got {self.unit_complex!r}")
        if self.row_norm and not FLOAT32_NORMAL[0] <= self.row_norm <= FLOAT32_NORMAL[1]:
            # the cores read it as a float32: 1e-46 would be 0 there (no projection), 1e39 infinity
            raise ValueError(
                f"optimizer row_norm must be 0 or within {FLOAT32_NORMAL}, got {self.row_norm!r}"
            )
        if self.unit_complex and self.row_norm:
            raise ValueError("optimizer row_norm and unit_complex are two constraints: set one")
        if self.nonfinite not in ("refuse", "skip"):
            raise ValueError(f"nonfinite must be 'refuse' or 'skip', got {self.nonfinite!r}")

    @classmethod
    def from_spec(cls, table: object) -> OptimConfig:
        """From a spec's EmbeddingTable (contract/spec/tables.py)."""
        opt = table.optimizer  # type: ignore[attr-defined]
        return cls(
            kind=str(opt.kind),  # type: ignore[arg-type]
            lr=opt.lr,
            eps=opt.eps,
            beta1=opt.beta1,
            beta2=opt.beta2,
            weight_decay=opt.weight_decay,
            initial_accumulator=opt.initial_accumulator,
            step_count=str(opt.step_count),  # type: ignore[arg-type]
            duplicate=str(table.duplicate_grads),  # type: ignore[attr-defined,arg-type]
            nonfinite=str(table.non_finite_grads),  # type: ignore[attr-defined,arg-type]
        )
