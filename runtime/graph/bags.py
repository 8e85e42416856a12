"""FeatureBags: the nonzero sparse feature columns of any node (WordNet: its gloss words), as the ragged
(values, offsets) a bag lookup takes (collective.layers.bag, torch's EmbeddingBag).

They are read from the partition files, memory-mapped, not from the shard servers: a node's bag has no
fixed width, and a shard server's node data has (one row shape per tensor), so serving them would mean
padding every row to the longest bag or a new ragged request. The trainers read the partition already
(node_split's masks, a knowledge graph's triples; pods mount it from the data claim), the word ids are
small (WordNet: 1.1 M int64 for 117,659 nodes) and a batch touches only its input nodes' pages. The
partition writes sparse node data as CSR per partition (format.py), so this is a range lookup per
partition and a gather, no copy of the whole matrix.
"""

from __future__ import annotations

import numpy as np

from graphtrain.runtime.partition import PartitionConfig, load_sparse_rows


class FeatureBags:
    """The nonzero columns of node data `key` (sparse) for nodes by their new ids."""

    def __init__(self, config: PartitionConfig, key: str = "feat"):
        self.bounds = config.node_bounds
        self.num_nodes = int(self.bounds[-1])
        self.num_columns = int(config.data["ndata"][key]["shape"][1]) if key in config.data["ndata"] else 0
        self.parts = [load_sparse_rows(config, p, key) for p in range(config.num_parts)]

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, offsets), int64: node ids[i]'s columns are values[offsets[i]:offsets[i+1]], in the
        order the partition stores them (ascending for a scipy CSR); a node without one has an empty bag.

        Raises:
            ValueError: an id outside [0, num_nodes).
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            bad = int(ids[(ids < 0) | (ids >= self.num_nodes)][0])
            raise ValueError(f"node {bad} is outside the graph's nodes [0, {self.num_nodes})")
        owner = np.searchsorted(self.bounds, ids, side="right") - 1
        starts = np.zeros(len(ids), dtype=np.int64)
        lengths = np.zeros(len(ids), dtype=np.int64)
        for p, (indptr, _) in enumerate(self.parts):
            mine = np.flatnonzero(owner == p)
            local = ids[mine] - self.bounds[p]
            starts[mine] = indptr[local]
            lengths[mine] = indptr[local + 1] - starts[mine]
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        bag_of = np.repeat(np.arange(len(ids), dtype=np.int64), lengths)  # the bag each value is in
        where = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[bag_of] + starts[bag_of]
        values = np.empty(int(offsets[-1]), dtype=np.int64)
        value_owner = owner[bag_of]
        for p, (_, indices) in enumerate(self.parts):
            mine = value_owner == p
            values[mine] = indices[where[mine]]
        return values, offsets
