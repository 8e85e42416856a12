"""Element types a table may have, by wire name: the one table behind the protocol (numpy), the shard
state and the clients (torch). Node data kept as bool or int8 in a partition travels as int32."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

NUMPY: dict[str, np.dtype[Any]] = {name: np.dtype(name) for name in ("float32", "float64", "int32", "int64")}
WIDENED = {"bool": "int32", "int8": "int32"}


def wire_name(dtype: object, widen: bool = False) -> str | None:
    """The wire name of a numpy or torch dtype (or of a name), None when it cannot travel; `widen`
    maps bool and int8 node data to int32."""
    name = str(dtype).removeprefix("torch.")
    if widen:
        name = WIDENED.get(name, name)
    return name if name in NUMPY else None


def to_torch(name: str) -> torch.dtype:
    """The torch dtype of a wire name (torch names its dtypes as numpy does)."""
    import torch

    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype
