"""The bytes of a sparse optimizer's state, and a dynamic vocabulary's share per holder, without torch:
what storage/placement.py checks a shard against and what runtime/capacity.py plans with, also in the
partition Job, which never imports torch."""

from __future__ import annotations

from graphtrain.contract import optimizers


def state_bytes(kind: str, step_count: str, rows: int, dim: int) -> int:
    """Bytes of a sparse optimizer's state for `rows` rows of width `dim` (runtime/optim/state.py's
    layout: contract/optimizers.py)."""
    return optimizers.state_bytes(kind, step_count, rows, dim)


def share(capacity: int, holders: int, index: int) -> int:
    """Rows that holder `index` of `holders` keeps of a dynamic vocabulary of `capacity` rows (the keys
    k with k mod holders = index: an even split, the first ones one row more)."""
    return capacity // holders + (1 if index < capacity % holders else 0)
