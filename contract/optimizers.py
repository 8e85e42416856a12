"""The sparse optimizer kinds in one table: its name (the spec's `optimizer.kind`), its code in the native
cores (graphtrain::OptimKind, cuda/include/graphtrain/optim_math.h) and the state it keeps per table.

The spec's enum (contract/spec/enums.py), the runtime's config (runtime/optim/config.py), the state's
layout and size (runtime/optim/state.py, runtime/storage/sizes.py) and the native binding's codes
(runtime/native/optim.py) are read from it, and tests/native/test_optim_kinds.py ties the codes to the C
enum. A new optimizer is then a row here plus its math (runtime/optim/reference.py and the two cores).
Plain data, no dependency: every role imports the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# A state entry's shape: "element" (rows x dim) and "row" (rows,) float32; "step" int64, (rows,) with
# per-row step counts or (1,) with one count per table (optimizer.stepCount).
Shape = Literal["element", "row", "step"]


@dataclass(frozen=True)
class StateEntry:
    """One named tensor of a table's optimizer state, filled with zeros or the initial accumulator."""

    name: str
    shape: Shape
    fill: Literal["zero", "initial_accumulator"] = "zero"


@dataclass(frozen=True)
class SparseOptimizerKind:
    name: str
    code: int  # graphtrain::OptimKind
    state: tuple[StateEntry, ...]
    summary: str  # the update, in one line (the spec's description)


SPARSE_OPTIMIZERS: tuple[SparseOptimizerKind, ...] = (
    SparseOptimizerKind("sgd", 0, (), "w -= lr * g"),
    SparseOptimizerKind(
        "adagrad",
        1,
        (StateEntry("sum", "element", "initial_accumulator"),),
        "element-wise G += g^2, w -= lr * g / (sqrt(G) + eps)",
    ),
    SparseOptimizerKind(
        "rowwise_adagrad",
        2,
        (StateEntry("sum", "row", "initial_accumulator"),),
        "one G per row, G += mean(g^2)",
    ),
    SparseOptimizerKind(
        "adam",
        3,
        (StateEntry("exp_avg", "element"), StateEntry("exp_avg_sq", "element"), StateEntry("step", "step")),
        "lazy Adam, only the touched rows, bias-corrected by their step count",
    ),
)
BY_NAME: dict[str, SparseOptimizerKind] = {o.name: o for o in SPARSE_OPTIMIZERS}


def state_bytes(kind: str, step_count: str, rows: int, dim: int) -> int:
    """Bytes of the state of optimizer `kind` for `rows` rows of width `dim` (0 for a kind without)."""
    found = BY_NAME.get(kind)
    if found is None:
        return 0
    per = {"element": rows * dim * 4, "row": rows * 4, "step": (rows if step_count == "row" else 1) * 8}
    return sum(per[e.shape] for e in found.state)
