"""Refining a streamed k-way partition with whole neighbourhoods, the edge list still read in chunks:
rounds of size-constrained label propagation (Meyerhenke, Sanders, Schulz, "Partitioning Complex
Networks via Size-constrained Clustering", SEA 2014) whose moves into full parts are balanced pairwise
swaps (Kabiljo et al., "Social Hash Partitioner", VLDB 2017; Kernighan & Lin's exchange).

Why: Fennel and its restreaming passes place a vertex seeing only its neighbours in the chunk where it
first appears, so a vertex whose edges span chunks decides on part of them; and a degree-1 leaf that did
not fit beside its hub stays cut. Here every vertex sees all of its edges: one read of the chunks gathers
counts[v, q], v's edges into part q (k int32 counters per node: O(nodes * parts) memory), and a round
moves vertices on them:
1. one-way moves: each vertex goes to the part with room (at the round's start) holding most of its
   edges, when that is more than its own part holds; highest gain first, no part past its room;
2. swaps: for each pair of parts (i, j) with candidates both ways, the unmoved vertices of i that lose
   nothing by going to j and those of j that lose nothing by going to i, each sorted by gain, are
   exchanged pairwise while a pair's gains sum above zero: the node counts stay, so full parts can
   still trade (gene-pubmed: the leaves whose hub's part was full swap with nodes that lose nothing by
   leaving it).
Gains are counted at the round's start, so two neighbours moving at once may gain less than counted: the
next read measures the cut (it follows from the counts), and a round that did not lower it is undone,
which ends the refinement. The result is never worse than its input; the capacity is never passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from graphtrain.runtime.native import core as native_core
from graphtrain.runtime.native import ptr

# Reads of the edge list at most (each round's moves are checked by the next read; gene-pubmed and
# WordNet at 4 parts stop improving after 3-5: bench/RESULTS.md)
ROUNDS = 8

Edges = Iterable[tuple[np.ndarray, np.ndarray]]  # (src, dst) chunks
Chunks = Callable[[], Edges]  # a fresh read of them


def count_reference(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, counts: np.ndarray) -> None:
    """Python oracle of gt_fennel_count: each non-loop edge adds 1 to counts[src, parts[dst]] and to
    counts[dst, parts[src]] (counts: int32, nodes x parts, C order)."""
    keep = src != dst
    s, d = src[keep], dst[keep]
    np.add.at(counts, (s, parts[d]), 1)
    np.add.at(counts, (d, parts[s]), 1)


def count_chunk(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, counts: np.ndarray) -> None:
    """Native count_reference."""
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    rc = native_core().gt_fennel_count(
        int(len(src)),
        ptr(src, np.int64, "src"),
        ptr(dst, np.int64, "dst"),
        ptr(parts, np.int32, "parts"),
        int(counts.shape[1]),
        ptr(counts, np.int32, "counts"),
    )
    if rc != 0:
        raise RuntimeError(f"gt_fennel_count failed with code {rc}")


def neighbour_counts(chunks: Edges, parts: np.ndarray, k: int) -> np.ndarray:
    """counts[v, q]: v's edges (both directions, loops dropped, a repeated edge each time) into part q."""
    counts = np.zeros((len(parts), k), dtype=np.int32)
    for src, dst in chunks:
        if len(src):
            count_chunk(src, dst, parts, counts)
    return counts


def cut_of(counts: np.ndarray, parts: np.ndarray) -> int:
    """Cut edges of `parts` (a repeated edge each time), from the counts gathered for those parts."""
    total = int(counts.sum(dtype=np.int64))
    inside = int(counts[np.arange(len(parts)), parts].sum(dtype=np.int64))
    return (total - inside) // 2


def moves(counts: np.ndarray, parts: np.ndarray, cap: int) -> np.ndarray:
    """One round's new parts (module docstring: one-way moves, then swaps), from the counts of `parts`;
    ties keep a vertex where it is, equal gains go by id. No part ends above max(cap, its load)."""
    n, k = counts.shape
    rows = np.arange(n)
    own = counts[rows, parts]
    room = cap - np.bincount(parts, minlength=k)
    new = parts.copy()
    # 1. one-way: the best part with room or the own part (a tie with the own part has gain 0: stays)
    best = np.where(room > 0, counts, -1)
    best[rows, parts] = own
    target = best.argmax(axis=1).astype(np.int32)
    gain = best[rows, target].astype(np.int64) - own
    del best
    want = np.flatnonzero(gain > 0)
    want = want[np.lexsort((want, -gain[want]))]
    to = target[want]
    by_to = np.argsort(to, kind="stable")  # within a target: highest gain first
    to_sorted = to[by_to]
    rank = np.arange(len(to_sorted)) - np.searchsorted(to_sorted, to_sorted, side="left")
    fits = rank < np.maximum(room, 0)[to_sorted]
    new[want[by_to[fits]]] = to_sorted[fits]
    # 2. swaps among the unmoved that some other part costs nothing
    free = new == parts
    gain_to = counts - own[:, None]  # gain of moving v to each part; its own part is no move: -1
    gain_to[rows, parts] = -1
    free &= gain_to.max(axis=1) >= 0
    cand = np.flatnonzero(free)
    of_part = [cand[parts[cand] == i] for i in range(k)]
    # only pairs with candidates both ways can swap (vertices only leave `free`, so a pair without
    # them at the start has none later): at many parts few do, and all k(k-1)/2 were ~quadratic
    # (1,024 parts: 16 s a round)
    willing = np.zeros((k, k), dtype=bool)  # willing[i, j]: a candidate of part i loses nothing in j
    for i, v in enumerate(of_part):
        if len(v):
            willing[i] = (gain_to[v] >= 0).any(axis=0)
    for i, j in np.argwhere(np.triu(willing & willing.T, 1)).tolist():  # i < j, in the old loop's order
        a = _sorted_candidates(of_part[i], free, gain_to, j)
        b = _sorted_candidates(of_part[j], free, gain_to, i)
        m = min(len(a), len(b))
        m = int(np.count_nonzero(gain_to[a[:m], j] + gain_to[b[:m], i] > 0))
        new[a[:m]], new[b[:m]] = j, i
        free[a[:m]] = free[b[:m]] = False
    return new


def _sorted_candidates(v: np.ndarray, free: np.ndarray, gain_to: np.ndarray, j: int) -> np.ndarray:
    """The vertices v (one part's, in id order) still free that lose nothing going to part j, highest
    gain first, then by id."""
    v = v[free[v] & (gain_to[v, j] >= 0)]
    return v[np.lexsort((v, -gain_to[v, j]))]


def refine(chunks: Chunks, parts: np.ndarray, k: int, cap: int, rounds: int = ROUNDS) -> int:
    """Refine `parts` (every node placed) in place over up to `rounds` reads of `chunks()`; returns the
    reads made. Memory: the counts (int32, nodes x parts), a copy of the parts and one round's gains."""
    best = parts.copy()
    best_cut = -1
    for r in range(rounds):
        counts = neighbour_counts(chunks(), parts, k)
        cut = cut_of(counts, parts)
        if best_cut >= 0 and cut >= best_cut:  # the last round did not help: undo it, stop
            parts[:] = best
            return r + 1
        best[:], best_cut = parts, cut
        if r + 1 == rounds:
            break
        new = moves(counts, parts, cap)
        del counts
        if np.array_equal(new, parts):
            return r + 1
        parts[:] = new
    return rounds
