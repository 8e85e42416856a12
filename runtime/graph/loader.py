"""Mini-batches for multi-layer neighbour sampling, made inline or prefetched on a thread.

`sample_blocks` starts from the seeds and walks out one layer per fan-out (the last fan-out is the
output layer's), each layer sampled by the shards owning its frontier. Every block relabels nodes in
first-occurrence order, so a layer's destination nodes are the first of its source nodes (DGL's block
convention): h_dst = h_src[:num_dst].

On a typed graph every block also carries each edge's type (`etype`, what relational models read)
and, when the graph has edge features, their rows (`efeat`, pulled by the edges' global ids); a layer's
fan-out is then either one number (that many in-edges of any type, as on an untyped graph) or one per
edge type (each relation sampled on its own: training.edgeTypeFanouts).

NeighborLoader iterates shuffled seeds in batches; `fetch` pulls each batch's input features. With
prefetch > 0 it samples and fetches the next batches on a background thread with its own client, so
waits on remote shards overlap the model's compute; with 0 (the trainers' default) it works inline,
which is faster when the model's intra-op threads already fill the cores (see Training.prefetch).
"""

from __future__ import annotations

import queue
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from graphtrain.runtime import arrays
from graphtrain.runtime.graph import handover
from graphtrain.runtime.graph.dist_graph import DistGraph
from graphtrain.runtime.native.backend import CoreBackend, choose


@dataclass
class Block:
    """One layer: messages from src nodes (local ids) to dst nodes (local ids; dst i = src i).

    `mean` is the (num_dst x num_src) CSR matrix whose row i averages dst i's sampled in-neighbours:
    sampling lists edges grouped by destination, so its row pointer is the running sum of the counts.
    A sparse-dense product aggregates without an edges x features intermediate (3x faster than
    index_select + index_add_ forward and backward)."""

    num_src: int
    num_dst: int
    src: torch.Tensor
    dst: torch.Tensor
    mean: torch.Tensor | None = None
    mean_t: torch.Tensor | None = (
        None  # its transpose, for the backward pass (built here, on the loader thread)
    )
    etype: torch.Tensor | None = None  # each edge's type (typed graphs), int64
    # each edge's global id (typed graphs): its edge features' row (a tensor where the device sampled it)
    eid: np.ndarray | torch.Tensor | None = None
    efeat: torch.Tensor | None = None  # each edge's features, when the graph has them
    # the edge ids grouped by source, stably (mean_t's order): attention's backward walks them
    order: torch.Tensor | None = None

    def to(self, device: torch.device) -> Block:
        """This block on `device` (a GPU trainer's), copied without blocking the host."""

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Block(
            self.num_src,
            self.num_dst,
            self.src.to(device, non_blocking=True),
            self.dst.to(device, non_blocking=True),
            move(self.mean),
            move(self.mean_t),
            move(self.etype),
            self.eid,
            move(self.efeat),
            move(self.order),
        )

    @property
    def counts(self) -> torch.Tensor:
        """In-edges per destination (a block lists its edges grouped by destination, in order)."""
        return torch.bincount(self.dst, minlength=self.num_dst)


@dataclass
class MeanInput:
    """An input as a mean-aggregator input layer reads it: the rows of the block's destinations, and the
    mean over each destination's sampled in-neighbours, summed from the shards' tables where they lie
    (DistTensor.local_sums). The block's other source rows, ~3x as many, are never copied out nor read
    again (GNNEncoder.mean_input). A frozen input (node features) is that pair; a learnable one (a node
    embedding) adds `src`, a leaf of the source rows' shape standing in for them, never read, which
    backward gives the sources' gradient (the embedding's rows that the step pushes)."""

    dst: torch.Tensor  # (block.num_dst x width)
    mean: torch.Tensor  # (block.num_dst x width): block.mean @ the source rows
    src: torch.Tensor | None = None  # (block.num_src x width), for a learnable input: its gradient's leaf


# torch says once per process that its sparse CSR support is in beta. Filtered once, here, rather than
# inside warnings.catch_warnings around each tensor made: that resets the warning registry every call (3 %
# of a WordNet GraphSAGE step in py-spy, 2026-12-01), and it is not thread-safe (prefetch's thread).
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


def csr_tensor(
    crow: np.ndarray | torch.Tensor,
    col: np.ndarray | torch.Tensor,
    values: np.ndarray | torch.Tensor,
    shape: tuple[int, int],
) -> torch.Tensor:
    """A sparse CSR tensor of arrays (host) or tensors (where they are), without torch's warnings (its
    invariants are ours to keep: checking them would cost a pass over the indices)."""
    c, i, v = (torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in (crow, col, values))
    return torch.sparse_csr_tensor(c, i, v, shape, check_invariants=False)


def mean_matrices(
    counts: np.ndarray, src_local: np.ndarray, num_src: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A, A^T, order) with A the row-normalised (num_dst x num_src) adjacency of a block and order its
    edges grouped by source (A^T's). torch's backward of a CSR product transposes A on every call; a
    ready A^T halves forward + backward (13.1 -> 7.0 ms for 4,000 x 16,000 x 384 here), and attention's
    backward reads the same transpose instead of sorting again on the training thread."""
    num_dst = len(counts)
    if choose() is CoreBackend.CPU:  # the CPU core in one pass; numpy's passes below are its reference
        from graphtrain.runtime.native.graph import block_means

        src_local = np.ascontiguousarray(src_local, dtype=np.int64)
        crow, values, crow_t, col_t, values_t, order = block_means(
            np.ascontiguousarray(counts, dtype=np.int64), src_local, num_src
        )
        return (
            csr_tensor(crow, src_local, values, (num_dst, num_src)),
            csr_tensor(crow_t, col_t, values_t, (num_src, num_dst)),
            torch.from_numpy(order),
        )
    crow = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(counts, out=crow[1:])
    values = np.repeat(1.0 / np.maximum(counts, 1), counts).astype(np.float32)
    dst_local = np.repeat(np.arange(num_dst, dtype=np.int64), counts)
    # the transpose: edges grouped by source. A stable sort of 16-bit keys is numpy's radix sort, 15x
    # the merge sort of int64 keys (0.09 against 1.3 ms for a WordNet batch's 17,000 edges)
    key = src_local.astype(np.uint16) if num_src <= 1 << 16 else src_local
    order = np.argsort(key, kind="stable")
    crow_t = np.zeros(num_src + 1, dtype=np.int64)
    np.cumsum(np.bincount(src_local, minlength=num_src), out=crow_t[1:])
    return (
        csr_tensor(crow, src_local, values, (num_dst, num_src)),
        csr_tensor(crow_t, dst_local[order], values[order], (num_src, num_dst)),
        torch.from_numpy(order),
    )


@dataclass
class MiniBatch:
    seeds: np.ndarray  # output nodes (global new ids)
    input_nodes: np.ndarray  # every node whose input features the first block reads (global new ids)
    blocks: list[Block]  # input layer first
    data: dict[str, Any] = field(default_factory=dict)  # what `fetch` pulled (features, labels, ...)
    # input_nodes where the blocks were made, when that is the trainer's device (device_sampler.py); its
    # first len(seeds) entries are the seeds (a layer's nodes start with its frontier)
    input_device: torch.Tensor | None = None


def relabel(frontier: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, local ids of src): nodes = frontier followed by the new nodes of src, first-occurrence."""
    if choose() is CoreBackend.CPU:
        from graphtrain.runtime.native.graph import relabel as native_relabel

        return native_relabel(
            np.ascontiguousarray(frontier, dtype=np.int64), np.ascontiguousarray(src, dtype=np.int64)
        )
    both = np.concatenate([frontier, src])
    uniq, first, inverse = np.unique(both, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    local = rank[inverse.reshape(-1)]
    return uniq[order], local[len(frontier) :]


# A layer's fan-out: in-edges per node (-1 all), or (typed graphs) an array of one per edge type
Fanout = int | np.ndarray


def pair_keys(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each (src, dst) pair as one int64 key, sorted and unique: what `exclude` of sample_blocks takes."""
    return arrays.unique(np.asarray(src, dtype=np.int64) * num_nodes + np.asarray(dst, dtype=np.int64))


def drop_pairs(
    frontier: np.ndarray, src: np.ndarray, counts: np.ndarray, exclude: np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, counts): which sampled edges (src[i] -> its destination in `frontier`, grouped by `counts`)
    join no excluded pair (pair_keys), and the in-edges each destination keeps. Link prediction's batch
    leaves its own target edges out of the graph its GNN reads; the pairs go, with every edge between
    them (of any relation), so no copy of a target edge leaks in under another type."""
    dst = np.repeat(np.asarray(frontier, dtype=np.int64), counts)
    keys = src.astype(np.int64) * num_nodes + dst
    pos = np.searchsorted(exclude, keys).clip(max=max(len(exclude) - 1, 0))
    kept = exclude[pos] != keys if len(exclude) else np.ones(len(keys), dtype=bool)
    owner = np.repeat(np.arange(len(frontier), dtype=np.int64), counts)
    return kept, np.bincount(owner[kept], minlength=len(frontier)).astype(counts.dtype)


def sample_blocks(
    graph: DistGraph,
    seeds: np.ndarray,
    fanouts: list[Fanout],
    seed: int = 0,
    exclude: np.ndarray | None = None,
) -> MiniBatch:
    """The message-flow blocks of `seeds` for fan-outs [input layer, ..., output layer]; on a typed
    graph each block carries its edges' types (and their features, when the graph has them).
    `exclude`: sorted (src, dst) pair keys (pair_keys) whose edges no layer keeps; a node that loses
    some keeps its other sampled in-edges (the fan-out is drawn first, as a post-filter)."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if not arrays.distinct(seeds):
        raise ValueError("seeds must be distinct")
    frontier = seeds
    blocks: list[Block] = []
    for depth, fanout in enumerate(reversed(fanouts)):
        etype = eid = None
        if graph.typed:
            per_type = fanout if isinstance(fanout, np.ndarray) else None
            got = graph.sample_edges(
                frontier, -1 if per_type is not None else int(fanout), seed * 1000 + depth, per_type
            )
            src, counts, etype, eid = got.src, got.counts, got.etype, got.eid
        else:
            src, counts = graph.sample_neighbors(frontier, int(fanout), seed * 1000 + depth)
        if exclude is not None and len(exclude):
            kept, counts = drop_pairs(frontier, src, counts, exclude, graph.num_nodes)
            src = src[kept]
            etype = None if etype is None else etype[kept]
            eid = None if eid is None else eid[kept]
        dst_local = np.repeat(np.arange(len(frontier), dtype=np.int64), counts)
        nodes, src_local = relabel(frontier, src)
        mean, mean_t, order = mean_matrices(counts, src_local, len(nodes))
        block = Block(
            len(nodes),
            len(frontier),
            torch.from_numpy(src_local),
            torch.from_numpy(dst_local),
            mean,
            mean_t,
            etype=None if etype is None else torch.from_numpy(etype),
            eid=eid,
            order=order,
        )
        if eid is not None and "efeat" in graph.edata:
            block.efeat = torch.as_tensor(np.asarray(graph.edata["efeat"][eid]), dtype=torch.float32)
        blocks.insert(0, block)
        frontier = nodes
    return MiniBatch(seeds=seeds, input_nodes=frontier, blocks=blocks)


Sampler = Callable[[np.ndarray, list[Fanout], int], MiniBatch]  # (seeds, fanouts, seed): sample_blocks' shape


class NeighborLoader:
    """Shuffled batches of seeds with their sampled blocks; `fetch(minibatch)` runs on the loader thread.
    `sampler` makes a batch's blocks: sample_blocks over the graph's shards unless given (a GPU trainer's:
    device_sampler.sample_blocks_on). `device`: a GPU trainer's, whose batches made ahead are made on
    a CUDA stream of the loader thread's own and handed over without a host wait."""

    def __init__(
        self,
        graph: DistGraph,
        seeds: np.ndarray,
        fanouts: list[Fanout],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        prefetch: int = 0,
        fetch: Callable[[MiniBatch], None] | None = None,
        sampler: Sampler | None = None,
        device: torch.device | None = None,
    ):
        self.graph = graph
        self.seeds = np.asarray(seeds, dtype=np.int64)
        self.fanouts = list(fanouts)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.prefetch = max(0, prefetch)
        self.fetch = fetch
        self.sampler: Sampler = sampler or partial(sample_blocks, graph)
        self.device = device  # a GPU trainer's: ahead, batches are made on a side stream (handover.py)
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.seeds)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _batches(self, epoch: int) -> list[np.ndarray]:
        order = self.seeds
        if self.shuffle:
            order = self.seeds[np.random.default_rng([self.seed, epoch]).permutation(len(self.seeds))]
        return [order[i : i + self.batch_size] for i in range(0, len(self.seeds), self.batch_size)][
            : len(self)
        ]

    def _make(self, epoch: int, i: int, batch: np.ndarray) -> MiniBatch:
        # epoch + 1: the samples have always been drawn with the count of passes begun (results unchanged)
        seed = (self.seed * 7919 + epoch + 1) * 100_003 + i
        mb = self.sampler(batch, self.fanouts, seed)
        if self.fetch is not None:
            self.fetch(mb)
        return mb

    def __iter__(self) -> Iterator[MiniBatch]:
        """The next epoch's batches (each pass one epoch further)."""
        self.epoch += 1
        return self.batches(self.epoch - 1)

    def batches(self, epoch: int, start: int = 0) -> Iterator[MiniBatch]:
        """Epoch `epoch`'s batches from its `start`-th on, the very ones a whole pass makes from there:
        the order and each batch's samples follow from the seed, the epoch and the batch's index alone,
        so a trainer resumed mid-epoch continues it as if it had not stopped."""
        batches = list(enumerate(self._batches(epoch)))[start:]
        if self.prefetch <= 0 or len(batches) <= 1:
            for i, b in batches:
                yield self._make(epoch, i, b)
            return
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        stream = handover.side_stream(self.device)

        def produce() -> None:
            try:
                with handover.on(stream):
                    for i, b in batches:
                        if stop.is_set():
                            return
                        mb = self._make(epoch, i, b)
                        q.put((mb, handover.made(stream)))
                q.put(None)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                q.put(exc)

        worker = threading.Thread(target=produce, name="graphtrain-loader", daemon=True)
        worker.start()
        try:
            while True:
                item = q.get(timeout=600)
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                mb, event = item
                handover.receive(mb, event, self.device)
                yield mb
        finally:
            stop.set()
            while worker.is_alive():  # unblock a producer waiting on a full queue
                try:
                    q.get_nowait()
                except queue.Empty:
                    worker.join(timeout=0.1)
