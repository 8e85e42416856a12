"""Neighbour sampling on the trainer's device: the whole graph's in-CSR copied there once, every layer's
draw, relabelling and mean matrices made where the model computes (DGL's GPU sampling).

Why: a GPU trainer spent 7.8 ms of a 14.9 ms WordNet step (1,024 seeds, H200) sampling on one host
core (numpy and the native sampler: small arrays, many calls) and copying the blocks up; the model's
own step was 3.5 ms. Here a batch's blocks are born on the GPU. At this size the work is bound by
launches and host waits, not bytes: a first version of tensor ops alone (torch.unique, a bincount, a
random sort per draw) took 5.8 ms a batch on an H200. Each layer now takes two host waits:
- the draw by the CUDA core (sampling_cuda.cu: a count, a scan, a warp per seed);
- a relabelling map over the node ids instead of torch.unique;
- the transpose's row pointer searched in its sort instead of counted by a bincount.
(Not yet timed on a GPU.) Used where the trainer maps every shard's graph (standalone, or shard
servers on its host: samehost.py) and training.sampler allows it (sample_on_device).

The draws are the host sampler's: the same request seed per layer as loader.sample_blocks, and the
same per-node streams and Floyd's picks (cuda/include/graphtrain/sample_math.h), so device and host
blocks are equal edge for edge. The blocks follow loader.py's convention: a layer's nodes are its
frontier followed by the new sources in first-occurrence order. A typed graph is drawn by edge position
(the CUDA core's gt_cuda_sample_edges_*, the CPU core's gt_sample_edges: one fan-out, or one per edge
type), and its blocks carry each edge's type, global id and features, gathered on the device from
copies made beside the CSR (DGL samples its heterographs on the GPU in the same way).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from graphtrain.runtime import arrays
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph.loader import Block, Fanout, MiniBatch, csr_tensor
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.kvstore.wire.opargs import MAX_EDGE_TYPES
from graphtrain.runtime.native import cuda

GRAPH_SHARE = 0.25  # of the device's free memory the graph may take; beyond it sampling stays on the host


class DeviceGraph:
    """A graph's in-CSR (row v: the global ids of v's in-neighbours) on one device; on a typed graph also
    each edge's type (a node's in-edges listed by type), its global id and, when the graph has them, its
    features, all in the CSR's edge order."""

    def __init__(
        self,
        indptr: torch.Tensor,
        indices: torch.Tensor,
        etype: torch.Tensor | None = None,
        eids: torch.Tensor | None = None,
        efeat: torch.Tensor | None = None,
    ):
        self.indptr = indptr
        self.indices = indices
        self.etype, self.eids, self.efeat = etype, eids, efeat
        self.device = indptr.device
        self.num_nodes = len(indptr) - 1
        self._host: GraphPart | None = None  # on the host: the CPU core's sampler over these arrays
        self._type_fanouts: dict[bytes, torch.Tensor] = {}  # each layer's per-type fan-outs, uploaded once

    @property
    def typed(self) -> bool:
        return self.etype is not None

    @classmethod
    def of_parts(
        cls,
        parts: list[GraphPart],
        num_nodes: int,
        device: torch.device,
        typed: bool = False,
        efeat: Any = None,
    ) -> DeviceGraph:
        """The partitions' in-edges (each over its own contiguous node range) joined into one CSR, with
        (`typed`) their edge types and global edge ids, and the edges' rows of `efeat` (a DistTensor by
        global edge id) when given.

        Raises:
            ValueError: the parts do not cover [0, num_nodes) exactly once, a typed graph's part carries
                no edge types, or a row pointer decreases.
        """
        parts = sorted(parts, key=lambda p: p.lo)
        if [p.lo for p in parts] != [0, *(p.hi for p in parts[:-1])] or parts[-1].hi != num_nodes:
            spans = ", ".join(f"[{p.lo}, {p.hi})" for p in parts)
            raise ValueError(f"the graph's parts {spans} do not cover its {num_nodes} nodes")
        if typed and any(p.etype is None for p in parts):
            raise ValueError("the graph is typed but some of its parts carry no edge types")
        if any(np.any(np.diff(p.indptr) < 0) for p in parts):
            raise ValueError("a part's row pointer decreases: its in-CSR is damaged")
        bases = np.cumsum([0, *(int(p.indptr[-1] - p.indptr[0]) for p in parts)])
        indptr = np.concatenate(
            [(p.indptr[:-1] - p.indptr[0]) + b for p, b in zip(parts, bases, strict=False)] + [bases[-1:]]
        ).astype(np.int64)
        indices = np.concatenate([p.indices[p.indptr[0] : p.indptr[-1]] for p in parts]).astype(np.int64)
        etype = eids = feats = None
        if typed:
            etype = np.concatenate([np.asarray(p.etype[p.indptr[0] : p.indptr[-1]]) for p in parts])  # type: ignore[index]
            eids = np.concatenate(
                [p.edge_lo + np.arange(p.indptr[0], p.indptr[-1], dtype=np.int64) for p in parts]
            )
            if efeat is not None:
                feats = torch.as_tensor(np.asarray(efeat[eids]), dtype=torch.float32).to(device)

        def up(a: np.ndarray | None) -> torch.Tensor | None:
            return None if a is None else torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

        return cls(up(indptr), up(indices), up(etype), up(eids), feats)  # type: ignore[arg-type]

    def sample(self, frontier: torch.Tensor, fanout: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(sources, counts): up to `fanout` in-neighbours of each frontier node (fanout < 0: all), those
        of node i the next counts[i] sources, in frontier order; the host sampler's draws for request
        seed `seed` (a GPU's by the CUDA core, the host's by the CPU core: sample_math.h)."""
        if self.device.type == "cuda":
            return cuda.sample_neighbors(self.indptr, self.indices, frontier, fanout, seed)
        src, counts = self._host_part().sample(frontier.numpy(), fanout, seed)
        return torch.from_numpy(src), torch.from_numpy(counts)

    def sample_edges(
        self, frontier: torch.Tensor, fanout: Fanout, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions in the edge arrays, counts) of a typed graph's draw: up to `fanout` in-edges of each
        frontier node, or with an array (one fan-out per edge type) each relation drawn on its own; the
        host sampler's sample_edges draws for request seed `seed` (sample_math.h's edges_draw).

        Raises:
            ValueError: per-type fan-outs that list no type or more than the wire allows (as the shard
                servers' client refuses them).
        """
        per_type = fanout if isinstance(fanout, np.ndarray) else None
        if per_type is not None and not 0 < len(per_type) <= MAX_EDGE_TYPES:
            raise ValueError(f"type_fanouts must list 1 to {MAX_EDGE_TYPES} fan-outs, one per edge type")
        number = -1 if per_type is not None else int(fanout)
        if len(self.indices) == 0:  # no edge: the cores' "no per-type fan-outs" is a null pointer
            return self.indices[:0], torch.zeros(len(frontier), dtype=torch.int64, device=self.device)
        if self.device.type == "cuda":
            return cuda.sample_edges(
                self.indptr, self.indices, self.etype, frontier, number, self._fanouts_on(per_type), seed
            )
        per = None if per_type is None else np.ascontiguousarray(per_type, dtype=np.int64)
        got = self._host_part().sample_edges(frontier.numpy(), number, seed, per)  # edge_lo 0: eid = position
        assert got.eid is not None
        return torch.from_numpy(got.eid), torch.from_numpy(got.counts)

    def _host_part(self) -> GraphPart:
        """On the host: the CPU core's sampler over these arrays (edge types too, when typed), made once."""
        if self._host is None:
            etype = None if self.etype is None else self.etype.numpy()
            self._host = GraphPart(0, self.num_nodes, self.indptr.numpy(), self.indices.numpy(), etype)
        return self._host

    def _fanouts_on(self, per_type: np.ndarray | None) -> torch.Tensor | None:
        if per_type is None:
            return None
        key = np.ascontiguousarray(per_type, dtype=np.int64)
        got = self._type_fanouts.get(key.tobytes())
        if got is None:
            got = self._type_fanouts[key.tobytes()] = torch.from_numpy(key).to(self.device)
        return got


def relabel(frontier: torch.Tensor, src: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(nodes, local ids of src): nodes = the (distinct) frontier followed by the new nodes of src in
    first-occurrence order, as loader.relabel on the host. A map over the graph's `num_nodes` ids holds
    each id's first position (no sort; one host wait, for the count of nodes)."""
    both = torch.cat([frontier, src])
    where = torch.arange(len(both), device=both.device, dtype=torch.int32)
    first = torch.full((num_nodes,), len(both), dtype=torch.int32, device=both.device)
    first.scatter_reduce_(0, both, where, "amin")
    at = first[both].long()  # each entry's first position
    is_first = at == where
    local_at = torch.cumsum(is_first, 0) - 1  # at a first position: that node's local id
    return both[is_first], local_at[at[len(frontier) :]]


def mean_matrices(
    counts: torch.Tensor, src_local: torch.Tensor, num_src: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dst local ids, A, A^T, order) of a block, A the row-normalised (num_dst x num_src) adjacency and
    order its edges grouped by source, stably (A^T's, which attention's backward reads), on the tensors'
    device (loader.mean_matrices' twin). A^T's row pointer is searched in the sorted sources, where a
    bincount would wait for the host to size it."""
    dev, num_dst, edges = counts.device, len(counts), len(src_local)
    crow = torch.zeros(num_dst + 1, dtype=torch.int64, device=dev)
    torch.cumsum(counts, 0, out=crow[1:])
    values = torch.repeat_interleave(1.0 / counts.clamp(min=1).to(torch.float32), counts, output_size=edges)
    dst_local = torch.repeat_interleave(torch.arange(num_dst, device=dev), counts, output_size=edges)
    by_src, order = torch.sort(src_local, stable=True)  # the transpose: edges grouped by source
    crow_t = torch.searchsorted(by_src, torch.arange(num_src + 1, device=dev))
    return (
        dst_local,
        csr_tensor(crow, src_local, values, (num_dst, num_src)),
        csr_tensor(crow_t, dst_local[order], values[order], (num_src, num_dst)),
        order,
    )


def sample_blocks_on(
    graph: DeviceGraph, seeds: np.ndarray, fanouts: list[Fanout], seed: int = 0
) -> MiniBatch:
    """loader.sample_blocks on the graph's device: the blocks there (on a typed graph with each edge's
    type, global id and features), seeds and input nodes on the host (they index host data and the
    embedding tables)."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if not arrays.distinct(seeds):
        raise ValueError("seeds must be distinct")
    frontier = torch.from_numpy(seeds)
    if graph.device.type == "cuda":  # from pinned memory: a pageable copy would wait for the stream first
        frontier = frontier.pin_memory().to(graph.device, non_blocking=True)
    blocks: list[Block] = []
    for depth, fanout in enumerate(reversed(fanouts)):
        request = seed * 1000 + depth  # sample_blocks' request seeds
        etype = eid = efeat = None
        if graph.typed:
            pos, counts = graph.sample_edges(frontier, fanout, request)
            assert graph.etype is not None and graph.eids is not None
            src, etype, eid = graph.indices[pos], graph.etype[pos], graph.eids[pos]
            efeat = None if graph.efeat is None else graph.efeat[pos]
        else:
            src, counts = graph.sample(frontier, int(fanout), request)
        nodes, src_local = relabel(frontier, src, graph.num_nodes)
        dst_local, mean, mean_t, order = mean_matrices(counts, src_local, len(nodes))
        block = Block(len(nodes), len(frontier), src_local, dst_local, mean, mean_t, etype, eid, efeat, order)
        blocks.insert(0, block)
        frontier = nodes
    return MiniBatch(seeds=seeds, input_nodes=frontier.cpu().numpy(), blocks=blocks, input_device=frontier)


def local_parts(client: Any) -> list[GraphPart] | None:
    """Every shard's graph as this process maps it (in-process shards, or a same-host server's shared
    memory); None when any shard's graph is only reachable through its server."""
    parts = []
    for shard in range(client.num_shards):
        part = client.transport.local_graph(shard)
        if part is None:
            return None
        parts.append(part)
    return parts


def graph_bytes(parts: list[GraphPart], typed: bool = False, edge_dim: int = 0) -> int:
    """Bytes of the joined graph on a device: its CSR, and on a typed graph each edge's type, id and
    `edge_dim` features."""
    per_edge = 8 + (16 + 4 * edge_dim if typed else 0)
    return sum(8 * len(p.indptr) + per_edge * len(p.indices) for p in parts)


def device_room(device: torch.device) -> int | None:
    """Free bytes on a GPU (None for the host: no limit applied there)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def sample_on_device(
    setting: str, device: torch.device, mapped: bool, nbytes: int, room: int | None, core: str = ""
) -> bool:
    """Whether a trainer samples on its device (training.sampler `setting`): auto does on a GPU that has
    room for the graph, whose CUDA core runs (`core`: why not, "" when it does), when every shard's graph
    is mapped here; device does wherever it can.

    Raises:
        GraphtrainError: sampler device, but a shard's graph is not mapped here, does not fit, or the
            CUDA core cannot run on the device.
    """
    fits = room is None or nbytes <= GRAPH_SHARE * room
    if setting == "host":
        return False
    if setting == "auto":
        return device.type == "cuda" and mapped and fits and not core
    if not mapped:
        raise GraphtrainError(
            "training.sampler is device but this trainer does not map every shard's graph (a shard "
            "server on another host, or one started without shared memory): use auto or host"
        )
    if not fits:
        raise GraphtrainError(
            f"training.sampler is device but the graph's {nbytes:,} bytes are more than "
            f"{GRAPH_SHARE:.0%} of {device}'s {room:,} free bytes: use auto or host"
        )
    if core:
        raise GraphtrainError(
            f"training.sampler is device but the CUDA core cannot sample on {device}: {core}"
        )
    return True


def core_reason(device: torch.device) -> str:
    """Why the CUDA core cannot sample on `device` ("" when it can, and on the host)."""
    if device.type != "cuda":
        return ""
    return cuda.unavailable_reason(device.index or 0)


def device_graph(
    setting: str, device: torch.device, client: Any, num_nodes: int, typed: bool = False, efeat: Any = None
) -> DeviceGraph | None:
    """The graph on the trainer's device when it samples there (sample_on_device), else None; a typed
    graph's with its edge types and ids, and the rows of `efeat` (its edge features' DistTensor, when
    it has them), which its blocks carry.

    Raises:
        GraphtrainError: sampler device where the trainer cannot sample there (a typed graph whose
            mapped parts lack their edge types too)."""
    if setting == "host":
        return None
    parts = local_parts(client)
    if parts is None:
        sample_on_device(setting, device, False, 0, None)  # refuses `device`
        return None
    if typed and any(p.etype is None for p in parts):
        if setting == "device":
            raise GraphtrainError(
                "training.sampler is device but the graph is typed and a shard's mapped graph carries "
                "no edge types: use auto or host"
            )
        return None
    edge_dim = int(efeat.shape[1]) if efeat is not None else 0
    nbytes, room = graph_bytes(parts, typed, edge_dim), device_room(device)
    if not sample_on_device(setting, device, True, nbytes, room, core_reason(device)):
        return None
    return DeviceGraph.of_parts(parts, num_nodes, device, typed, efeat if typed else None)
