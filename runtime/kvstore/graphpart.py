"""One partition's in-edges as the shard server holds them for sampling (and a same-host client maps
from shared memory): an in-CSR over the partition's local rows with global source ids."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.kvstore.protocol import ProtocolError
from graphtrain.runtime.native.backend import CoreBackend, choose


@dataclass
class GraphPart:
    """The in-edges of one partition's nodes [lo, hi): in-CSR over local rows, global source ids."""

    lo: int
    hi: int
    indptr: np.ndarray
    indices: np.ndarray

    def sample(self, seeds: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to `fanout` in-neighbours of every seed, without replacement (fanout < 0: all of them).

        Returns (sources, counts): the sampled sources of seed i are the next counts[i] entries. The
        native sampler draws per (seed, node); the numpy fallback per request."""
        if seeds.ndim != 1 or seeds.dtype != np.int64:
            raise ProtocolError(f"seeds must be a 1-D int64 array, got {seeds.dtype} {seeds.shape}")
        if choose() is CoreBackend.CPU:
            from graphtrain.runtime.native.graph import sample_neighbors

            try:
                return sample_neighbors(
                    self.indptr, self.indices, self.lo, np.ascontiguousarray(seeds), fanout, seed
                )
            except SparseInputError as exc:
                raise ProtocolError(str(exc)) from None
        bad = np.flatnonzero((seeds < self.lo) | (seeds >= self.hi))
        if bad.size:
            raise ProtocolError(
                f"seed {int(seeds[bad[0]])} is outside this partition's nodes [{self.lo}, {self.hi})"
            )
        local = seeds - self.lo
        starts = self.indptr[local]
        degs = self.indptr[local + 1] - starts
        counts = degs if fanout < 0 else np.minimum(degs, fanout)
        out = np.empty(int(counts.sum()), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        full = counts == degs
        if full.any():  # every in-neighbour
            f_starts, f_counts = starts[full], counts[full]
            src_pos = _ranges(f_starts, f_counts)
            dst_pos = _ranges(offsets[:-1][full], f_counts)
            out[dst_pos] = self.indices[src_pos]
        part = ~full
        if part.any():  # `fanout` of them: the smallest random keys within each seed's edges
            p_starts, p_degs = starts[part], degs[part]
            keys = np.random.default_rng([seed, int(seeds[0]), len(seeds)]).random(int(p_degs.sum()))
            seg = np.repeat(np.arange(len(p_degs)), p_degs)
            order = np.lexsort((keys, seg))
            rank = np.arange(len(order)) - np.repeat(np.cumsum(p_degs) - p_degs, p_degs)
            keep = order[rank < fanout]  # positions (in the concatenated edge lists) of the winners
            edge = _ranges(p_starts, p_degs)[keep]
            dst_pos = _ranges(offsets[:-1][part], np.full(len(p_degs), fanout))
            out[dst_pos] = self.indices[edge]
        return out, counts.astype(np.int64)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + c) for each (s, c)."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)
