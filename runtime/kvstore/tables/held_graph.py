"""A shard server's partition of the graph: its in-edges for sampling (in shared memory with --shm, so
same-host trainers sample it themselves) and its node and edge data as tensors (ShardTensors, state.py,
inherits these)."""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.dtypes import NUMPY as DTYPES
from graphtrain.runtime.dtypes import wire_name
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart, Sampled
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.shard import TensorShard


class ShardGraph:
    """Sampling and the partition's data of a ShardTensors."""

    shard: int
    use_shm: bool
    graph: GraphPart | None
    graph_shm: dict[str, shared_memory.SharedMemory]

    _segment: Callable[[str, int], shared_memory.SharedMemory]  # ShardTensors' (state.py)
    create: Callable[..., TensorShard]

    def sample(self, seeds: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return self._graph().sample(seeds, fanout, seed)

    def sample_edges(
        self, seeds: np.ndarray, fanout: int, seed: int, type_fanouts: np.ndarray | None
    ) -> Sampled:
        return self._graph().sample_edges(seeds, fanout, seed, type_fanouts)

    def _graph(self) -> GraphPart:
        if self.graph is None:
            raise StorageError(f"shard {self.shard} holds no graph partition (start it with --partition)")
        return self.graph

    def load_partition(self, config_path: Path, part: int) -> list[str]:
        """Hold partition `part`: its in-edges (for sampling) and its dense node data (features, labels,
        masks) as tensors "ndata.<key>", rows in the partition's new-id range. Sparse features are not
        held (project them first: graph.featureProjection)."""
        from graphtrain.runtime.partition import load_config, load_part

        cfg = load_config(config_path)
        data = load_part(cfg, part, verify=True, mmap=True)
        lo, hi = data.node_range
        typed = data.etype is not None and "canonical_etypes" in cfg.data
        self.graph = GraphPart(
            lo,
            hi,
            self._structure("indptr", data.indptr),
            self._structure("indices", data.indices),
            self._structure("etype", data.etype) if typed and data.etype is not None else None,
            data.edge_range[0],
        )
        loaded = []
        elo, ehi = data.edge_range
        held = [("ndata", data.ndata, int(cfg.data["num_nodes"]), lo, hi)]
        held.append(("edata", data.edata, int(cfg.data["num_edges"]), elo, ehi))
        for kind, values, n, first, end in held:
            for key, value in values.items():
                if hasattr(value, "tocsr"):
                    continue
                arr = np.asarray(value)
                dtype = wire_name(arr.dtype, widen=True)
                if dtype is None:
                    continue
                t = self.create(f"{kind}.{key}", n, tuple(arr.shape[1:]), dtype, first, end, node_data=True)
                t.data.copy_(torch.from_numpy(np.ascontiguousarray(arr.astype(DTYPES[dtype]))))
                t.from_partition = True
                loaded.append(t.name)
        return loaded

    def _structure(self, name: str, array: np.ndarray) -> np.ndarray:
        """The partition's CSR array, copied into shared memory with --shm so that trainers on this host
        sample it themselves (no request, no server CPU), as they read features; else the file's map."""
        array = np.asarray(array)
        if not self.use_shm or array.nbytes == 0:
            return array
        seg = self._segment(f"graph.{name}", array.nbytes)
        self.graph_shm[name] = seg
        out = np.ndarray(array.shape, dtype=array.dtype, buffer=seg.buf)
        out[:] = array
        return out

    def graph_info(self) -> dict[str, Any] | None:
        """Where this shard's structure is in shared memory (for shm_info), if it is."""
        if self.graph is None or not {"indptr", "indices"} <= set(self.graph_shm):
            return None
        g = self.graph
        info: dict[str, Any] = {
            "lo": g.lo,
            "hi": g.hi,
            "edge_lo": g.edge_lo,
            "indptr": [self.graph_shm["indptr"].name, len(g.indptr)],
            "indices": [self.graph_shm["indices"].name, len(g.indices)],
        }
        if g.etype is not None and "etype" in self.graph_shm:
            info["etype"] = [self.graph_shm["etype"].name, len(g.etype)]
        return info
