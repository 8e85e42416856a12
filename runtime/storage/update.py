"""The optimizer step on a table's rows under its lock: what a shard server's push_grad (state.py) and
standalone's direct path (direct.py) both do once their gradients are where the rows are."""

from __future__ import annotations

import torch

from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.optim import sparse_step
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage import keyed as kd
from graphtrain.runtime.storage.shard import TensorShard, before_write


def locked_step(
    t: TensorShard,
    local: torch.Tensor,
    grads: torch.Tensor | list[torch.Tensor],
    step: int | None,
    finite: bool,
    max_threads: int | None = None,
) -> int:
    """The optimizer step on local rows of `t`, under its lock (the caller holds it): a checkpoint being
    written keeps the old rows, the write is ordered after the table's last one, and Adam's table-wide
    count is the client's `step` (so all shards agree even when a push skips some of them; None: this
    shard's next count). Shard servers and standalone's device path (direct.py) both step here.
    max_threads: as sparse_step's (1 for a server's I/O thread).

    Raises:
        NonFiniteGradient, SparseInputError: as sparse_step; nothing was modified.
    """
    assert t.config is not None
    global_adam = kd.global_step(t.config)
    before_write(t, local)  # a checkpoint being written keeps the old values
    gpu.wait_written(t)
    # kept as a tensor where it lives: reading it back would wait for a GPU table's device
    saved = t.state["step"].clone() if global_adam else None
    if global_adam and step is not None:
        t.state["step"].fill_(step - 1)  # sparse_step adds one
    try:
        seed = t.round_seed() if t.data.dtype != torch.float32 else 0
        updated = sparse_step(
            t.config, t.data, t.state, local, grads, finite=finite, round_seed=seed, max_threads=max_threads
        )
    except (NonFiniteGradient, SparseInputError):
        if saved is not None:
            t.state["step"].copy_(saved)
        raise
    gpu.mark_written(t)
    return updated


def nonfinite_refusal(name: str, rows: int, first_id: int) -> str:
    """Why a push of gradients holding NaN or infinity was refused: one wording for shard servers
    (state.py) and standalone's direct path (direct.py). rows 0: finite rows of `first_id` summed to
    infinity."""
    if rows == 0:  # every row finite, one id's rows summed to infinity (the CPU core checks the sums)
        return f"push_grad of {name!r}: the gradients of id {first_id} sum to infinity; no row was updated"
    return (
        f"push_grad of {name!r}: {rows} gradient row(s) hold NaN or infinity (first id {first_id}); "
        "no row was updated"
    )
