"""One partition's in-edges as the shard server holds them for sampling (and a same-host client maps
from shared memory): an in-CSR over the partition's local rows with global source ids, and on a typed
graph each edge's type (a node's in-edges sorted by it, one run per relation).

`sample` draws sources only (untyped graphs, the wire's plain sample); `sample_edges` draws the same
edges by position and returns what a typed model reads too: each edge's type and its global id (the
partition's first edge id + its position), by which its features are pulled. With a fan-out per edge
type, each relation of a node is sampled on its own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native.backend import CoreBackend, choose
from graphtrain.runtime.storage.errors import StorageError


@dataclass
class Sampled:
    """Sampled in-edges of seeds, grouped by seed in seed order: sources, counts per seed, and (when
    asked) each edge's type and global edge id."""

    src: np.ndarray
    counts: np.ndarray
    etype: np.ndarray | None = None
    eid: np.ndarray | None = None


@dataclass
class GraphPart:
    """The in-edges of one partition's nodes [lo, hi): in-CSR over local rows, global source ids, and
    (typed) each edge's type; `edge_lo` is the global id of its first edge."""

    lo: int
    hi: int
    indptr: np.ndarray
    indices: np.ndarray
    etype: np.ndarray | None = None
    edge_lo: int = 0

    def sample_edges(
        self, seeds: np.ndarray, fanout: int, seed: int, type_fanouts: np.ndarray | None = None
    ) -> Sampled:
        """The in-edges `sample` draws (or, with `type_fanouts`, up to type_fanouts[r] of each seed's
        edges of type r: -1 all, 0 none), with each edge's type and global id.

        Raises:
            StorageError: a seed outside the partition, bad seeds, or per-type fan-outs without types.
        """
        if seeds.ndim != 1 or seeds.dtype != np.int64:
            raise StorageError(f"seeds must be a 1-D int64 array, got {seeds.dtype} {seeds.shape}")
        if type_fanouts is not None and self.etype is None:
            raise StorageError("fan-outs per edge type need a typed partition (this one has no edge types)")
        if choose() is CoreBackend.CPU:
            from graphtrain.runtime.native.graph import sample_edges

            try:
                pos, counts = sample_edges(
                    self.indptr, self.etype, self.lo, np.ascontiguousarray(seeds), fanout, type_fanouts, seed
                )
            except SparseInputError as exc:
                raise StorageError(str(exc)) from None
        else:
            pos, counts = self._positions(seeds, fanout, seed, type_fanouts)
        return Sampled(
            np.asarray(self.indices[pos]),
            counts,
            None if self.etype is None else np.asarray(self.etype[pos], dtype=np.int64),
            self.edge_lo + pos,
        )

    def _positions(
        self, seeds: np.ndarray, fanout: int, seed: int, type_fanouts: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The numpy fallback of sample_edges' positions: each run (a seed's row, or one relation of
        it) keeps its `take` edges of smallest random key."""
        bad = np.flatnonzero((seeds < self.lo) | (seeds >= self.hi))
        if bad.size:
            raise StorageError(
                f"seed {int(seeds[bad[0]])} is outside this partition's nodes [{self.lo}, {self.hi})"
            )
        local = seeds - self.lo
        starts, ends = self.indptr[local], self.indptr[local + 1]
        if type_fanouts is None:
            run_starts, run_lens, owner = starts, ends - starts, np.arange(len(seeds))
            limit = np.full(len(seeds), fanout)
        else:
            assert self.etype is not None
            edges = _ranges(starts, ends - starts)
            owner_e = np.repeat(np.arange(len(seeds)), ends - starts)
            types = np.asarray(self.etype[edges], dtype=np.int64)
            new_run = np.ones(len(edges), dtype=bool)
            new_run[1:] = (owner_e[1:] != owner_e[:-1]) | (types[1:] != types[:-1])
            first = np.flatnonzero(new_run)
            run_starts = edges[first]
            run_lens = np.diff(np.append(first, len(edges)))
            owner = owner_e[first]
            valid = (types[first] >= 0) & (types[first] < len(type_fanouts))
            limit = np.where(valid, type_fanouts[np.clip(types[first], 0, len(type_fanouts) - 1)], 0)
        take = np.where(limit < 0, run_lens, np.minimum(run_lens, np.maximum(limit, 0)))
        keys = np.random.default_rng([seed, int(seeds[0]) if len(seeds) else 0, len(seeds)]).random(
            int(run_lens.sum())
        )
        seg = np.repeat(np.arange(len(run_lens)), run_lens)
        order = np.lexsort((keys, seg))
        rank = np.arange(len(order)) - np.repeat(np.cumsum(run_lens) - run_lens, run_lens)
        chosen = np.sort(order[rank < np.repeat(take, run_lens)])  # run order, edge order inside
        pos = _ranges(run_starts, run_lens)[chosen]
        counts = np.bincount(owner, weights=take, minlength=len(seeds)).astype(np.int64)
        return pos, counts

    def sample(self, seeds: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to `fanout` in-neighbours of every seed, without replacement (fanout < 0: all of them).

        Returns (sources, counts): the sampled sources of seed i are the next counts[i] entries. The
        native sampler draws per (seed, node); the numpy fallback per request."""
        if seeds.ndim != 1 or seeds.dtype != np.int64:
            raise StorageError(f"seeds must be a 1-D int64 array, got {seeds.dtype} {seeds.shape}")
        if choose() is CoreBackend.CPU:
            from graphtrain.runtime.native.graph import sample_neighbors

            try:
                return sample_neighbors(
                    self.indptr, self.indices, self.lo, np.ascontiguousarray(seeds), fanout, seed
                )
            except SparseInputError as exc:
                raise StorageError(str(exc)) from None
        bad = np.flatnonzero((seeds < self.lo) | (seeds >= self.hi))
        if bad.size:
            raise StorageError(
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
