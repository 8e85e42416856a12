"""node_split: which seed nodes each trainer takes, balanced and close to its own partition.

The seeds (e.g. training nodes) are read from the partition files in new-id order, which is
partition-major; cutting that list into `world` contiguous, equal pieces gives each trainer a piece
inside (mostly) one partition when trainers are spread over partitions, so its sampling starts on
its local shard. Every trainer gets the same count (at most world - 1 seeds are left out), so the
ranks take the same number of steps (each step's gradient average pairs them up).
"""

from __future__ import annotations

import numpy as np

from graphtrain.runtime.partition import PartitionConfig, load_part


def mask_ids(config: PartitionConfig, mask: str) -> np.ndarray:
    """New ids of the nodes whose `mask` (train_mask, val_mask, test_mask) is set, ascending."""
    key = mask if mask.endswith("_mask") else f"{mask}_mask"
    out = []
    for p in range(config.num_parts):
        part = load_part(config, p, verify=False, mmap=True)
        if key not in part.ndata:
            raise KeyError(f"the partition has no {key!r} (node data: {sorted(part.ndata)})")
        out.append(np.flatnonzero(np.asarray(part.ndata[key])) + part.node_range[0])
    return np.concatenate(out).astype(np.int64)


def node_split(config: PartitionConfig, mask: str, rank: int, world: int) -> np.ndarray:
    """Rank `rank`'s seeds out of `world` trainers: contiguous and equal-sized."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in [0, {world})")
    ids = mask_ids(config, mask)
    n = len(ids) // world
    if n == 0:
        raise ValueError(f"{len(ids)} {mask} nodes cannot be split over {world} trainers")
    start = rank * len(ids) // world
    return ids[start : start + n]


def part_triples(config: PartitionConfig) -> np.ndarray:
    """Every edge of the partition as (source, edge type, destination) in new ids, partition-major
    (the training triples of a knowledge graph partitioned by `graphtrain partition`)."""
    out = []
    for p in range(config.num_parts):
        part = load_part(config, p, verify=False, mmap=True)
        if part.etype is None:
            raise KeyError("the partition has no edge types (a knowledge graph needs its relations)")
        indptr = np.asarray(part.indptr)
        dst = np.repeat(np.arange(part.node_range[0], part.node_range[1], dtype=np.int64), np.diff(indptr))
        out.append(np.stack([np.asarray(part.indices, np.int64), np.asarray(part.etype, np.int64), dst], 1))
    return np.concatenate(out) if out else np.empty((0, 3), np.int64)


def edge_split(config: PartitionConfig, rank: int, world: int) -> np.ndarray:
    """Rank `rank`'s training triples out of `world` trainers: contiguous (so mostly the in-edges of
    one partition, whose tails its shard holds) and equal-sized."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in [0, {world})")
    triples = part_triples(config)
    n = len(triples) // world
    if n == 0:
        raise ValueError(f"{len(triples)} edges cannot be split over {world} trainers")
    start = rank * len(triples) // world
    return triples[start : start + n]
