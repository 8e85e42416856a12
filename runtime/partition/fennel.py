"""Fennel: one-pass streaming partitioning over an edge list read in chunks (Tsourakakis, Gkantsidis,
Radunovic, Vojnovic, "FENNEL: Streaming Graph Partitioning for Massive Scale Graphs", WSDM 2014).

Why Fennel and not LDG: both are one pass with O(nodes) state; LDG multiplies the neighbour count by the
room left, which for a hub whose neighbours sit in a nearly full part still says "go there", while
Fennel's additive penalty alpha*gamma*load^(gamma-1) with the hard capacity keeps balance and cut apart
(the paper's edge-cut is below LDG's on every graph it reports).

The input is an edge list, not vertex adjacency lists: each chunk's adjacency (both directions, self-
loops dropped) is built in memory, and the chunk's vertices are taken in the order they first appear
in it. A vertex is placed when it first appears, seeing its neighbours in that chunk that are already
placed; edges of later chunks can no longer move it (the price of one pass). Memory: the assignment
(int32 per node) and per-part loads, plus one chunk's arrays.

The per-vertex loop is native (cuda/src/fennel.cpp); `assign_chunk_reference` is the same algorithm in
Python, the tests' oracle. The pure decisions (parameters, score) are here and tested on their own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from graphtrain.runtime.native import core as native_core
from graphtrain.runtime.native import ptr

GAMMA = 1.5  # the paper's choice: alpha = sqrt(k) * m / n^1.5 then makes the penalty scale-free


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


def choose(counts: np.ndarray, loads: np.ndarray, p: FennelParams, seed: int, v: int) -> int:
    """The part of vertex v (capacity weight 1): best score among parts with room, ties to the lower
    load, then to the first in v's seeded rotation of the parts; no room anywhere: the least loaded."""
    k = p.num_parts
    s = scores(counts, loads, p)
    rot = _rotation(seed, v, k)
    best = -1
    for j in range(k):
        q = (j + rot) % k
        if loads[q] + 1 > p.cap:
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
    chunk: Chunk, parts: np.ndarray, loads: np.ndarray, p: FennelParams, seed: int
) -> None:
    """Python oracle of gt_fennel_assign: place the chunk's unplaced vertices in stream order."""
    for i, v in enumerate(chunk.verts.tolist()):
        if parts[v] >= 0:
            continue
        nbr = parts[chunk.adj[chunk.xadj[i] : chunk.xadj[i + 1]]]
        counts = np.bincount(nbr[nbr >= 0], minlength=p.num_parts)
        q = choose(counts, loads, p, seed, v)
        parts[v] = q
        loads[q] += 1


def assign_chunk(chunk: Chunk, parts: np.ndarray, loads: np.ndarray, p: FennelParams, seed: int) -> int:
    """Native placement of the chunk's unplaced vertices (parts, loads updated); returns how many
    were placed in a full part (0 unless the capacity cannot hold every node)."""
    stats = np.zeros(2, dtype=np.int64)
    rc = native_core().gt_fennel_assign(
        int(len(chunk.verts)),
        ptr(chunk.verts, np.int64, "verts"),
        ptr(chunk.xadj, np.int64, "xadj"),
        ptr(chunk.adj, np.int64, "adj"),
        ptr(parts, np.int32, "parts"),
        None,
        int(p.num_parts),
        ptr(loads, np.int64, "loads"),
        int(p.cap),
        float(p.alpha),
        float(p.gamma),
        int(seed) & (2**64 - 1),
        ptr(stats, np.int64, "stats"),
    )
    if rc != 0:
        raise RuntimeError(f"gt_fennel_assign failed with code {rc}")
    return int(stats[1])


def stream_assign(
    chunks: Iterable[tuple[np.ndarray, np.ndarray]],
    num_nodes: int,
    num_edges: int,
    num_parts: int,
    max_imbalance: float,
    seed: int,
) -> np.ndarray:
    """One pass of Fennel over (src, dst) chunks: the part (int32) of every node. Nodes no edge names
    (isolated) are placed last, each in the least loaded part."""
    p = params(num_nodes, num_edges, num_parts, max_imbalance)
    parts = np.full(num_nodes, -1, dtype=np.int32)
    loads = np.zeros(num_parts, dtype=np.int64)
    for src, dst in chunks:
        if len(src):
            assign_chunk(chunk_adjacency(src, dst), parts, loads, p, seed)
    place_isolated(parts, loads)
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
