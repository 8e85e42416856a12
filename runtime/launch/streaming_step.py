"""The partition step's streaming branch (partition.algorithm fennel, or auto when METIS would not fit):
the graph's node data is loaded, its edges stay in their files and are read in chunks
(runtime/partition/streaming.py), so the step's memory is O(nodes x parts) (the refinement's counters:
memory.streaming_need).

What can stream: a bundled graph dataset (its edges are stored as .npy files), typed too (graph.typed:
the node types come from its node data, each edge's canonical type from its stored relation and its
endpoints' types, data/typed.py's stream_typed). A file graph, triples, typed input files (graph.nodes)
or graph.reverseEdges are loaded whole (their edge order is only known once all are read): `fennel`
names the field and stops there, `auto` falls back to METIS and says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from graphtrain.contract.spec import GraphSource, PartitionSpec, quantity_to_bytes
from graphtrain.runtime import memlimits
from graphtrain.runtime import partition as partitioning
from graphtrain.runtime.data import datasets
from graphtrain.runtime.data.checks import check_data
from graphtrain.runtime.data.edgefiles import CHUNK_EDGES, EdgeFiles
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import MemoryEstimateError, PartitionError, data_warnings
from graphtrain.runtime.launch.work import PartitionWork
from graphtrain.runtime.partition import choice, memory, streaming
from graphtrain.runtime.progress import spinner


@dataclass(frozen=True)
class Streamed:
    """A graph ready to stream: its node data (a Graph without edges) and its edge files."""

    graph: Graph
    edges: EdgeFiles


def unstreamable(source: GraphSource) -> str | None:
    """Why `source` cannot be streamed (naming the field), or None when it can."""
    if source.dataset is None:
        field = (
            "graph.triples"
            if source.triples is not None
            else "graph.nodes"
            if source.nodes is not None
            else "graph.path"
        )
        return f"{field} is loaded whole; streaming reads a bundled graph dataset's stored edge files"
    if datasets.recipe(str(source.dataset)).kind != "graph":
        return f"graph.dataset {source.dataset} is a knowledge graph, split at load time, not an edge file"
    if source.reverse_edges:
        return "graph.reverseEdges adds edges that are not stored, so they cannot be streamed"
    return None


def resources_limit(settings: PartitionSpec) -> int | None:
    """partition.resources.limits.memory in bytes (the partition Job's container limit), if set."""
    limits = settings.resources.limits if settings.resources is not None else {}
    value = limits.get("memory")
    return quantity_to_bytes(value) if value else None


def held() -> tuple[int, int]:
    """(resident, mapped) bytes of this process now."""
    info = psutil.Process().memory_info()
    return int(info.rss), int(info.vms)


def prepare(
    work: PartitionWork,
    data_dir: Path | None,
    limit: int | None,
    warn: Callable[[str], None],
    loading: Callable[[], AbstractContextManager[Any]],
) -> Streamed | None:
    """Load the node data and decide: the graph to stream, or None to run METIS (auto only).

    Raises:
        PartitionError: fennel asked for a graph that cannot stream (naming the field).
        MemoryEstimateError: the streaming estimate exceeds partition.memoryLimit.
        GraphtrainError: the data is bad or lacks what the model needs.
    """
    settings = work.settings
    algorithm = str(settings.algorithm)
    why = unstreamable(work.source)
    if why is not None:
        if algorithm == "fennel":
            raise PartitionError(f"partition.algorithm fennel: {why}")
        warn(f"partition.algorithm auto: metis ({why})")
        return None
    with loading(), data_warnings(warn):
        graph, edges = datasets.load_streamed(
            str(work.source.dataset), data_dir, split=work.source.split, types=work.source.typed
        )
    n, m = graph.num_nodes, edges.num_edges
    feat = memory.feature_bytes(graph)
    need = memory.streaming_need(n, m, settings.parts, CHUNK_EDGES, feat)
    if algorithm == "auto":
        budget = choice.budget(
            limit,
            resources_limit(settings),
            memlimits.cgroup_limit(),
            memlimits.address_space_limit(),
            memory.available_bytes(),
            *held(),
        )
        metis_need = memory.metis_need(n, m, feat)
        warn(choice.reason(metis_need, budget, need, settings.parts))
        if choice.choose(algorithm, metis_need, budget, need) == "metis":
            return None
    if limit is not None and need > limit:
        raise MemoryEstimateError(
            f"streaming {graph.name!r} ({n:,} nodes) needs about {memory.human(need)}, above "
            f"partition.memoryLimit {memory.human(limit)}"
        )
    if work.model is not None:
        check_data(work.model, graph, notes=False)
    if work.projection:
        from graphtrain.runtime.data.transform import project_graph_features

        project_graph_features(graph, work.projection, seed=0)
    return Streamed(graph, edges)


def run(
    work: PartitionWork, streamed: Streamed, out: Path, *, overwrite: bool, spin: bool, key: str | None = None
) -> partitioning.PartitionConfig:
    """Fennel-partition the streamed graph into `out` (`key`: the partition key it keeps, identity.py's
    made_for); returns the written partition's config."""
    s = work.settings
    with spinner() if spin else contextlib.nullcontext() as bar:
        if bar is not None:
            bar.add_task(f"streaming {streamed.graph.name} into {s.parts} (fennel)", total=None)
        config, _ = streaming.partition_stream(
            streamed.graph,
            streamed.edges,
            s.parts,
            out,
            balance=[str(b) for b in s.balance],
            max_imbalance=s.max_imbalance,
            seed=s.seed,
            overwrite=overwrite,
            made_for=key,
        )
    return partitioning.load_config(config)
