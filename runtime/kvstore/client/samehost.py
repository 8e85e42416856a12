"""What a client maps of the shard servers on its own host: tables, graph structure, a push buffer.

A server started with --shm answers `shm_info` with its host identity and the names of its
shared-memory segments. A client on the same host (hostname and boot id match) maps them once and then
reads rows and samples neighbours itself; gradients go the other way through a buffer the client
owns (shm.PushBuffer). Anything that cannot be mapped (a segment gone, smaller than announced) is left
to the socket path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from graphtrain.runtime.kvstore.tables.shm import PushBuffer, attach, host_id, view
from graphtrain.runtime.kvstore.wire import protocol


class SameHost:
    def __init__(self) -> None:
        self.here = host_id()
        self.shards: set[int] | None = None  # None until the first answers were read
        self.views: dict[tuple[int, str], tuple[np.ndarray, int] | None] = {}
        self.graphs: dict[int, GraphPart] = {}
        self.push: PushBuffer | None = None
        self._segments: list[Any] = []

    def update(self, answers: list[dict[str, Any]]) -> None:
        """Map what the shards' shm_info answers (in shard order) announce on this host."""
        self.shards = set()
        for shard, a in enumerate(answers):
            if a.get("host") != self.here:
                continue
            self.shards.add(shard)
            if self.push is None and isinstance(a.get("prefix"), str):
                self.push = PushBuffer(a["prefix"])
            for name, t in a.get("tensors", {}).items():
                if (shard, name) in self.views and self.views[(shard, name)] is not None:
                    continue
                try:
                    seg = attach(t["segment"])
                except FileNotFoundError:
                    continue
                self._segments.append(seg)
                shape = (t["hi"] - t["lo"], *t["row_shape"])
                try:
                    rows = view(seg, shape, np.dtype(protocol.DTYPES[t["dtype"]]))
                except (TypeError, ValueError):  # a segment smaller than announced
                    continue
                self.views[(shard, name)] = (rows, t["lo"])
            g = a.get("graph")
            if g and shard not in self.graphs:
                self._map_graph(shard, g)

    def _map_graph(self, shard: int, g: dict[str, Any]) -> None:
        keys = [k for k in ("indptr", "indices", "etype") if k in g]
        try:
            segs = [attach(g[k][0]) for k in keys]
        except FileNotFoundError:
            return
        self._segments.extend(segs)
        try:
            arrays = {
                k: view(seg, (int(g[k][1]),), np.dtype(np.int64)) for seg, k in zip(segs, keys, strict=True)
            }
        except (TypeError, ValueError):  # a segment smaller than announced: ask the server
            return
        lo, hi = int(g["lo"]), int(g["hi"])
        indptr, indices, etype = arrays["indptr"], arrays["indices"], arrays.get("etype")
        whole = etype is None or len(etype) == len(indices)
        if len(indptr) == hi - lo + 1 and indptr[0] == 0 and indptr[-1] == len(indices) and whole:
            self.graphs[shard] = GraphPart(lo, hi, indptr, indices, etype, int(g.get("edge_lo", 0)))

    def close(self) -> None:
        for key in list(self.views):
            self.views[key] = None
        self.graphs.clear()
        for seg in self._segments:
            seg.close()
        self._segments = []
        if self.push is not None:
            self.push.close()
            self.push = None
