"""Partition a graph whose edges stay on disk: Fennel over the edge files, then the partition written in
the same format, with the same statistics, as the METIS path (format.py, stats.py), memory O(nodes x parts).

Passes over the edge files, each in bounded chunks (edgefiles.CHUNK_EDGES):
1. assign: degrees and degree-1 leaves counted (one read), then Fennel places every other node (a
   second read, then fennel.RESTREAM_PASSES more placing each again) and each leaf follows its only
   neighbour where there is room (fennel.py); then up to refine.ROUNDS reads refine the parts, each
   gathering every node's edges per part (refine.py);
2. bucket: each edge goes, in new ids, to a scratch file of its destination's part (with its original
   edge id: its position in the source-sorted CSR the in-memory loader would build, its edge type and
   its feature row), each cross edge's destination also to its source's part (its halo), and each
   non-loop node pair to the part of its lower new id (so duplicates meet in one bucket and the
   undirected cut is counted exactly);
3. per part, one at a time: its in-CSR sorted as relabel.py sorts it, its halo, its share of the cut.
Memory at the peak: the node arrays (maps, degrees, parts, node data), the refinement's counters (k int32
a node, twice while a round's moves are chosen: refine.py) and one part's edges (what a shard server
holding that part needs anyway); memory.streaming_need counts them. Scratch files live beside the output
and go with it.

A typed graph (graph.typed; its edge files yield canonical edge types, edgefiles.EdgeTyping) streams as
the in-memory path partitions it (pipeline.py, relabel.py, format.py): after the assignment every node
type is brought within its cap (typebalance.balance_types, one more read), new ids are sorted by (part,
node type) so each type is a range of each part (`type_bounds`), each node's in-edges by (edge type,
original id), and the partition's config carries the types; the same parts give the same files.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from graphtrain.runtime import arrays
from graphtrain.runtime.data import leftovers
from graphtrain.runtime.data.cache import atomic_dir
from graphtrain.runtime.data.edgefiles import CHUNK_EDGES, EdgeFiles
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.partition import constraints, fennel, format, relabel, typebalance
from graphtrain.runtime.partition.assign import AssignInfo
from graphtrain.runtime.partition.pipeline import PartitionResult, check_settings
from graphtrain.runtime.partition.stats import PartitionStats

_I64 = np.dtype(np.int64)
_EMPTY = np.empty(0, dtype=np.int64)


@dataclass
class _Counts:
    """What the assignment pass counts besides the parts."""

    out_degree: np.ndarray
    in_degree: np.ndarray


def assign(
    edges: EdgeFiles,
    num_parts: int,
    max_imbalance: float,
    seed: int,
    chunk: int,
    ntype: np.ndarray | None = None,
    num_types: int = 1,
) -> tuple[np.ndarray, _Counts]:
    """Passes 1a and 1b: every node's out- and in-degree and its leaf anchor (fennel.Leaves), then
    Fennel's parts (int32), the leaves deferred to after the stream; with `ntype`, then every node type
    within its cap (typebalance.balance_types)."""
    n = edges.num_nodes
    counts = _Counts(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    leaves = fennel.Leaves(n)
    for _, src, dst, _ in edges.chunks(chunk, types=False):
        np.add.at(counts.out_degree, src, 1)  # a chunk's work, not the node count's (fennel.Leaves.add)
        np.add.at(counts.in_degree, dst, 1)
        leaves.add(src, dst)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return ((src, dst) for _, src, dst, _ in edges.chunks(chunk, types=False))

    parts = fennel.stream_assign(chunks, n, edges.num_edges, num_parts, max_imbalance, seed, leaves)
    if ntype is not None:
        typebalance.balance_types(chunks, parts, ntype, num_types, num_parts, max_imbalance)
    return parts, counts


class _Buckets:
    """Append-only scratch files, one per (part, kind), raw int64. A file is open only while a chunk's
    values are appended to it: held open together, parts x kinds files passed the common 1024 open
    files per process from 147 parts on (parts go to 4096)."""

    def __init__(self, root: Path, num_parts: int, kinds: Sequence[str]) -> None:
        self.root = root
        for p in range(num_parts):
            for k in kinds:
                (root / f"{p}.{k}").touch()

    def add(self, p: int, kind: str, values: np.ndarray, dtype: type = np.int64) -> None:
        if len(values):
            with open(self.root / f"{p}.{kind}", "ab") as f:
                f.write(np.ascontiguousarray(values, dtype=dtype).tobytes())

    def read(self, p: int, kind: str, dtype: type = np.int64) -> np.ndarray:
        return np.fromfile(self.root / f"{p}.{kind}", dtype=dtype)


def bucket(
    edges: EdgeFiles,
    parts: np.ndarray,
    num_parts: int,
    inverse: np.ndarray,
    out_degree: np.ndarray,
    buckets: _Buckets,
    chunk: int,
) -> int:
    """Pass 2: every edge into its buckets (module docstring); returns the count of remote edges."""
    n, k = edges.num_nodes, num_parts
    start = np.zeros(n, dtype=np.int64)
    np.cumsum(out_degree[:-1], out=start[1:])  # CSR row starts: the original edge ids
    seen = np.zeros(n, dtype=np.int64)
    remote = 0
    rows = edges.feature_chunks(chunk) if edges.efeat is not None else None
    for _, src, dst, et in edges.chunks(chunk):
        ef = next(rows) if rows is not None else None
        order = np.argsort(src, kind="stable")
        s_sorted = src[order]
        first = np.searchsorted(s_sorted, s_sorted, side="left")
        rank = np.empty(len(src), dtype=np.int64)
        rank[order] = np.arange(len(src)) - first
        eid = start[src] + seen[src] + rank
        np.add.at(seen, src, 1)
        ps, pd = parts[src], parts[dst]
        ns, nd = inverse[src], inverse[dst]
        cross = ps != pd
        remote += int(cross.sum())
        loop = src == dst
        lo, hi = np.minimum(ns, nd)[~loop], np.maximum(ns, nd)[~loop]
        plo = np.where(ns <= nd, ps, pd)[~loop]
        for p in range(k):
            sel = pd == p
            buckets.add(p, "src", ns[sel])
            buckets.add(p, "dst", nd[sel])
            buckets.add(p, "eid", eid[sel])
            if et is not None:
                buckets.add(p, "etype", et[sel])
            if ef is not None:
                buckets.add(p, "efeat", ef[sel], np.float32)
            buckets.add(p, "out", nd[cross & (ps == p)])
            buckets.add(p, "pair", lo[plo == p] * n + hi[plo == p])
    return remote


def _npy_header(f: BinaryIO, length: int) -> None:
    """The header np.save writes for an int64 vector of `length` (the data is appended after it)."""
    np.lib.format.write_array_header_1_0(f, {"descr": _I64.str, "fortran_order": False, "shape": (length,)})


def partition_stream(
    graph: Graph,
    edges: EdgeFiles,
    num_parts: int,
    out: Path,
    *,
    balance: Sequence[str],
    max_imbalance: float,
    seed: int,
    overwrite: bool = False,
    chunk: int = CHUNK_EDGES,
    made_for: str | None = None,
) -> tuple[Path, PartitionResult]:
    """Fennel-partition `edges` (node data from `graph`, a Graph without edges) into `out` (`made_for`:
    format.write's).

    Returns the config path and the result (its relabeling holds the node maps only: no edge arrays).

    Raises:
        PartitionError: num_parts, seed, tolerance or a constraint out of range.
        DataError: an edge file is bad, or `out` exists and `overwrite` is False.
    """
    n, m, k = graph.num_nodes, edges.num_edges, num_parts
    check_settings(n, num_parts, "fennel", balance, max_imbalance, seed)
    typed = graph.typed and graph.ntype is not None and graph.ntype_names is not None
    ntype = graph.ntype if typed else None
    num_types = len(graph.ntype_names) if typed and graph.ntype_names is not None else 1
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    parts, counts = assign(edges, k, max_imbalance, seed, chunk, ntype, num_types)
    seconds["assign"] = time.perf_counter() - t0
    cons = constraints.build(graph, list(balance), degree=counts.in_degree)
    node_map, inverse, node_bounds = relabel.nodes(parts, k, ntype, num_types)
    type_bounds = (
        relabel.type_bounds_of(parts, ntype, k, num_types, node_bounds) if ntype is not None else None
    )
    t = time.perf_counter()
    out = Path(out)
    # the scratch directory inside atomic_dir's block, once it has made out's parents: a missing parent
    # is made as the METIS path makes it, an unwritable one is the same one line (DataError); beside
    # the block's temporary directory, under its lock (data/leftovers.py: swept if this is killed)
    with (
        atomic_dir(out, overwrite=overwrite) as tmp,
        leftovers.scratch(tmp) as scratch,
    ):
        kinds = ["src", "dst", "eid", "out", "pair"] + (["etype"] if edges.has_etype else [])
        buckets = _Buckets(Path(scratch), k, kinds + (["efeat"] if edges.efeat is not None else []))
        remote = bucket(edges, parts, k, inverse, counts.out_degree, buckets, chunk)
        seconds["bucket"] = time.perf_counter() - t
        t = time.perf_counter()
        format.write_node_files(tmp, graph, node_map, inverse)
        edge_bounds = np.zeros(k + 1, dtype=np.int64)
        parts_meta: list[dict[str, Any]] = []
        ndata_desc: dict[str, Any] = {}
        halo_sizes: list[int] = []
        und = cut = 0
        with open(tmp / "edge_map.npy", "wb") as edge_map:
            _npy_header(edge_map, m)
            for p in range(k):
                lo, hi = int(node_bounds[p]), int(node_bounds[p + 1])
                ns, nd, eid = buckets.read(p, "src"), buckets.read(p, "dst"), buckets.read(p, "eid")
                etype = buckets.read(p, "etype") if edges.has_etype else None
                # relabel.py's order: by destination, a typed graph's then by edge type, then original id
                order = np.lexsort((eid, etype, nd) if typed and etype is not None else (eid, nd))
                ns, nd, eid = ns[order], nd[order], eid[order]
                etype = etype[order] if etype is not None else None
                edge_map.write(eid.tobytes())
                edge_bounds[p + 1] = edge_bounds[p] + len(eid)
                indptr = np.zeros(hi - lo + 1, dtype=np.int64)
                np.cumsum(np.bincount(nd - lo, minlength=hi - lo), out=indptr[1:])
                remote_src = ns[(ns < lo) | (ns >= hi)]
                halo = arrays.unique(np.concatenate([remote_src, buckets.read(p, "out")]))
                halo_sizes.append(len(halo))
                pairs = arrays.unique(buckets.read(p, "pair"))
                und += len(pairs)
                cut += int(np.count_nonzero(pairs % n >= hi))  # the higher end's new id beyond this part
                ids = node_map[lo:hi]
                parts_meta.append(format.write_part(tmp, p, graph, ids, indptr, ns, etype, halo, ndata_desc))
                if edges.efeat is not None:
                    rows = buckets.read(p, "efeat", np.float32).reshape(-1, edges.efeat.width)[order]
                    parts_meta[-1]["edata"] = format.write_edata(tmp, p, rows)
        seconds["write"] = time.perf_counter() - t
        seconds["total"] = time.perf_counter() - t0
        rl = relabel.Relabeling(
            node_map, inverse, node_bounds, _EMPTY, edge_bounds, _EMPTY, _EMPTY, type_bounds
        )
        result = _result(graph, parts, k, cons, max_imbalance, seed, rl)
        result.stats = _stats(n, m, und, cut, remote, parts, k, cons, edge_bounds, halo_sizes, seconds)
        config = format.config_of(graph, m, result, node_bounds, edge_bounds, parts_meta, ndata_desc)
        efeat_shape = (m, edges.efeat.width) if edges.efeat is not None else None
        config.update(format.typed_meta(graph, type_bounds, efeat_shape))
        format.write_config(tmp, graph, config, made_for)
    return out / f"{graph.name}.json", result


def _result(
    graph: Graph,
    parts: np.ndarray,
    num_parts: int,
    cons: constraints.Constraints,
    max_imbalance: float,
    seed: int,
    rl: relabel.Relabeling,
) -> PartitionResult:
    """The result of a streamed partition: `rl` holds the node maps, bounds and type bounds only."""
    strategy = "fennel+types" if graph.typed else "fennel"  # the in-memory path's names (pipeline.py)
    info = AssignInfo(strategy=strategy, notes=["streamed: edges read in chunks, never held whole"])
    return PartitionResult(
        num_parts=num_parts,
        algorithm="fennel",
        seed=seed,
        max_imbalance=max_imbalance,
        parts=parts,
        relabeling=rl,
        halos=[],
        constraints=cons,
        stats=PartitionStats(graph.num_nodes, 0, 0, 0, 0.0, 0.0, {}, [], [], []),
        info=info,
    )


def _stats(
    n: int,
    m: int,
    und: int,
    cut: int,
    remote: int,
    parts: np.ndarray,
    k: int,
    cons: constraints.Constraints,
    edge_bounds: np.ndarray,
    halo_sizes: list[int],
    seconds: dict[str, float],
) -> PartitionStats:
    """The same statistics stats.compute counts from the in-memory adjacency."""
    bal = dict(zip(cons.names, map(float, constraints.balance_of(cons.weights, parts, k)), strict=True))
    nodes = np.bincount(parts, minlength=k)
    stored = np.diff(edge_bounds)
    bal.setdefault("nodes", float(nodes.max() / nodes.mean()))
    bal["edges"] = float(stored.max() / stored.mean()) if stored.sum() else 1.0
    return PartitionStats(
        num_nodes=n,
        num_edges=m,
        num_undirected_edges=und,
        cut_edges=cut,
        edge_cut_fraction=cut / und if und else 0.0,
        remote_edge_fraction=remote / m if m else 0.0,
        balance=bal,
        nodes_per_part=nodes.tolist(),
        edges_per_part=stored.tolist(),
        halo_per_part=halo_sizes,
        seconds=seconds,
    )
