"""partition_graph: from an in-memory Graph to part assignment, relabeling, halos and statistics.

The steps are pure functions of the graph and the options (seeded); writing to disk is format.py's job.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from graphtrain.runtime.data.edgefiles import CHUNK_EDGES
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.data.summary import directedness
from graphtrain.runtime.errors import MemoryEstimateError, PartitionError
from graphtrain.runtime.partition import (
    adjacency,
    assign,
    constraints,
    fennel,
    memory,
    relabel,
    stats,
    typebalance,
)

DEFAULT_BALANCE = ("nodes", "degree", "train", "val", "test")
ALGORITHMS = ("metis", "random", "fennel")
MAX_SEED = 2**63 - 1  # pymetis takes a signed 64-bit seed


@dataclass
class PartitionResult:
    num_parts: int
    algorithm: str
    seed: int
    max_imbalance: float
    parts: np.ndarray  # original node id -> partition
    relabeling: relabel.Relabeling
    halos: list[np.ndarray]
    constraints: constraints.Constraints
    stats: stats.PartitionStats
    info: assign.AssignInfo = field(default_factory=assign.AssignInfo)
    memory_estimate: int = 0


def check_memory(graph: Graph, limit: int | None) -> int:
    """Estimate peak memory; raise if it exceeds `limit`, warn if it exceeds what is available.

    Raises:
        MemoryEstimateError: the estimate is above `limit`.
    """
    need = memory.estimate_bytes(graph)
    _refuse_above(limit, need, f"{graph.name!r} ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges)")
    available = memory.available_bytes()
    if need > available:
        warnings.warn(
            f"partitioning needs about {memory.human(need)} but only {memory.human(available)} is available",
            ResourceWarning,
            stacklevel=3,
        )
    return need


def check_node_count(num_nodes: int, limit: int | None) -> None:
    """Before loading a graph of a known node count: refuse if its nodes alone put the estimate above
    `limit`, so a huge count is refused before any array is allocated.

    Raises:
        MemoryEstimateError: the estimate for `num_nodes` nodes (and no edges yet) is above `limit`.
    """
    _refuse_above(limit, memory.estimate(num_nodes, 0), f"a graph of {num_nodes:,} nodes")


def _refuse_above(limit: int | None, need: int, what: str) -> None:
    if limit is not None and need > limit:
        raise MemoryEstimateError(
            f"partitioning {what} needs about {memory.human(need)}, "
            f"above the memory limit of {memory.human(limit)}"
        )


def check_settings(
    num_nodes: int, num_parts: int, algorithm: str, balance: Sequence[str], max_imbalance: float, seed: int
) -> None:
    """Refuse settings no partitioner can meet, each naming its value.

    Raises:
        PartitionError: num_parts outside [1, num_nodes], seed outside [0, 2**63), unknown algorithm or
            constraint, bad tolerance.
    """
    if not 1 <= num_parts <= num_nodes:
        raise PartitionError(f"num_parts must be between 1 and the node count {num_nodes}, got {num_parts}")
    if not 0 <= seed <= MAX_SEED:
        raise PartitionError(f"seed must be between 0 and {MAX_SEED} (METIS' range), got {seed}")
    if algorithm not in ALGORITHMS:
        raise PartitionError(f"unknown algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")
    if not 0 < max_imbalance <= 1:
        raise PartitionError(f"max_imbalance must be in (0, 1], got {max_imbalance}")
    unknown = sorted(set(balance) - set(DEFAULT_BALANCE))
    if unknown:
        raise PartitionError(f"unknown balance constraint(s) {unknown}; known: {', '.join(DEFAULT_BALANCE)}")


def partition_graph(
    graph: Graph,
    num_parts: int,
    algorithm: str = "metis",
    balance: Sequence[str] = DEFAULT_BALANCE,
    max_imbalance: float = 0.05,
    seed: int = 0,
    memory_limit: int | None = None,
) -> PartitionResult:
    """Assign every node to one of `num_parts` partitions and relabel ids into contiguous ranges.

    Raises:
        PartitionError: num_parts outside [1, num_nodes], seed outside [0, 2**63), unknown algorithm or
            constraint, bad tolerance.
        MemoryEstimateError: the memory estimate exceeds `memory_limit`.
    """
    check_settings(graph.num_nodes, num_parts, algorithm, balance, max_imbalance, seed)
    estimate = check_memory(graph, memory_limit)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    cons = constraints.build(graph, list(balance))
    adj = adjacency.undirected(graph)
    seconds["prepare"] = time.perf_counter() - t0
    info = assign.AssignInfo()
    t = time.perf_counter()
    if num_parts == 1:
        parts = np.zeros(graph.num_nodes, dtype=np.int32)
        info.strategy = "single"
    elif algorithm == "random":
        parts = assign.random_assign(graph.num_nodes, num_parts, seed)
        info.strategy = "random"
    elif algorithm == "fennel":  # the graph is in memory: Fennel streams its CSR (source order)
        src, dst = graph.edges()
        leaves = fennel.Leaves(graph.num_nodes)
        for s, d in fennel.in_chunks(src, dst, CHUNK_EDGES):
            leaves.add(s, d)
        n, m = graph.num_nodes, graph.num_edges
        chunks = partial(fennel.in_chunks, src, dst, CHUNK_EDGES)
        parts = fennel.stream_assign(chunks, n, m, num_parts, max_imbalance, seed, leaves)
        info.strategy = "fennel"
        if graph.typed and graph.ntype is not None and graph.ntype_names is not None:
            types = len(graph.ntype_names)
            typebalance.balance_types(chunks, parts, graph.ntype, types, num_parts, max_imbalance)
            info.strategy = "fennel+types"
    else:
        core = adjacency.contract_leaves(adj, cons.weights)
        where, info = assign.metis_assign(core, cons.names, num_parts, max_imbalance, seed)
        parts = where[core.owner]
    seconds["assign"] = time.perf_counter() - t
    seconds["metis"] = info.metis_seconds
    t = time.perf_counter()
    rl = relabel.relabel(graph, parts, num_parts)
    halo_lists = stats.halos(adj, parts, rl, num_parts)
    directed = directedness(graph) if graph.num_edges <= stats.DIRECTED_MAX else None
    st = stats.compute(adj, parts, num_parts, cons, rl, halo_lists, *graph.edges(), directed)
    seconds["relabel_and_stats"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    st.seconds = seconds
    return PartitionResult(
        num_parts=num_parts,
        algorithm=algorithm,
        seed=seed,
        max_imbalance=max_imbalance,
        parts=parts,
        relabeling=rl,
        halos=halo_lists,
        constraints=cons,
        stats=st,
        info=info,
        memory_estimate=estimate,
    )
