"""Graph partitioning: METIS (pymetis) or random, balance constraints, contiguous ID ranges, halos,
and the versioned on-disk format with the original-ID maps.

    result = partition_graph(graph, num_parts=4)          # pure: assignment, relabeling, stats
    config = write(graph, result, Path("out/wordnet-4"))  # atomic, checksummed
    part = load_part(load_config(config), 0)              # what a shard server reads
"""

from graphtrain.runtime.partition.format import (
    PartData,
    PartitionConfig,
    check_output,
    load_config,
    load_maps,
    load_names,
    load_part,
    load_sparse_rows,
    load_triples,
    reassemble,
    write,
)
from graphtrain.runtime.partition.pipeline import (
    DEFAULT_BALANCE,
    PartitionResult,
    check_node_count,
    partition_graph,
)

__all__ = [
    "DEFAULT_BALANCE",
    "PartData",
    "PartitionConfig",
    "PartitionResult",
    "check_node_count",
    "check_output",
    "load_config",
    "load_maps",
    "load_names",
    "load_part",
    "load_sparse_rows",
    "load_triples",
    "partition_graph",
    "reassemble",
    "write",
]
