"""Sparse optimizers with DGL's shape of API: built from the embeddings and lr, then step() / zero_grad().

    emb = SparseEmbedding(n, 128, "node")
    opt = SparseAdam([emb], lr=0.003)
    loss = model(emb(ids)).sum(); loss.backward(); opt.step()

Each optimizer attaches its config to its tables; `step()` collects every gradient captured since the
last step and applies it, deduplicated on the native core (one writer per row).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, Protocol

import torch

from graphtrain.runtime.optim.config import OptimConfig


class SteppedTable(Protocol):
    """What an optimizer steps: a local SparseEmbedding, a DistEmbedding on shard servers or a
    CollectiveEmbedding held by the trainers (each applies the step where its rows are)."""

    name: str

    def attach(self, config: OptimConfig) -> None: ...

    def pending(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def clear(self) -> None: ...

    def apply_gradients(
        self, ids: torch.Tensor, grads: torch.Tensor, backend: str | None = None, wait: bool = True
    ) -> int: ...


class SparseOptimizer:
    """Base: holds the tables and their shared config."""

    def __init__(self, params: Iterable[SteppedTable], config: OptimConfig, backend: str | None = None):
        self.params: Sequence[SteppedTable] = list(params)
        if not self.params:
            raise ValueError("the optimizer needs at least one embedding")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"embedding names must be unique, got {names}")
        self.config = config
        self.backend = backend
        for p in self.params:
            p.attach(config)

    def step(self, wait: bool = True) -> int:
        """Apply every gradient captured since the last step; returns the unique rows updated.
        wait=False lets tables on shard servers apply it while the caller goes on (the next pull of
        those tables waits for it, so no read misses an update)."""
        updated = 0
        for p in self.params:
            ids, grads = p.pending()
            p.clear()
            updated += p.apply_gradients(ids, grads, self.backend, wait=wait)
        return updated

    def zero_grad(self) -> None:
        for p in self.params:
            p.clear()


class SparseSGD(SparseOptimizer):
    def __init__(
        self,
        params: Iterable[SteppedTable],
        lr: float,
        weight_decay: float = 0.0,
        duplicate: Literal["sum", "mean"] = "sum",
        backend: str | None = None,
    ):
        super().__init__(
            params, OptimConfig("sgd", lr, weight_decay=weight_decay, duplicate=duplicate), backend
        )


class SparseAdagrad(SparseOptimizer):
    """Element-wise Adagrad (torch.optim.Adagrad's formula on the touched rows)."""

    kind = "adagrad"
    default_duplicate: Literal["sum", "mean"] = "sum"

    def __init__(
        self,
        params: Iterable[SteppedTable],
        lr: float,
        eps: float = 1e-10,
        initial_accumulator: float = 0.0,
        weight_decay: float = 0.0,
        duplicate: Literal["sum", "mean"] | None = None,
        backend: str | None = None,
    ):
        config = OptimConfig(
            self.kind,  # type: ignore[arg-type]
            lr,
            eps=eps,
            initial_accumulator=initial_accumulator,
            weight_decay=weight_decay,
            duplicate=duplicate or self.default_duplicate,
        )
        super().__init__(params, config, backend)


class SparseRowwiseAdagrad(SparseAdagrad):
    """Row-wise Adagrad: one accumulator per row, G += mean(g^2) (DGL's distributed SparseAdagrad, FBGEMM).
    Duplicates are averaged by default, as DGL does."""

    kind = "rowwise_adagrad"
    default_duplicate = "mean"


class SparseAdam(SparseOptimizer):
    """Lazy Adam on the touched rows.

    step_count "row" is DGL's SparseAdam, "global" torch.optim.SparseAdam.
    """

    def __init__(
        self,
        params: Iterable[SteppedTable],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        step_count: Literal["row", "global"] = "row",
        duplicate: Literal["sum", "mean"] = "sum",
        backend: str | None = None,
    ):
        config = OptimConfig(
            "adam",
            lr,
            eps=eps,
            beta1=betas[0],
            beta2=betas[1],
            weight_decay=weight_decay,
            step_count=step_count,
            duplicate=duplicate,
        )
        super().__init__(params, config, backend)
