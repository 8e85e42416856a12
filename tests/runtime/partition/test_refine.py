"""Refinement of a streamed partition (refine.py): the native counts against the oracle, the cut from the
counts, one-way moves and swaps by hand, a round that raises the cut undone, and on planted graphs a
cut never above the stream's with every part within the capacity."""

from __future__ import annotations

import numpy as np
import pytest

from graphtrain.runtime.partition import fennel, refine
from tests.conftest import planted_graph

pytestmark = pytest.mark.timeout(120)


def cut_edges(src: np.ndarray, dst: np.ndarray, parts: np.ndarray) -> int:
    return int(np.count_nonzero((parts[src] != parts[dst]) & (src != dst)))


def test_native_counts_equal_the_oracle() -> None:
    rng = np.random.default_rng(0)
    n, k = 500, 5
    src, dst = rng.integers(0, n, 4000), rng.integers(0, n, 4000)
    src[:50] = dst[:50]  # loops, dropped
    src[50:60], dst[50:60] = 7, 9  # a repeated edge counts each time
    parts = rng.integers(0, k, n).astype(np.int32)
    oracle = np.zeros((n, k), np.int32)
    refine.count_reference(src, dst, parts, oracle)
    native = refine.neighbour_counts(fennel.in_chunks(src, dst, 333), parts, k)
    assert np.array_equal(native, oracle)
    assert oracle[7, parts[9]] >= 10 and oracle.sum() == 2 * np.count_nonzero(src != dst)
    assert refine.cut_of(native, parts) == cut_edges(src, dst, parts)


def two_cliques() -> tuple[np.ndarray, np.ndarray]:
    """Cliques {0..3} and {4..7} tied by the edge 3-4."""
    pairs = [(a, b) for c in (range(4), range(4, 8)) for a in c for b in c if a < b] + [(3, 4)]
    src, dst = np.array(pairs).T
    return src, dst


def test_full_parts_swap_their_misplaced_nodes() -> None:
    """3 and 7 each sit in the other clique's part, both parts full (cap 4): no one-way move has room,
    the swap of the two moves both home, node counts unchanged; the cut drops from 6 to 1."""
    src, dst = two_cliques()
    parts = np.array([0, 0, 0, 1, 1, 1, 1, 0], dtype=np.int32)
    counts = refine.neighbour_counts([(src, dst)], parts, 2)
    assert refine.cut_of(counts, parts) == cut_edges(src, dst, parts) == 6
    new = refine.moves(counts, parts, cap=4)
    assert new.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert np.bincount(new).tolist() == [4, 4] and cut_edges(src, dst, new) == 1


def test_one_way_moves_fill_the_room_highest_gain_first() -> None:
    """Part 0 (the 4-clique 0, 1, 2, 7) has room for one more (cap 5): 6 (3 edges into it) and 5 (1)
    both want it; 6, the higher gain, goes, 5 waits; no vertex of part 0 gains by leaving, so no swap."""
    src = np.array([0, 0, 0, 1, 1, 2, 6, 6, 6, 5, 3])
    dst = np.array([1, 2, 7, 2, 7, 7, 0, 1, 2, 0, 4])
    parts = np.array([0, 0, 0, 1, 1, 1, 1, 0], dtype=np.int32)
    counts = refine.neighbour_counts([(src, dst)], parts, 2)
    new = refine.moves(counts, parts, cap=5)
    assert new.tolist() == [0, 0, 0, 1, 1, 1, 0, 0]
    assert np.bincount(new).tolist() == [5, 3]
    assert (cut_edges(src, dst, parts), cut_edges(src, dst, new)) == (4, 1)


def test_a_round_that_raises_the_cut_is_undone() -> None:
    """0 and 2 share a doubled edge; each gains 1 by joining the other's part, so both move at once
    and the cut goes from 2 to 4: the next read sees it, restores the parts and stops."""
    src, dst = np.array([0, 0, 0, 2]), np.array([2, 2, 1, 3])
    parts = np.array([0, 0, 1, 1], dtype=np.int32)
    counts = refine.neighbour_counts([(src, dst)], parts, 2)
    assert cut_edges(src, dst, refine.moves(counts, parts, cap=3)) == 4
    reads = refine.refine(lambda: [(src, dst)], parts, 2, cap=3)
    assert reads == 2 and parts.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [2, 4, 7])
def test_refinement_lowers_the_cut_within_the_capacity(seed: int, k: int) -> None:
    g = planted_graph(n=1500, k=4, seed=seed)
    src, dst = g.edges()
    leaves = fennel.Leaves(g.num_nodes)
    leaves.add(src, dst)
    chunks = lambda: fennel.in_chunks(src, dst, 500)  # noqa: E731
    streamed = fennel.stream_assign(chunks, g.num_nodes, g.num_edges, k, 0.05, seed, leaves, rounds=0)
    parts = streamed.copy()
    reads = refine.refine(chunks, parts, k, fennel.params(g.num_nodes, g.num_edges, k, 0.05).cap)
    assert 1 <= reads <= refine.ROUNDS
    assert cut_edges(src, dst, parts) < cut_edges(src, dst, streamed)
    assert np.bincount(parts, minlength=k).max() <= fennel.params(g.num_nodes, g.num_edges, k, 0.05).cap
    again = fennel.stream_assign(chunks, g.num_nodes, g.num_edges, k, 0.05, seed, leaves)
    assert np.array_equal(again, parts)  # stream_assign refines by default, deterministically


@pytest.mark.parametrize("seed", range(5))
def test_moves_never_pass_the_capacity(seed: int) -> None:
    """Random graphs and parts, some parts over the cap already: none ends above max(cap, its load)."""
    rng = np.random.default_rng(seed)
    n, k = 300, 4
    src, dst = rng.integers(0, n, 2000), rng.integers(0, n, 2000)
    parts = rng.choice(k, n, p=[0.4, 0.3, 0.2, 0.1]).astype(np.int32)
    loads = np.bincount(parts, minlength=k)
    cap = int(np.sort(loads)[1]) + 5  # the two largest parts over it, the rest with some room
    new = refine.moves(refine.neighbour_counts([(src, dst)], parts, k), parts, cap)
    assert (np.bincount(new, minlength=k) <= np.maximum(cap, loads)).all()
    assert not np.array_equal(new, parts)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [2, 5, 16, 40])
def test_swaps_over_the_willing_pairs_equal_those_over_every_pair(seed: int, k: int) -> None:
    """refine.moves visits only the part pairs with candidates both ways; over every pair (the old
    quadratic loop, 16 s a round at 1,024 parts) the result is the same, vertex for vertex."""
    rng = np.random.default_rng(seed)
    n = 400
    parts = rng.permutation(np.arange(n) % k).astype(np.int32)
    counts = rng.poisson(0.6, (n, k)).astype(np.int32)
    cap = n // k  # every part full: swaps carry the moves
    got = refine.moves(counts, parts, cap)
    want = _old_moves(counts, parts, cap)
    assert np.array_equal(got, want)
    assert not np.array_equal(got, parts) or k == 2


def _old_moves(counts: np.ndarray, parts: np.ndarray, cap: int) -> np.ndarray:
    """refine.moves before the willing pairs: the same one-way moves, then swaps over every pair."""
    n, k = counts.shape
    rows = np.arange(n)
    own = counts[rows, parts]
    room = cap - np.bincount(parts, minlength=k)
    assert (room <= 0).all()  # no one-way move: every part full
    new = parts.copy()
    free = np.ones(n, dtype=bool)
    gain_to = counts - own[:, None]
    gain_to[rows, parts] = -1
    free &= gain_to.max(axis=1) >= 0
    cand = np.flatnonzero(free)
    of_part = [cand[parts[cand] == i] for i in range(k)]
    for i in range(k):
        for j in range(i + 1, k):
            a = refine._sorted_candidates(of_part[i], free, gain_to, j)
            b = refine._sorted_candidates(of_part[j], free, gain_to, i)
            m = min(len(a), len(b))
            m = int(np.count_nonzero(gain_to[a[:m], j] + gain_to[b[:m], i] > 0))
            new[a[:m]], new[b[:m]] = j, i
            free[a[:m]] = free[b[:m]] = False
    return new
