"""Sparse optimizers over embedding tables, on the native core (CPU or CUDA) or the torch reference.

from graphtrain.runtime.optim import SparseEmbedding, SparseAdam
"""

from graphtrain.runtime.optim.config import OptimConfig
from graphtrain.runtime.optim.embedding import SparseEmbedding, uniform_init
from graphtrain.runtime.optim.functional import choose_backend, sparse_step
from graphtrain.runtime.optim.optimizers import (
    SparseAdagrad,
    SparseAdam,
    SparseOptimizer,
    SparseRowwiseAdagrad,
    SparseSGD,
)
from graphtrain.runtime.optim.state import make_state

__all__ = [
    "OptimConfig",
    "SparseAdagrad",
    "SparseAdam",
    "SparseEmbedding",
    "SparseOptimizer",
    "SparseRowwiseAdagrad",
    "SparseSGD",
    "choose_backend",
    "make_state",
    "sparse_step",
    "uniform_init",
]
