"""Feature transforms applied before partitioning.

random_projection: a seeded Gaussian random projection, X @ R with R ~ N(0, 1/dim). It turns a sparse
bag-of-words (WordNet: 18,130 dims) into dense rows the shard servers can hold and a model can read
(DGL's baseline on WordNet uses the same 256-dim projection), preserving distances in expectation.
"""

from __future__ import annotations

import numpy as np
import psutil
import scipy.sparse as sp

from graphtrain.runtime import memlimits
from graphtrain.runtime.data.graph import Graph, human
from graphtrain.runtime.errors import DataError


def projection_bytes(rows: int, columns: int, dim: int) -> int:
    """Peak bytes of projecting `rows` x `columns` features to `dim`: the random matrix drawn in float64
    and cast to float32 (12 bytes an entry), and the projected rows."""
    return 12 * columns * dim + 4 * rows * dim


def random_projection(feat: np.ndarray | sp.csr_matrix, dim: int, seed: int = 0) -> np.ndarray:
    """`feat` @ R, R ~ N(0, 1/dim) seeded.

    Raises:
        DataError: the random matrix does not fit the available memory: a sparse file may declare any
            number of columns (a 1 KB .npz claiming 2**40 asked for 128 TiB).
    """
    if dim < 1:
        raise ValueError(f"projection dimension must be >= 1, got {dim}")
    need = projection_bytes(*feat.shape, dim)
    available = min(int(psutil.virtual_memory().available), memlimits.ceiling().bytes)  # a pod's limit too
    if need > available:
        raise DataError(
            f"model.featureProjection: projecting {feat.shape[1]:,} feature columns to {dim} needs "
            f"{human(need)}, more than the {human(available)} available (the features declare that many)"
        )
    r = np.random.default_rng(seed).standard_normal((feat.shape[1], dim)).astype(np.float32) / np.sqrt(dim)
    out = feat @ r
    return np.ascontiguousarray(np.asarray(out, dtype=np.float32))


def project_graph_features(graph: Graph, dim: int, seed: int = 0) -> Graph:
    """The graph with its features replaced by their projection (a no-op without features); the
    projected columns are no longer the named ones. A typed graph's types then share the projected
    columns (each type's block projected by its own rows of the one random matrix)."""
    if graph.feat is not None:
        graph.feat = random_projection(graph.feat, dim, seed)
        graph.feature_names = None
        graph.feature_blocks = {t: (0, dim) for t in graph.feature_blocks}
    return graph
