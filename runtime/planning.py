"""`graphtrain plan`'s command body: the capacity plan (runtime/capacity.py), this build's unit costs
(measured now with --calibrate, or read with --costs; runtime/calibrate.py) and the step time they
predict (runtime/steptime.py), as lines."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtrain.contract.spec import (
    GNNModel,
    GraphSAGEModel,
    GraphTrainingSpec,
    Sharding,
    colocated,
    gnn,
    is_gnn,
    trainers_per_shard,
)
from graphtrain.contract.spec.base import quantity_to_bytes
from graphtrain.runtime import capacity, cpus
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.partition.format import PartitionConfig
from graphtrain.runtime.steptime import (
    Costs,
    Load,
    StepTime,
    costs_from_dict,
    predict,
    touch_counts,
)

if TYPE_CHECKING:
    from graphtrain.runtime.models import GNNShape


def gnn_of(spec: GraphTrainingSpec, cfg: PartitionConfig) -> tuple[GNNModel, GNNShape]:
    """The spec's GNN and the shape it is built in over `cfg`: input (features and node embedding) and
    classes (as train/node_classification.py builds it)."""
    # here, not at the top: the models import torch, which `graphtrain validate`, plan's refusals and
    # a plan without a step time (this module's other work) never need
    from graphtrain.runtime.models import GNNShape

    m = gnn(spec.model) if is_gnn(spec.model.kind) else GraphSAGEModel()  # a KGE spec calibrates one
    feat = (cfg.data.get("ndata") or {}).get("feat")
    in_dim = int(feat["shape"][1]) if feat and m.use_features else 0
    table = next((t for t in spec.embeddings if t.name == m.node_embedding), None)
    in_dim += table.dim if table else 0
    classes = int(cfg.data.get("num_classes") or 2)
    edges = (cfg.data.get("edata") or {}).get("efeat")
    return m, GNNShape(
        max(in_dim, 1),
        classes,
        num_relations=num_relations(cfg),
        edge_dim=int(edges["shape"][1]) if edges else 0,
    )


def num_relations(cfg: PartitionConfig) -> int:
    """The relations a typed GNN tells apart over `cfg` (1: an untyped graph)."""
    return max(1, len(cfg.data.get("canonical_etypes") or []))


def trainer_threads(spec: GraphTrainingSpec, hosts: int = 1, host_cores: float | None = None) -> int:
    """Trainer 0's torch threads as `graphtrain run` gives them over `hosts` simulated hosts (the
    spec's training.threads, else the launcher's share of this machine's cores: runtime/cpus.py), or
    on hosts of `host_cores` cores each."""
    cores = cpus.available_cores() if host_cores is None else host_cores * hosts
    shares = cpus.host_threads(cores, spec.trainers.replicas, spec.num_shards, hosts)
    return cpus.role_threads(spec.training.threads, shares[0])


def loads(
    plan: capacity.CapacityPlan, spec: GraphTrainingSpec, model: tuple[GNNModel, GNNShape], threads: int = 1
) -> list[Load]:
    """Each trainer's work per step from the plan's replayed batches (GraphSAGE only: else none): its
    ops, the shards each touches on its host and across hosts, and the all-reduce's ring steps."""
    from graphtrain.runtime.models import gnn_entry  # here: torch, as in gnn_of

    out = []
    shards, hosts, world = spec.num_shards, max(plan.hosts, 1), spec.trainers.replicas
    m, shape = model
    # a collective node table is no shard's traffic (its all-to-all is the wire's); a server one's rows
    # go with the features and labels when batches are made inline (node_classification._rows_ahead)
    embedding = any(t.name == m.node_embedding and t.sharding == Sharding.server for t in spec.embeddings)
    together = embedding and spec.training.prefetch == 0
    entry = gnn_entry(m.KIND)
    for rank, w in enumerate(plan.wires):
        if w.work is None:
            continue
        local = sum(1 for i in range(shards) if i % hosts == rank % hosts)
        touches = touch_counts(
            len(spec.training.fanouts), 1 + int(m.use_features), embedding, local, shards - local, together
        )
        out.append(
            Load(
                edges=w.work.edges,
                feature_bytes=w.work.feature_bytes,
                row_bytes=w.work.row_bytes,
                remote=w.work.remote,
                macs=entry.macs(m, shape, w.work.blocks),
                allreduce_bytes=w.allreduce,
                wire_bytes=w.sent + w.received - w.allreduce,
                path_bytes=max(w.sent, w.received),
                threads=threads,
                inline=spec.training.prefetch == 0,
                touches=touches,
                ring_steps=2 * (world - 1),
            )
        )
    return out


def read_costs(path: Path) -> Costs:
    """A costs file written by `graphtrain plan --calibrate --out`.

    Raises:
        GraphtrainError: one line naming the file and what is wrong with it.
    """
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise GraphtrainError(f"--costs {path}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise GraphtrainError(f"--costs {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    try:
        return costs_from_dict(doc)
    except ValueError as exc:
        raise GraphtrainError(f"--costs {path}: {exc}") from None


def step_lines(step: StepTime, batch: int) -> list[str]:
    """The predicted step as lines: its time, samples/s, the bound that set it and each stage's mean."""
    stages = ", ".join(
        f"{k} {1000 * step.parts[k]:.1f} ms"
        for k in ("sample", "fetch", "pull", "forward_backward", "push", "allreduce")
        if k in step.parts
    )
    bounds = ", ".join(f"{k[6:]} {1000 * v:.1f} ms" for k, v in step.parts.items() if k.startswith("bound "))
    share = step.parts.get("cpu share", 0.0)
    busy = step.parts.get("busy processes", 0.0)
    rate = batch / step.seconds if step.seconds > 0 else 0.0
    return [
        f"predicted step: {1000 * step.seconds:.1f} ms ({rate:,.0f} samples/s), set by {step.bound} "
        f"(bounds: {bounds}; {busy:.1f} busy processes get {share:.2f} cores)",
        f"per trainer per step, unshared: {stages}",
    ]


@dataclass
class PlanRequest:
    """What `graphtrain plan` was asked (the CLI's options, parsed)."""

    hosts: int
    bandwidth: float | None
    memory: int | None
    calibrate: bool = False
    costs: Path | None = None
    out: Path | None = None
    cores: float | None = None  # each host's; None: this machine's, shared by every host


def plan_request(
    hosts: int,
    bandwidth: str | None,
    memory: str | None,
    cores: float | None = None,
    calibrate: bool = False,
    costs: Path | None = None,
    out: Path | None = None,
) -> PlanRequest:
    """`graphtrain plan`'s options, parsed.

    Raises:
        GraphtrainError: one line naming the option that is wrong.
    """
    try:
        rate = capacity.bandwidth_bytes(bandwidth) if bandwidth else None
        per_pod = quantity_to_bytes(memory) if memory else None
    except ValueError as exc:  # the bandwidth's names its option; a quantity's names only its text
        raise GraphtrainError(str(exc) if str(exc).startswith("--") else f"--memory: {exc}") from None
    if rate is not None and not rate > 0:  # 0 read as "not given": no link time, and no line saying so
        raise GraphtrainError(f"--bandwidth {bandwidth!r}: not a positive rate such as '1gbit'")
    if per_pod is not None and not per_pod > 0:  # 0 read as "not given": no shard count, silently
        raise GraphtrainError(f"--memory {memory!r}: not a positive memory quantity such as '16Gi'")
    if out and not calibrate:
        raise GraphtrainError("--out: only with --calibrate (it writes the measured costs)")
    if calibrate and costs is not None:  # one source of costs: measured now, or read from an earlier run
        raise GraphtrainError("--calibrate measures the costs, --costs reads them from a file: pick one")
    if cores is not None and not (cores > 0 and math.isfinite(cores)):
        raise GraphtrainError(f"--cores: {cores} is not a positive number of cores")
    return PlanRequest(hosts, rate, per_pod, calibrate, costs, out, cores)


def predicted(
    spec: GraphTrainingSpec,
    cfg: PartitionConfig,
    plan: capacity.CapacityPlan,
    costs: Costs,
    bandwidth: float | None,
    host_cores: float | None = None,
) -> StepTime:
    """The plan's step time under `costs`, on hosts of `host_cores` cores (None: this machine's
    cores shared by every host)."""
    work = loads(plan, spec, gnn_of(spec, cfg), trainer_threads(spec, plan.hosts, host_cores))
    used = hosts_in_use(plan.hosts, spec.trainers.replicas, spec.num_shards)
    return predict(costs, work, used, bandwidth, host_cores)


def hosts_in_use(hosts: int, trainers: int, shards: int) -> int:
    """The hosts a process runs on (shard s and trainer r on host s or r mod `hosts`): beyond them a host
    holds nothing, so it carries none of the links' bytes and lends no cores (counted, `--hosts 64`
    spread 2 shards' and 2 trainers' traffic over 64 links and their CPU over 64 hosts' cores)."""
    return max(1, min(hosts, max(trainers, shards)))


def worker_lines(spec: GraphTrainingSpec, made: capacity.CapacityPlan) -> list[str]:
    """With partition locality (spec.placement.locality), each Kubernetes worker pod's memory: its shard
    server's and its trainers' together, which the pod's containers request (its /dev/shm holds the
    server's tables, counted once: the trainers map them)."""
    k = trainers_per_shard(spec)
    if not colocated(spec) or k is None:
        return []
    needs = {r.role: r.total for r in made.roles}
    lines = []
    for p in range(spec.num_shards):
        roles = [f"shard-{p}", *(f"trainer-{r}" for r in range(p * k, (p + 1) * k))]
        parts = ", ".join(f"{role} {capacity.human(needs[role])}" for role in roles if role in needs)
        total = sum(needs.get(role, 0) for role in roles)
        lines.append(f"worker-{p} (placement.locality partition, one pod): {capacity.human(total)} ({parts})")
    return lines


def run_plan(
    spec: GraphTrainingSpec, cfg: PartitionConfig, req: PlanRequest, say: Callable[[str], None]
) -> list[str]:
    """The plan's lines, with the step time when costs are given or measured (--out: written there)."""
    mixed = str(spec.training.mixed_precision)
    costs = read_costs(req.costs) if req.costs else None
    if costs is not None and costs.mixed_precision != mixed:
        raise GraphtrainError(
            f"--costs {req.costs}: its dense model was timed with training.mixedPrecision "
            f"{costs.mixed_precision}, the spec asks {mixed} (calibrate again: --calibrate --out)"
        )
    made = capacity.make_plan(spec, cfg, req.hosts)
    lines = capacity.plan_lines(made, req.bandwidth, req.memory) + worker_lines(spec, made)
    if req.calibrate:
        from graphtrain.runtime.calibrate import calibrate

        costs = calibrate(
            cfg, *gnn_of(spec, cfg), list(spec.training.fanouts), say=say, mixed_precision=mixed
        )
        if req.out:
            req.out.write_text(json.dumps(costs.to_dict(), indent=2) + "\n")
            say(f"costs written to {req.out}")
    if costs is not None:
        if not made.wires:
            return [*lines, "step time: predicted for GNN node classification only (not this task)"]
        step = predicted(spec, cfg, made, costs, req.bandwidth, req.cores)
        lines += step_lines(step, spec.training.batch_size)
    return lines


def plan_command(
    gt: Any,
    spec_path: Path,
    partition: Path | None,
    data_dir: Path | None,
    req: PlanRequest,
    say: Callable[[str], None],
) -> list[str]:
    """`graphtrain plan`: the spec's partition (`partition`, or made now as `graphtrain run` makes it)
    and its plan's lines."""
    import tempfile

    from graphtrain.runtime.partition.format import load_config

    if req.calibrate and not capacity.replayed(gt.spec):  # its replay samples train nodes a KG has not
        raise GraphtrainError(
            f"--calibrate: the step time is predicted for GNN node classification only, not "
            f"task.kind {gt.spec.task_kind} with model.kind {gt.spec.model.kind} (plan without it: each "
            f"role's memory)"
        )
    with tempfile.TemporaryDirectory(prefix="graphtrain-plan-") as tmp:
        config = partition or partition_for(gt, spec_path, data_dir, Path(tmp) / "partition")
        cfg = load_config(config)
        if partition is not None:
            given_partition_fits(gt.spec, cfg)
        return run_plan(gt.spec, cfg, req, say)


def given_partition_fits(spec: GraphTrainingSpec, cfg: PartitionConfig) -> None:
    """`plan --partition`: a partition of the spec's dataset, in as many parts as the spec has shards (a
    partition of another graph would be planned with its data, or fail deep inside the replay).

    Raises:
        GraphtrainError: naming the partition and what differs.
    """
    dataset = spec.graph.dataset
    name = str(cfg.data.get("graph_name", ""))
    if dataset is not None and name != dataset:
        raise GraphtrainError(
            f"--partition {cfg.path}: a partition of {name!r}, the spec trains on graph.dataset {dataset!r}"
        )
    if cfg.num_parts != spec.num_shards:
        raise GraphtrainError(
            f"--partition {cfg.path}: {cfg.num_parts} part(s), the spec has {spec.num_shards} shard server(s)"
        )
    # a spec of files names no dataset to compare: what the replay of its batches reads must be there
    held = sorted(cfg.data.get("ndata") or {})
    missing = [k for k in ("label", "train_mask") if k not in held]
    if capacity.replayed(spec) and missing:
        data = ", ".join(held) or "none"
        raise GraphtrainError(
            f"--partition {cfg.path}: no node {' or '.join(missing)} (its node data: {data}), which task "
            f"{spec.task_kind} trains on: a partition of another graph?"
        )


def data_problems(
    spec: GraphTrainingSpec, base_dir: Path, data_dir: Path | None
) -> tuple[list[Any], list[str], str]:
    """What `graphtrain validate` finds in `spec`'s data: the requirements' problems (each naming a spec
    field) and the memory limits', the notes on what is probably not meant, and a note when the data
    could not be read yet (a bundled dataset not fetched: validate downloads nothing)."""
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.data.checks import review

    dataset = spec.graph.dataset
    if dataset is not None and not datasets.is_fetched(str(dataset), data_dir):
        return (
            [],
            [],
            f" (data not checked: dataset {dataset} is not fetched; `graphtrain data fetch {dataset}`)",
        )
    graph = datasets.load_source(spec.graph, data_dir, base_dir=base_dir)
    found, notes = review(spec, graph)
    return [*found, *capacity.limit_problems(spec, graph)], notes, ""


def partition_for(
    gt: Any, spec_path: Path, data_dir: Path | None, out: Path, warn: Callable[[str], None] = print
) -> Path:
    """The spec's partition, made into `out` as `graphtrain run` makes it; its config file."""
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.launch import partition_step

    work = partition_step.from_spec(gt, spec_path.parent)
    if work.source.dataset is not None:
        datasets.fetch(str(work.source.dataset), data_dir)
    return partition_step.partition(work, out, overwrite=True, data_dir=data_dir, warn=warn).path
