"""A learnable embedding table held in this process, trained by the sparse optimizers.

`emb(ids)` returns the rows as a leaf tensor that takes part in autograd (capture.py); the optimizer's
`step()` hands every captured (ids, grad) to the table, which reduces duplicates and updates rows and
state with the native core. DistEmbedding (sharded over the shard servers) follows the same protocol:
attach(config), pending(), clear(), apply_gradients(ids, grads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from graphtrain.runtime.native.memory import empty
from graphtrain.runtime.optim import functional
from graphtrain.runtime.optim.capture import GradientCapture
from graphtrain.runtime.optim.config import OptimConfig
from graphtrain.runtime.optim.state import make_state

InitFn = Callable[[torch.Tensor], None]


def uniform_init(low: float = -1.0, high: float = 1.0, seed: int = 0) -> InitFn:
    def init(t: torch.Tensor) -> None:
        t.uniform_(low, high, generator=torch.Generator().manual_seed(seed))

    return init


@dataclass
class SparseEmbedding:
    """`num_embeddings` x `dim` float32 rows with a sparse optimizer's state beside them."""

    num_embeddings: int
    dim: int
    name: str
    init: InitFn | None = None
    device: torch.device | str = "cpu"
    weight: torch.Tensor = field(init=False)
    config: OptimConfig | None = field(init=False, default=None)
    state: dict[str, torch.Tensor] = field(init=False, default_factory=dict)
    _capture: GradientCapture = field(init=False)

    def __post_init__(self) -> None:
        if self.num_embeddings < 1 or self.dim < 1:
            raise ValueError(f"embedding {self.name!r}: num_embeddings and dim must be >= 1")
        self.weight = empty((self.num_embeddings, self.dim), device=self.device)  # huge pages, if any, first
        (self.init or uniform_init())(self.weight)
        self._capture = GradientCapture(self.dim)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).to(torch.int64)
        rows = self.weight.index_select(0, flat)  # raises on ids out of range, before anything is recorded
        return self._capture.rows(flat, rows).view(*ids.shape, self.dim)

    def attach(self, config: OptimConfig) -> None:
        """Give the table an optimizer: creates its state (once; a second optimizer is refused)."""
        if self.config is not None and self.config != config:
            raise ValueError(f"embedding {self.name!r} already has optimizer {self.config.kind}")
        if self.config is None:
            self.config = config
            self.state = make_state(config, self.num_embeddings, self.dim, self.weight.device)

    def pending(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All (ids, grads) captured since the last step, concatenated in forward order."""
        return self._capture.pending(self.weight.device)

    def clear(self) -> None:
        self._capture.clear()

    def apply_gradients(
        self, ids: torch.Tensor, grads: torch.Tensor, backend: str | None = None, wait: bool = True
    ) -> int:
        """Reduce and apply (ids, grads) with the attached optimizer; returns the unique rows updated.
        A local table is updated at once (`wait` is for tables on shard servers)."""
        if self.config is None:
            raise ValueError(f"embedding {self.name!r} has no optimizer")
        return functional.sparse_step(self.config, self.weight, self.state, ids, grads, backend)
