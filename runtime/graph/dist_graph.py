"""DistGraph: a partitioned graph whose structure and node data live on the shard servers.

Node ids are the partition's new ids (each partition owns one contiguous range); the partition book
routes every request to the owning shard. A typed graph's data is also read per type, by type-local
ids (`g.nodes[ntype].data`, `g.edges[etype].data`: typed_views.py). The same class runs distributed
(a ZMQ client) and standalone (in-process shards that load the partitions themselves).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from graphtrain.runtime import dtypes
from graphtrain.runtime.data.cache import Signature
from graphtrain.runtime.graph.typed_views import EdgeTypeViews, NodeTypeViews
from graphtrain.runtime.kvstore import default_client
from graphtrain.runtime.kvstore.client.inproc import InProcTransport
from graphtrain.runtime.kvstore.client.kvclient import KVClient
from graphtrain.runtime.kvstore.tables.graphpart import Sampled
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.partition import PartitionConfig, load_config, load_part
from graphtrain.runtime.tensor import DistTensor, PartitionBook


def standalone_client(
    part_config: str | Path,
    checkpoint_root: Path | None = None,
    device: str = "cpu",
    direct_to: torch.device | None = None,
    trusted: dict[str, Signature] | None = None,
) -> KVClient:
    """In-process shards, one per partition, each holding its partition (no sockets); their learnable
    tables on `device` (a GPU: as a GPU shard server keeps them). `direct_to`: the trainer's device,
    whose tables it uses where they lie (InProcTransport). `trusted`: checkpoint files hashed before start
    (checkpoint/verified.py)."""
    cfg = load_config(part_config)
    states = []
    for p in range(cfg.num_parts):
        state = ShardTensors(p, device=device, trusted=trusted)
        state.load_partition(cfg.path, p)
        states.append(state)
    from graphtrain.runtime.native.memory import keep_freed_memory

    keep_freed_memory()
    return KVClient(InProcTransport(states, checkpoint_root, direct_to))


class DistGraph:
    """The graph of a partition config, read through shard servers."""

    def __init__(self, part_config: str | Path | PartitionConfig, client: KVClient | None = None):
        self.config = part_config if isinstance(part_config, PartitionConfig) else load_config(part_config)
        self.client = client or default_client()
        if self.client.num_shards != self.config.num_parts:
            raise ValueError(f"{self.config.num_parts} partitions but {self.client.num_shards} shards")
        self.book = PartitionBook(self.config.node_bounds)
        data = self.config.data
        self.name = str(data.get("graph_name", "graph"))
        self.num_nodes = int(data["num_nodes"])
        self.num_edges = int(data["num_edges"])
        self.num_classes = data.get("num_classes")
        # a typed graph: its node and edge types (partition/format.py's config entries)
        self.ntype_names: list[str] = list(data.get("ntype_names") or [])
        self.canonical_etypes: list[tuple[str, str, str]] = [
            tuple(c) for c in data.get("canonical_etypes") or []
        ]
        self.typed = bool(self.canonical_etypes)
        self.feature_blocks: dict[str, tuple[int, int]] = {
            t: (int(a), int(b)) for t, (a, b) in (data.get("feature_blocks") or {}).items()
        }
        bounds = data.get("type_bounds")
        self.type_bounds = np.asarray(bounds, dtype=np.int64) if bounds else None
        self.edata: dict[str, DistTensor] = {}
        edge_book = PartitionBook(self.config.edge_bounds)
        for key, desc in (data.get("edata") or {}).items():
            self.edata[key] = DistTensor(
                tuple(desc["shape"]), torch.float32, f"edata.{key}", book=edge_book, client=self.client
            )
        self.ndata: dict[str, DistTensor] = {}
        for key, desc in data.get("ndata", {}).items():
            if desc.get("kind") != "array":
                continue  # sparse features are not held by the servers
            wire = dtypes.wire_name(desc["dtype"], widen=True)
            if wire is None:
                continue
            name = key.removesuffix("_mask") if key.endswith("_mask") else key
            self.ndata[name] = DistTensor(
                (self.num_nodes, *desc["shape"][1:]),
                dtypes.to_torch(wire),
                f"ndata.{key}",
                book=self.book,
                client=self.client,
            )

    @property
    def nodes(self) -> NodeTypeViews:
        """`g.nodes[ntype]`: a node type's count, id map and data by type-local id (none untyped)."""
        if self.type_bounds is None:
            return NodeTypeViews([], np.zeros((self.config.num_parts, 1), dtype=np.int64), self.ndata)
        return NodeTypeViews(self.ntype_names, self.type_bounds, self.ndata)

    @cached_property
    def edges(self) -> EdgeTypeViews:
        """`g.edges[(source, relation, destination)]` (or `g.edges[relation]`): an edge type's count, id
        map and data by type-local id; its ids are read from the partition on first use."""
        cfg = self.config
        return EdgeTypeViews(
            self.canonical_etypes,
            lambda: [_etype(load_part(cfg, p, verify=False).etype) for p in range(cfg.num_parts)],
            cfg.edge_bounds,
            self.edata,
        )

    def sample_neighbors(
        self, seeds: np.ndarray, fanout: int, seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Up to `fanout` in-neighbours of each seed (-1: all), sampled by each seed's owner in parallel.
        Returns (sources, counts per seed)."""
        return self.client.sample(seeds, fanout, self.book.bounds, seed)

    def sample_edges(
        self, seeds: np.ndarray, fanout: int, seed: int = 0, type_fanouts: np.ndarray | None = None
    ) -> Sampled:
        """As sample_neighbors, with each sampled edge's type and global id; with `type_fanouts` a
        fan-out per edge type (-1 all, 0 none)."""
        return self.client.sample_edges(seeds, fanout, self.book.bounds, seed, type_fanouts)

    def node_types(self, ids: np.ndarray) -> np.ndarray:
        """The node type of each of `ids` (a typed graph's; the partition's type ranges, no request)."""
        if not self.typed:
            return np.zeros(len(ids), dtype=np.int64)
        bounds = self.type_bounds  # (parts, types + 1)
        assert bounds is not None
        ids = np.asarray(ids, dtype=np.int64)
        part = self.book.owner(ids)
        row = bounds[part]
        return (ids[:, None] >= row[:, 1:-1]).sum(axis=1).astype(np.int64)

    def edge_dim(self) -> int:
        """The width of the edge features (0: the graph has none)."""
        efeat = self.edata.get("efeat")
        return int(efeat.shape[1]) if efeat is not None else 0

    def partition_of(self, ids: np.ndarray) -> np.ndarray:
        return self.book.owner(ids)


def _etype(etype: np.ndarray | None) -> np.ndarray:
    if etype is None:
        raise ValueError("a typed partition without its edge types (part-<i>/etype.npy)")
    return etype
