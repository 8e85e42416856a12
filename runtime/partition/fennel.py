"""Fennel: streaming partitioning over an edge list read in chunks (Tsourakakis, Gkantsidis,
Radunovic, Vojnovic, "FENNEL: Streaming Graph Partitioning for Massive Scale Graphs", WSDM 2014).

Why Fennel and not LDG: both are one pass with O(nodes) state; LDG multiplies the neighbour count by the
room left, which for a hub whose neighbours sit in a nearly full part still says "go there", while
Fennel's additive penalty alpha*gamma*load^(gamma-1) with the hard capacity keeps balance and cut apart
(the paper's edge-cut is below LDG's on every graph it reports).

The input is an edge list, not vertex adjacency lists: each chunk's adjacency (both directions, self-
loops dropped) is built in memory, and the chunk's vertices are taken in the order they first appear
in it. A vertex is placed when it first appears, seeing its neighbours in that chunk that are already
placed; edges of later chunks can no longer move it in this pass (restreaming passes and the
refinement after them, refine.py, let them). Memory: the assignment (int32 per node) and per-part loads,
plus one chunk's arrays.

The per-vertex loop is native (cuda/src/fennel.cpp); `assign_chunk_reference` is the same algorithm in
Python, the tests' oracle. The pure decisions (parameters, score) are here and tested on their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from graphtrain.runtime.native import core as native_core
from graphtrain.runtime.native import ptr
from graphtrain.runtime.partition import refine

GAMMA = 1.5  # the paper's choice: alpha = sqrt(k) * m / n^1.5 then makes the penalty scale-free
UNPLACED = -1  # parts[v]: not placed yet
DEFERRED = -2  # parts[v]: left out of the stream, placed after it (place_deferred); never a neighbour vote
# ReFennel passes (gene-pubmed, 4 parts: 1 gives most of the gain, 3 converge; bench/RESULTS.md)
RESTREAM_PASSES = 3


@dataclass(frozen=True)
class FennelParams:
    """The objective's constants and the capacity (largest node weight a part may hold)."""

    num_parts: int
    alpha: float
    gamma: float
    cap: int


def params(num_nodes: int, num_edges: int, num_parts: int, max_imbalance: float) -> FennelParams:
    """The paper's alpha = sqrt(k) * m / n^gamma (m: edges of the stream) and the node capacity
    floor((1 + max_imbalance) * n / k), as METIS' caps (never below ceil(n / k): the nodes must fit)."""
    n = max(num_nodes, 1)
    alpha = math.sqrt(num_parts) * num_edges / n**GAMMA
    cap = max(math.floor((1.0 + max_imbalance) * n / num_parts), -(-n // num_parts))
    return FennelParams(num_parts, alpha, GAMMA, cap)


def scores(counts: np.ndarray, loads: np.ndarray, p: FennelParams) -> np.ndarray:
    """Fennel's gain of each part for one vertex: its neighbours there minus the marginal load cost."""
    return counts - p.alpha * p.gamma * np.power(loads.astype(np.float64), p.gamma - 1.0)


def _rotation(seed: int, v: int, k: int) -> int:
    """The native core's seeded tie-break rotation (splitmix64 of seed ^ v), mod k."""
    mask = 2**64 - 1
    x = ((seed ^ v) + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return (x ^ (x >> 31)) % k


def choose(counts: np.ndarray, loads: np.ndarray, p: FennelParams, seed: int, v: int, w: int = 1) -> int:
    """The part of vertex v (capacity weight w): best score among parts with room, ties to the lower
    load, then to the first in v's seeded rotation of the parts; no room anywhere: the least loaded."""
    k = p.num_parts
    s = scores(counts, loads, p)
    rot = _rotation(seed, v, k)
    best = -1
    for j in range(k):
        q = (j + rot) % k
        if loads[q] + w > p.cap:
            continue
        if best < 0 or s[q] > s[best] or (s[q] == s[best] and loads[q] < loads[best]):
            best = q
    return best if best >= 0 else int(np.argmin(loads))


@dataclass(frozen=True)
class Chunk:
    """One chunk's vertices in stream order and their adjacency within the chunk (global ids)."""

    verts: np.ndarray
    xadj: np.ndarray
    adj: np.ndarray


def chunk_adjacency(src: np.ndarray, dst: np.ndarray) -> Chunk:
    """The chunk's undirected adjacency: each non-loop edge in both directions, vertices ordered by
    first appearance (src before dst of each edge). Self-loop-only vertices are listed too."""
    both = np.empty(2 * len(src), dtype=np.int64)
    both[0::2], both[1::2] = src, dst
    verts, first, local = np.unique(both, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # stream order of the distinct vertices
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    row = rank[local]
    a, b = row[0::2], row[1::2]
    keep = a != b
    rows = np.concatenate([a[keep], b[keep]])
    cols = np.concatenate([dst[keep], src[keep]]).astype(np.int64)
    by_row = np.argsort(rows, kind="stable")
    xadj = np.zeros(len(verts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(verts)), out=xadj[1:])
    return Chunk(np.ascontiguousarray(verts[order]), xadj, np.ascontiguousarray(cols[by_row]))


def assign_chunk_reference(
    chunk: Chunk,
    parts: np.ndarray,
    loads: np.ndarray,
    p: FennelParams,
    seed: int,
    weight: np.ndarray | None = None,
    seen: np.ndarray | None = None,
) -> None:
    """Python oracle of gt_fennel_assign (seen None) and gt_fennel_restream: place the chunk's unplaced
    (not deferred) vertices in stream order, each of capacity weight weight[v] (None: 1); or, in a
    restreaming pass (ReFennel), take each placed vertex not yet seen this pass out of its part and place
    it again, all its placed neighbours in the chunk voting."""
    for i, v in enumerate(chunk.verts.tolist()):
        w = 1 if weight is None else int(weight[v])
        if seen is None:
            if parts[v] != UNPLACED:
                continue
        else:
            if parts[v] < 0 or seen[v]:
                continue
            seen[v] = 1
            loads[parts[v]] -= w
            parts[v] = UNPLACED
        nbr = parts[chunk.adj[chunk.xadj[i] : chunk.xadj[i + 1]]]
        counts = np.bincount(nbr[nbr >= 0], minlength=p.num_parts)
        q = choose(counts, loads, p, seed, v, w)
        parts[v] = q
        loads[q] += w


def assign_chunk(
    chunk: Chunk,
    parts: np.ndarray,
    loads: np.ndarray,
    p: FennelParams,
    seed: int,
    weight: np.ndarray | None = None,
    seen: np.ndarray | None = None,
) -> int:
    """Native assign_chunk_reference (parts, loads updated; `seen`: a restreaming pass's flags, uint8
    per node, zeroed before the pass); returns how many were placed in a full part."""
    stats = np.zeros(2, dtype=np.int64)
    args = [
        int(len(chunk.verts)),
        ptr(chunk.verts, np.int64, "verts"),
        ptr(chunk.xadj, np.int64, "xadj"),
        ptr(chunk.adj, np.int64, "adj"),
        ptr(parts, np.int32, "parts"),
        None if weight is None else ptr(weight, np.int64, "weight"),
        int(p.num_parts),
        ptr(loads, np.int64, "loads"),
        int(p.cap),
        float(p.alpha),
        float(p.gamma),
        int(seed) & (2**64 - 1),
        ptr(stats, np.int64, "stats"),
    ]
    lib = native_core()
    if seen is None:
        rc = lib.gt_fennel_assign(*args)
    else:
        rc = lib.gt_fennel_restream(*args, ptr(seen, np.uint8, "seen"))
    if rc != 0:
        raise RuntimeError(f"gt_fennel_{'assign' if seen is None else 'restream'} failed with code {rc}")
    return int(stats[1])


class Leaves:
    """Finds the degree-1 vertices (one distinct neighbour, loops ignored) over a stream of chunks,
    in O(nodes): the lowest and highest neighbour id and the degree of every vertex (int64 each)."""

    def __init__(self, num_nodes: int) -> None:
        self.lo = np.full(num_nodes, num_nodes, dtype=np.int64)
        self.hi = np.full(num_nodes, -1, dtype=np.int64)
        self.degree = np.zeros(num_nodes, dtype=np.int64)

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        keep = src != dst
        a = np.concatenate([src[keep], dst[keep]])
        b = np.concatenate([dst[keep], src[keep]])
        np.minimum.at(self.lo, a, b)
        np.maximum.at(self.hi, a, b)
        # np.add.at, not a bincount of minlength num_nodes: that is O(nodes) a chunk, and the passes
        # O(nodes x chunks) (at 100M nodes 1.4 s a chunk of 262,144 edges, against 9 ms)
        np.add.at(self.degree, a, 1)

    def anchors(self) -> np.ndarray:
        """Every vertex's anchor: its only neighbour when it has one and that neighbour has more (a
        leaf hanging off the core), -1 otherwise (pairs of leaves are streamed as they come)."""
        single = self.lo == self.hi
        anchor = np.where(single, self.lo, -1)
        hang = single.copy()
        hang[single] = ~single[anchor[single]]
        return np.where(hang, anchor, -1)

    def isolated(self) -> np.ndarray:
        """Vertices with no neighbour but themselves (placed after the stream, where there is room)."""
        return self.hi < 0


def defer(anchor: np.ndarray, isolated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The initial parts (leaves and isolated vertices DEFERRED, the rest UNPLACED) and every vertex's
    capacity weight: itself plus the leaves anchored on it (they will follow it when there is room)."""
    n = len(anchor)
    leaf = anchor >= 0
    parts = np.full(n, UNPLACED, dtype=np.int32)
    parts[leaf | isolated] = DEFERRED
    weight = np.ones(n, dtype=np.int64)
    weight += np.bincount(anchor[leaf], minlength=n)
    return parts, weight


def place_deferred(parts: np.ndarray, anchor: np.ndarray, cap: int, num_parts: int) -> np.ndarray:
    """After the stream: each deferred leaf to its anchor's part while that part holds fewer than `cap`
    nodes (leaves in id order), then the rest (leaves that did not fit, isolated vertices) levelled by
    place_isolated. Returns the node count per part."""
    deferred = np.flatnonzero(parts == DEFERRED)
    parts[deferred] = UNPLACED
    loads = np.bincount(parts[parts >= 0], minlength=num_parts).astype(np.int64)
    leaves = deferred[anchor[deferred] >= 0]
    want = parts[anchor[leaves]].astype(np.int64)
    order = np.argsort(want, kind="stable")
    sorted_want = want[order]
    rank = np.arange(len(order)) - np.searchsorted(sorted_want, sorted_want, side="left")
    fits = rank < np.maximum(0, cap - loads)[sorted_want]
    parts[leaves[order[fits]]] = sorted_want[fits]
    loads += np.bincount(sorted_want[fits], minlength=num_parts)
    place_isolated(parts, loads)
    return loads


def stream_assign(
    chunks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
    num_nodes: int,
    num_edges: int,
    num_parts: int,
    max_imbalance: float,
    seed: int,
    leaves: Leaves | None = None,
    passes: int = RESTREAM_PASSES,
    rounds: int = refine.ROUNDS,
) -> np.ndarray:
    """Fennel over (src, dst) chunks (`chunks()` reads them once more each pass): the part (int32) of
    every node. With `leaves` (a Leaves that has seen every edge), degree-1 vertices are deferred (defer)
    and follow their anchor after the stream (place_deferred), the first pass weighing each vertex with
    its leaves; `passes` restreaming passes (ReFennel) place every streamed vertex again, weight 1, all
    its placed neighbours voting; nodes no edge names are placed last, levelling the parts; then up to
    `rounds` reads refine the parts with every vertex's whole neighbourhood (refine.py). Memory: O(nodes)
    (parts, weights, seen flags; the refinement's k counters per node) and one chunk."""
    p = params(num_nodes, num_edges, num_parts, max_imbalance)
    loads = np.zeros(num_parts, dtype=np.int64)
    if leaves is None:
        parts, weight, anchor = np.full(num_nodes, UNPLACED, dtype=np.int32), None, None
    else:
        anchor = leaves.anchors()
        parts, weight = defer(anchor, leaves.isolated())
        # the paper's alpha for the graph actually streamed: its nodes and the edges among them
        # (gene-pubmed: 3.3x the whole graph's; cut 24.1 -> 20.6 %)
        core, leaf = parts == UNPLACED, anchor >= 0
        m_core = (int(leaves.degree[core].sum()) - int(leaves.degree[leaf].sum())) // 2
        p = replace(p, alpha=params(int(core.sum()), m_core, num_parts, max_imbalance).alpha)
    for src, dst in chunks():
        if len(src):
            assign_chunk(chunk_adjacency(src, dst), parts, loads, p, seed, weight)
    if passes and weight is not None:
        # restreaming counts nodes, not the leaves reserved: with the parts full of reservations a heavy
        # hub could never move (gene-pubmed: 34.0 % cut so, 24.1 % this way); leaves that then do not fit
        # with their anchor are levelled by place_deferred, within the cap
        loads = np.bincount(parts[parts >= 0], minlength=num_parts).astype(np.int64)
    for _ in range(passes):
        seen = np.zeros(num_nodes, dtype=np.uint8)
        for src, dst in chunks():
            if len(src):
                assign_chunk(chunk_adjacency(src, dst), parts, loads, p, seed, None, seen)
    if anchor is None:
        place_isolated(parts, loads)
    else:
        place_deferred(parts, anchor, p.cap, num_parts)
    refine.refine(chunks, parts, num_parts, p.cap, rounds)
    return parts


def place_isolated(parts: np.ndarray, loads: np.ndarray) -> None:
    """Fill each part up to the same count with the nodes no edge placed, in id order (no cut at stake)."""
    left = np.flatnonzero(parts < 0)
    if not len(left):
        return
    k = len(loads)
    target = loads.copy()
    total = int(loads.sum()) + len(left)
    # water-filling: the highest level L with sum(max(0, L - load)) <= the isolated nodes (bisection)
    lo, hi = 0, total // k + 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(np.maximum(0, mid - target).sum()) <= len(left):
            lo = mid
        else:
            hi = mid - 1
    room = np.maximum(0, lo - target)
    extra = len(left) - int(room.sum())
    order = np.argsort(target, kind="stable")
    room[order[:extra]] += 1
    parts[left] = np.repeat(np.arange(k, dtype=np.int32), room)
    loads += room


def in_chunks(src: np.ndarray, dst: np.ndarray, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(src, dst) of in-memory edges, `size` at a time (the in-memory pipeline and tests)."""
    for lo in range(0, len(src), size):
        yield src[lo : lo + size], dst[lo : lo + size]
