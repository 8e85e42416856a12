"""What a client does to a push's rows before they leave it: the last value of each repeated id for an
overwrite, and the sum or mean of each id's gradients for an optimizer step (so the shards never see
an id twice in one push and may apply its pieces in any order)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def last_of_each(ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, values) with only the last occurrence of each repeated id, in their order."""
    if len(ids) < 2:
        return ids, values
    _, from_end = np.unique(ids[::-1], return_index=True)
    if len(from_end) == len(ids):
        return ids, values
    keep = np.sort(len(ids) - 1 - from_end)
    return ids[keep], values[keep]


class GradientReducer:
    """Each distinct id's gradient, summed or averaged: the native core's dedup (its workspace kept
    between pushes), or the reference one where the core is not the CPU's."""

    def __init__(self) -> None:
        self._workspace: Any = None

    def reduce(
        self, ids: np.ndarray, grads: np.ndarray, rows: int, mean: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """(distinct ids, their reduced float32 gradients); `rows`: the table's rows, -1 for a dynamic
        vocabulary's keys (any int64)."""
        from graphtrain.runtime.native.backend import CoreBackend, choose

        ids = np.ascontiguousarray(ids, dtype=np.int64)
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if len(ids) and choose() is CoreBackend.CPU:
            from graphtrain.runtime.native import optim as native
            from graphtrain.runtime.optim.functional import threads

            if self._workspace is None:
                self._workspace = native.DedupWorkspace()
            uids, ugrads, _ = native.dedup(
                torch.from_numpy(ids),
                torch.from_numpy(grads),
                rows,
                mean,
                threads(),
                self._workspace,
                share_distinct=True,  # distinct ids (a GraphSAGE batch's input nodes): no 2nd copy
            )
            return uids.numpy(), ugrads.numpy()
        from graphtrain.runtime.optim.reference import dedup

        u, g = dedup(torch.from_numpy(ids), torch.from_numpy(grads), "mean" if mean else "sum")
        return u.numpy(), g.numpy()
