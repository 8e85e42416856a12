"""Fennel on a typed graph: after the stream, every node type brought within its own capacity.

Why a step after the stream and not types inside it: Fennel's objective weighs one load per part, and a
capacity per type inside the per-vertex loop would let the first types streamed take the best places
(what METIS avoids with one balance constraint per type, constraints.py). Here the stream and its
refinement place every vertex for the cut; then, per node type t with n_t nodes, each part holding more
than cap_t = floor((1 + max_imbalance) * n_t / k) (never below ceil(n_t / k)) gives up its excess,
the vertices that lose least by leaving (counts of their edges into each part, one read of the edges)
going to the parts of that type with room that hold most of their edges. The part sizes then follow:
the sum of the types' caps is within the total's. Moves only go to room, so a type already balanced is
never touched, and an untyped graph is one type (the stream's own cap already holds).
"""

from __future__ import annotations

import math

import numpy as np

from graphtrain.runtime.partition import refine


def type_caps(type_counts: np.ndarray, num_parts: int, max_imbalance: float) -> np.ndarray:
    """The most nodes of each type a part may hold: METIS' and Fennel's cap for that type alone."""
    return np.array(
        [
            max(math.floor((1.0 + max_imbalance) * n / num_parts), -(-int(n) // num_parts))
            for n in type_counts
        ],
        dtype=np.int64,
    )


def rebalance(counts: np.ndarray, parts: np.ndarray, ntype: np.ndarray, caps: np.ndarray) -> int:
    """Move each type's excess out of its over-full parts (module docstring), in place; returns the
    vertices moved. `counts[v, q]`: v's edges into part q for the parts as given (refine.neighbour_counts).
    Pure in its arrays: the same input gives the same moves (ties by vertex id)."""
    n, k = counts.shape
    moved = 0
    for t in range(len(caps)):
        of_t = np.flatnonzero(ntype == t)
        load = np.bincount(parts[of_t], minlength=k).astype(np.int64)
        room = caps[t] - load
        for p in np.flatnonzero(room < 0).tolist():
            excess = int(-room[p])
            v = of_t[parts[of_t] == p]
            # each vertex's best part with room and the loss of going there, least loss first
            open_parts = np.flatnonzero(room > 0)
            to = open_parts[counts[np.ix_(v, open_parts)].argmax(axis=1)]
            loss = counts[v, p].astype(np.int64) - counts[v, to]
            order = np.lexsort((v, loss))
            for i in order.tolist():  # at most `excess` moves, each to a part that still has room
                if excess == 0:
                    break
                q = int(to[i])
                if room[q] <= 0:
                    open_parts = np.flatnonzero(room > 0)
                    q = int(open_parts[counts[v[i], open_parts].argmax()])
                parts[v[i]] = q
                room[q] -= 1
                room[p] += 1
                excess -= 1
                moved += 1
    return moved


def balance_types(
    chunks: refine.Chunks, parts: np.ndarray, ntype: np.ndarray, num_types: int, k: int, max_imbalance: float
) -> int:
    """Every node type of `parts` within its cap (rebalance), the edges read once for the counts; the
    vertices moved."""
    caps = type_caps(np.bincount(ntype, minlength=num_types), k, max_imbalance)
    loads = np.stack([np.bincount(parts[ntype == t], minlength=k) for t in range(num_types)])
    if (loads <= caps[:, None]).all():
        return 0
    counts = refine.neighbour_counts(chunks(), parts, k)
    return rebalance(counts, parts, ntype, caps)
