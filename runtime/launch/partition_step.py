"""One partition pipeline: what the operator's partition Job (`graphtrain partition --spec ... --out ...
--report-file /dev/termination-log`) and `graphtrain run` (before it starts any server) do to a graph.

Written twice, the two had drifted: only the Job refused a graph too big for partition.memoryLimit
before loading it, and each worded the data's warnings its own way. Both now run partition(), which
takes the steps in this order:

1. check the output directory (before any work);
2. refuse a graph whose nodes alone put the memory estimate above partition.memoryLimit, when its node
   count is known (graph.numNodes): before anything is allocated for it;
3. load the graph (each DataWarning handed to the caller's `warn`, one line each);
4. check the spec's model against the data: what it needs that the data lacks stops here, naming the
   field, before any server starts;
5. project the features (model.featureProjection);
6. partition (the estimate checked again on the loaded graph) and write, atomically.

The inputs come resolved (relative paths from the spec's directory, or --base-dir): from_spec() for
the launcher, from_options() for the command. The Job then writes the partition status into its
report file (roles/partition.py); the launcher keeps its reuse-by-content around the pipeline
(launch/reuse.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from graphtrain.contract.roles import OPTION, PartitionParams
from graphtrain.contract.spec import (
    GraphSource,
    GraphTraining,
    PartitionSpec,
    Problem,
    SpecError,
    load_yaml,
    problems_from_validation,
    quantity_to_bytes,
)
from graphtrain.runtime import partition as partitioning
from graphtrain.runtime.data import datasets
from graphtrain.runtime.data.cache import read_text
from graphtrain.runtime.data.checks import check_data
from graphtrain.runtime.data.inputs import resolve
from graphtrain.runtime.errors import data_warnings, renamed
from graphtrain.runtime.launch import reuse, streaming_step
from graphtrain.runtime.launch.work import PartitionWork
from graphtrain.runtime.progress import spinner

# the graph section's keys that name the graph: an option naming another graph drops all of them
_SOURCE_KEYS = ("dataset", "path", "triples", "format", "numNodes", "nodeIds", "features", "labels")
# the spec field each option of the partition command overrides, by the option's PartitionParams field
_OVERRIDES = {
    "graph.dataset": "dataset",
    "graph.path": "input_path",
    "graph.format": "fmt",
    "graph.numNodes": "num_nodes",
    "graph.nodeIds": "node_ids",
    "graph.reverseEdges": "reverse_edges",
    "partition.parts": "parts",
    "partition.algorithm": "algorithm",
    "partition.maxImbalance": "max_imbalance",
    "partition.seed": "seed",
    "partition.memoryLimit": "memory_limit",
    "partition.balance": "balance",
}


def option_of(path: str, p: PartitionParams) -> str | None:
    """The command-line option that set the setting at spec path `path` (graph.path, partition.parts[0],
    ...), or None when the setting came from --spec or its default: an error then names the option the
    user typed, not a spec field they never wrote."""
    name = _OVERRIDES.get(".".join(path.split(".")[:2]).split("[")[0])
    if name is None or getattr(p, name) is None:
        return None
    meta = next(f.metadata for f in dataclasses.fields(PartitionParams) if f.name == name)
    flags = [f for f in meta[OPTION].flags if f.startswith("--")] if OPTION in meta else []
    return flags[0] if flags else "--" + name.replace("_", "-")


def named_by_option(message: str, p: PartitionParams) -> str:
    """`message` ("spec.graph.path: ...") with its leading spec field replaced by the option that set it."""
    head = message.partition(": ")[0]
    flag = option_of(head.removeprefix("spec."), p) if head.startswith("spec.") else None
    return renamed(message, {head: flag}) if flag else message


def from_spec(gt: GraphTraining, base: Path) -> PartitionWork:
    """A spec's partitioning, its relative input paths read from `base` (the spec's directory)."""
    spec = gt.spec
    return PartitionWork(resolve(spec.graph, base), spec.partition, spec.model.feature_projection, gt)


def from_options(p: PartitionParams) -> PartitionWork:
    """The partition command's: the graph and partition sections of --spec overridden by the options
    (None: not given), validated by the spec models so an error names the field a spec would. Relative
    paths start at --base-dir, else the spec's directory, else the working directory.

    Raises:
        SpecError: every invalid setting, by its field path.
    """
    graph_overrides: dict[str, Any] = {"reverseEdges": p.reverse_edges}
    if p.dataset is not None:
        graph_overrides["dataset"] = p.dataset
    if p.input_path is not None:
        graph_overrides.update(path=str(p.input_path), format=p.fmt, numNodes=p.num_nodes)
    if p.node_ids is not None:
        graph_overrides["nodeIds"] = p.node_ids
    partition_overrides = {
        "parts": p.parts,
        "algorithm": p.algorithm,
        "maxImbalance": p.max_imbalance,
        "seed": p.seed,
        "memoryLimit": p.memory_limit,
        "balance": [b.strip() for b in p.balance.split(",") if b.strip()] if p.balance else None,
    }
    graph: dict[str, Any] = {}
    part: dict[str, Any] = {}
    projection = None
    gt = None
    if p.spec_path is not None:
        gt = load_yaml(read_text(p.spec_path))
        graph = gt.spec.graph.model_dump(by_alias=True, exclude_none=True)
        part = gt.spec.partition.model_dump(by_alias=True, exclude_none=True)
        projection = gt.spec.model.feature_projection
    if "dataset" in graph_overrides or "path" in graph_overrides:
        graph = {k: v for k, v in graph.items() if k not in _SOURCE_KEYS}
        gt = None  # another graph than the spec's: its model is not checked against it
    graph.update({k: v for k, v in graph_overrides.items() if v is not None})
    part.update({k: v for k, v in partition_overrides.items() if v is not None})
    problems: list[Problem] = []
    validated: dict[str, Any] = {}
    for prefix, model, data in (("graph", GraphSource, graph), ("partition", PartitionSpec, part)):
        try:
            validated[prefix] = model.model_validate(data)
        except ValidationError as exc:
            for q in problems_from_validation(exc):
                path = f"{prefix}.{q.path}"
                flag = option_of(path, p)
                problems.append(Problem(path=f"{flag} ({path})" if flag else path, message=q.message))
    if problems:
        raise SpecError(problems, title="invalid partition settings")
    base = (
        p.base_dir
        if p.base_dir is not None
        else (p.spec_path.parent if p.spec_path is not None else Path.cwd())
    )
    return PartitionWork(resolve(validated["graph"], base), validated["partition"], projection, gt)


def partition(
    work: PartitionWork,
    out: Path,
    *,
    overwrite: bool,
    data_dir: Path | None,
    warn: Callable[[str], None],
    loading: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    spin: bool = False,
    key: str | None = None,
) -> partitioning.PartitionConfig:
    """Partition `work` into `out` (module docstring: the steps); returns the written partition's config.
    `warn`: told each DataWarning's message; `loading`: a context the graph is loaded in (the launcher's
    umask for the shared dataset cache); `spin`: a spinner while partitioning (on a terminal); `key`: the
    partition key (launch/reuse.py) the partition keeps as its made_for (partition/identity.py), taken
    from the inputs once loaded when not given.

    Raises:
        GraphtrainError: the output cannot be written, the graph is too big for partition.memoryLimit,
            the data is bad or lacks what the model needs (each naming the field, file or value).
    """
    settings = work.settings
    partitioning.check_output(out, overwrite)  # before any work
    limit = quantity_to_bytes(settings.memory_limit) if settings.memory_limit else None
    if work.source.num_nodes is not None:
        partitioning.check_node_count(work.source.num_nodes, limit)  # before allocating for the nodes
    algorithm = str(settings.algorithm)
    if algorithm in ("fennel", "auto"):
        streamed = streaming_step.prepare(work, data_dir, limit, warn, loading)
        if streamed is not None:
            key = key or made_for(work, data_dir)
            return streaming_step.run(work, streamed, out, overwrite=overwrite, spin=spin, key=key)
        algorithm = "metis"  # auto, and the graph is no stored edge list or METIS fits
    with loading(), data_warnings(warn):
        graph = datasets.load_source(work.source, data_dir)
        if work.model is not None:
            check_data(work.model, graph)
    if work.projection:
        from graphtrain.runtime.data.transform import project_graph_features

        project_graph_features(graph, work.projection, seed=0)
    with spinner() if spin else contextlib.nullcontext() as bar:
        if bar is not None:
            bar.add_task(f"partitioning {graph.name} into {settings.parts}", total=None)
        result = partitioning.partition_graph(
            graph,
            settings.parts,
            algorithm,
            [str(b) for b in settings.balance],
            settings.max_imbalance,
            settings.seed,
            limit,
        )
        key = key or made_for(work, data_dir)
        config = partitioning.write(graph, result, out, overwrite=overwrite, made_for=key)
    return partitioning.load_config(config)


def made_for(work: PartitionWork, data_dir: Path | None) -> str:
    """The partition key (launch/reuse.py) of `work`, its inputs' contents read now (a dataset: its
    cached manifest's)."""
    from graphtrain.runtime.data.inputs import fingerprint

    name = None if work.source.dataset is None else str(work.source.dataset)
    cached = (
        None
        if name is None or not datasets.is_fetched(name, data_dir)
        else datasets.dataset_dir(name, data_dir)
    )
    return reuse.key_of(work.source, work.settings, work.projection, fingerprint(work.source, cached))
