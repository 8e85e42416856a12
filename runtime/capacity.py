"""`graphtrain plan`: what a GraphTraining needs, per role, before anything is started (issue 33).

Memory of each role, from the partition's own files and the spec's tables:
- a shard server: its partition's graph (CSR, edge types) and node data (the files' sizes: what it
  maps), each server-sharded table's rows in its range and their optimizer state
  (kvstore/sizes.state_bytes), and the process itself (SHARD_BASE: an idle shard server's RSS);
- a trainer: the process (TRAINER_BASE: a trainer's RSS before its first batch, torch and the model),
  its collective shares (rows / world and their state), and a batch's working set (its input nodes'
  features and rows, gradients and activations, measured on sampled batches);
- the partition step: partition/memory.estimate, or streaming_need for a partition fennel made.
The shard count that fits a memory per pod is the smallest whose largest shard fits.

The wire: GraphSAGE's data path replayed in this process over in-process shards through a transport
that counts the bytes of every call a trainer would send to, or receive from, a shard on another host
(shard s on host s mod H, trainer r on host r mod H: what bench/hosts.py runs). Shards on the
trainer's own host are read as shared memory is, for free. So bytes per step are the payload that the
real sampler, pulls and pushes move, for real sampled batches; framing and TCP/IP headers add a few
percent (bench/RESULTS.md compares them with the bytes bench/hosts.py counts on its links).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from graphtrain.contract import memory
from graphtrain.contract.spec import (
    NODE_CLASSIFICATION,
    Device,
    GraphTrainingSpec,
    MemoryNeed,
    Problem,
    Sharding,
    gnn,
    is_gnn,
    quantity_to_bytes,
)
from graphtrain.runtime import arrays, dtypes
from graphtrain.runtime.data.edgefiles import CHUNK_EDGES
from graphtrain.runtime.native.keymap import KeyMap
from graphtrain.runtime.partition import memory as partition_memory
from graphtrain.runtime.partition.format import PartitionConfig
from graphtrain.runtime.partition.typed_ids import NodeRows
from graphtrain.runtime.storage.sizes import share, state_bytes

if TYPE_CHECKING:  # torch: not for the partition Job, which reports memory_need()
    from graphtrain.runtime.kvstore.client.transport import Answer, Call

MiB = 2**20
# RSS measured on this build (2026-11-27, bench/RESULTS.md "graphtrain plan"): an idle shard server
# after its imports (torch, zmq, the native core) and a trainer before its first batch
SHARD_BASE = 330 * MiB
TRAINER_BASE = 520 * MiB
ACTIVATIONS = 4  # a batch's input rows held about this many times over (inputs, gradients, layers)


@dataclass
class RoleNeed:
    """What one role holds, by item (bytes)."""

    role: str
    items: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.items.values())


def table_rows(table: Any, cfg: PartitionConfig) -> int:
    """Rows of spec table `table` over the partition `cfg`."""
    data, keys = cfg.data, str(table.keys)
    if keys == "relations":
        return int((data.get("kg") or {}).get("num_relations", 0))
    if keys == "features":  # a row per feature column (model.featureBag), as graph/bags.py counts them
        feat = (data.get("ndata") or {}).get("feat")
        return int(feat["shape"][1]) if feat else 0
    return _node_rows(table, cfg).num_rows


def shard_rows(table: Any, cfg: PartitionConfig, shard: int) -> int:
    """Rows of a server table that shard `shard` holds: its partition's nodes (of the table's node
    types) for node tables, an even share of the others."""
    if str(table.keys) == "nodes":
        b = _node_rows(table, cfg).bounds
        return int(b[shard + 1] - b[shard])
    total, n = table_rows(table, cfg), cfg.num_parts
    return -(-total // n)


def _node_rows(table: Any, cfg: PartitionConfig) -> NodeRows:
    return NodeRows.of(cfg.data, table.name, getattr(table, "node_types", None))


def _row_element(table: Any) -> int:
    """Bytes of one element of a table's rows: 2 for float16 and bfloat16, else 4 (its state is float32)."""
    return 2 if str(getattr(table, "dtype", "float32")) in dtypes.HALF else 4


def _table_bytes(table: Any, rows: int) -> tuple[int, int]:
    opt = table.optimizer
    step_count = str(getattr(opt, "step_count", "global"))
    return rows * table.dim * _row_element(table), state_bytes(str(opt.kind), step_count, rows, table.dim)


def _dynamic_share(items: dict[str, int], t: Any, holders: int, index: int) -> int | None:
    """Rows of a dynamic vocabulary that holder `index` of `holders` keeps (its share of the capacity,
    key mod holders), its key map added to `items`; None for a table of fixed rows."""
    capacity = getattr(t.vocabulary, "capacity", None)
    if not capacity:
        return None
    rows = share(int(capacity), holders, index)
    items[f"key map of {t.name}"] = KeyMap.bytes_for(max(1, rows))  # host memory, wherever the rows are
    return rows


def shard_need(spec: GraphTrainingSpec, cfg: PartitionConfig, shard: int) -> RoleNeed:
    root = cfg.root / f"part-{shard}"
    need = RoleNeed(f"shard-{shard}", {"process": SHARD_BASE})
    need.items["graph"] = sum(f.stat().st_size for f in root.glob("*.npy"))
    need.items["node data"] = sum(f.stat().st_size for f in (root / "ndata").glob("*"))
    for t in spec.embeddings:
        if t.sharding == Sharding.collective:
            continue
        rows = _dynamic_share(need.items, t, cfg.num_parts, shard)
        data, state = _table_bytes(t, shard_rows(t, cfg, shard) if rows is None else rows)
        need.items[f"table {t.name}"] = data
        need.items[f"table {t.name} optimizer"] = state
    if is_gnn(spec.model.kind):
        rows = int(cfg.node_bounds[shard + 1] - cfg.node_bounds[shard]) if shard < cfg.num_parts else 0
        widths = layer_widths(spec, cfg.data.get("num_classes"))
        need.items["layer outputs (evaluation, inference)"] = rows * 4 * sum(widths)
    return need


def layer_widths(spec: GraphTrainingSpec, num_classes: int | None = None) -> list[int]:
    """Each GNN layer's output width: what evaluation and inference keep on the shard servers for
    every node (train/layerwise.py's scratch tensors). Hidden layers are hidden_dim wide (attention
    heads split it); the last is the classes of node classification, else hidden_dim."""
    m = gnn(spec.model)
    last = num_classes if spec.task_kind == NODE_CLASSIFICATION and num_classes else m.hidden_dim
    return [m.hidden_dim] * (m.num_layers - 1) + [last]


def collective_shares(spec: GraphTrainingSpec, rows: Callable[[Any], int]) -> dict[str, int]:
    """A trainer's share of each collective table (`rows`: a spec table's rows) and its optimizer
    state: rank 0's ceil(rows / world), of a dynamic vocabulary's capacity (in all, split like its keys:
    collective/rows.py)."""
    world, items = spec.trainers.replicas, {}
    for t in spec.embeddings:
        if t.sharding != Sharding.collective:
            continue
        held = _dynamic_share(items, t, world, 0)
        data, state = _table_bytes(t, -(-rows(t) // world) if held is None else held)
        items[f"table {t.name} (share)"] = data
        items[f"table {t.name} optimizer"] = state
    return items


def trainer_need(spec: GraphTrainingSpec, cfg: PartitionConfig, rank: int, batch_bytes: int) -> RoleNeed:
    need = RoleNeed(f"trainer-{rank}", {"process": TRAINER_BASE, "batch": batch_bytes})
    need.items.update(collective_shares(spec, lambda t: table_rows(t, cfg)))
    return need


def host_bytes(spec: GraphTrainingSpec, shares: dict[str, int]) -> int:
    """A trainer's host memory before its batches: its process, and its collective shares unless they
    live on its GPU (trainers.device cuda; a dynamic vocabulary's key map stays in host memory)."""
    gpu = spec.trainers.device == Device.cuda
    return TRAINER_BASE + sum(v for k, v in shares.items() if not gpu or k.startswith("key map"))


def memory_need(spec: GraphTrainingSpec, cfg: PartitionConfig) -> MemoryNeed:
    """What the partition step reports (status.partition.memory): the largest shard server's host memory
    (its tables on its GPU with shardServers.device cuda) and a trainer's before its batches (the
    operator sizes and checks pods by them)."""
    gpu = spec.shard_servers.device == Device.cuda
    shards = max(
        sum(v for k, v in shard_need(spec, cfg, s).items.items() if not (gpu and k.startswith("table ")))
        for s in range(cfg.num_parts)
    )
    shares = collective_shares(spec, lambda t: table_rows(t, cfg))
    return MemoryNeed(shard_server=shards, trainer=host_bytes(spec, shares))


def partition_need(cfg: PartitionConfig, feat_bytes: int) -> RoleNeed:
    """The partition step's estimate for the algorithm that made `cfg`: fennel's grows with the parts
    (its refinement's counters), METIS' with the edges."""
    n, e = int(cfg.data["num_nodes"]), int(cfg.data["num_edges"])
    if cfg.data.get("algorithm") == "fennel":
        need = partition_memory.streaming_need(n, e, cfg.num_parts, CHUNK_EDGES, feat_bytes)
    else:
        need = partition_memory.estimate(n, e, feat_bytes)
    return RoleNeed("partition", {"partitioning": need})


def shards_that_fit(needs: Sequence[RoleNeed], memory: int) -> int | None:
    """The smallest shard count whose largest shard fits `memory`, assuming the data part of a shard
    shrinks as 1/count from the plan's (None: even one row per pod would not fit the process)."""
    if not needs:
        return None
    data = sum(n.total - SHARD_BASE for n in needs)
    if memory <= SHARD_BASE:
        return None
    return max(1, -(-data // (memory - SHARD_BASE)))


class CountingTransport:
    """An in-process transport that counts what crosses hosts: every call to a shard on another host
    than `here` (request arrays out, rows back); shards on this host are read in place (shared memory)."""

    def __init__(self, inner: Any, host_of_shard: Sequence[int], here: int):
        self.inner = inner
        self.num_shards = inner.num_shards
        self.max_frame_bytes = None
        self.chunked_pushes = False
        self.half_gradients = True  # counted as the socket's path sends them
        self.remote = [h != here for h in host_of_shard]
        self.sent = 0
        self.received = 0

    def _count(self, calls: list[Call], answers: list[Answer]) -> None:
        for c, a in zip(calls, answers, strict=True):
            if not self.remote[c.shard]:
                continue
            self.sent += sum(int(x.nbytes) for x in c.arrays)
            if c.op == "pull" and c.out is not None:
                row = int(c.out.itemsize * np.prod(c.out.shape[1:], dtype=np.int64))
                self.received += len(c.arrays[0]) * row
            self.received += sum(int(x.nbytes) for x in a.arrays)

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]:
        answers = self.inner.call_many(calls, timeout)
        self._count(calls, answers)
        return answers

    def begin_many(self, calls: list[Call], timeout: float | None = None) -> None:
        self.call_many(calls, timeout)

    def settle(self) -> None:
        return None

    def local_view(self, shard: int, name: str) -> Any:
        return None if self.remote[shard] else self.inner.local_view(shard, name)

    def is_local(self, shard: int) -> bool:
        return False

    def direct(self, name: str) -> None:
        return None  # every pull and push is counted

    def push_buffer(self, nbytes: int) -> None:
        return None

    def local_graph(self, shard: int) -> Any:
        return None if self.remote[shard] else self.inner.local_graph(shard)

    def close(self) -> None:
        return None


@dataclass
class Wire:
    """Per step of one trainer: bytes it sends to and receives from other hosts, its batch working set."""

    sent: float
    received: float
    batch_bytes: int
    input_nodes: float
    allreduce: float = 0.0  # of sent and received: the dense gradients' all-reduce
    work: StepWork | None = None  # what the step-time model needs (runtime/steptime.py)
    alltoall: float = 0.0  # of sent and received: collective tables' lookups and updates


@dataclass
class StepWork:
    """One trainer's mean work per step: sampled edges, feature and embedding-row bytes, the fraction of
    input nodes on other hosts' shards, and (destinations, edges) of each block, input first."""

    edges: float
    feature_bytes: float
    row_bytes: float
    remote: float
    blocks: list[tuple[float, float]]


def replay(spec: GraphTrainingSpec, cfg: PartitionConfig, hosts: int, rank: int, steps: int = 8) -> Wire:
    """Trainer `rank`'s GraphSAGE data path for `steps` real batches over in-process shards: sampling,
    features and labels, the node embedding's pull and its gradients' push, counted across hosts; a
    collective table's lookups and updates (the node table's, a feature bag's) by its keys' count."""
    import torch

    from graphtrain.runtime.graph import DistGraph, sample_blocks
    from graphtrain.runtime.graph.bags import FeatureBags
    from graphtrain.runtime.graph.dist_graph import standalone_client
    from graphtrain.runtime.graph.split import node_split
    from graphtrain.runtime.kvstore.client.kvclient import KVClient
    from graphtrain.runtime.optim import SparseAdam
    from graphtrain.runtime.tensor import DistEmbedding, PartitionBook

    inner = standalone_client(cfg.path)
    world = spec.trainers.replicas
    counting = CountingTransport(inner.transport, [s % hosts for s in range(cfg.num_parts)], rank % hosts)
    client = KVClient(counting)
    graph = DistGraph(cfg, client)
    m, tr = gnn(spec.model), spec.training
    table = next((t for t in spec.embeddings if t.name == m.node_embedding), None)
    node_rows = _node_rows(table, cfg) if table else None  # a table over some node types: their rows only
    bag = next((t for t in spec.embeddings if m.feature_bag and t.name == m.feature_bag.embedding), None)
    bags = FeatureBags(cfg) if bag is not None else None
    alltoall = 0.0  # collective tables' lookups and updates across hosts (exchange.step_bytes)

    def served(t: Any, book: Any) -> DistEmbedding:  # a server table over the counting client
        rows = int(book.bounds[-1])
        return DistEmbedding(
            rows, t.dim, t.name, book=book, client=client, dtype=getattr(torch, str(t.dtype))
        )

    on_server = [t is not None and t.sharding == Sharding.server for t in (table, bag)]
    emb = served(table, PartitionBook(node_rows.bounds)) if on_server[0] and node_rows is not None else None
    words = served(bag, PartitionBook.even(table_rows(bag, cfg), cfg.num_parts)) if on_server[1] else None
    opt = SparseAdam([e for e in (emb, words) if e is not None], lr=0.001) if emb or words else None
    ids = node_split(cfg, "train", rank, world)
    batch = max(1, tr.batch_size // world)
    rng = np.random.default_rng(tr.seed)
    inputs, work, done = [], [], []
    feat = graph.ndata["feat"] if m.use_features and "feat" in graph.ndata else None
    for i in range(steps):
        seeds = rng.choice(ids, min(batch, len(ids)), replace=False)
        mb = sample_blocks(graph, seeds, list(tr.fanouts), seed=i)
        n = len(mb.input_nodes)
        row = 0
        if feat is not None:
            row += int(np.asarray(feat[mb.input_nodes[:1]]).nbytes)
            feat[mb.input_nodes]
        pulled = mb.input_nodes if node_rows is None else node_rows.rows(mb.input_nodes)
        pulled = pulled[pulled >= 0]
        # per input node, from the shards (a collective table's rows are its all-to-all's, below)
        on_shards = table is not None and table.sharding == Sharding.server
        emb_row = table.dim * _row_element(table) * len(pulled) // max(n, 1) if on_shards else 0
        done.append(_step_work(mb, cfg, hosts, rank, row, emb_row))
        graph.ndata["label"][mb.seeds]
        word_keys = arrays.unique(bags(mb.input_nodes)[0]) if bags is not None else None
        looked = [(table, pulled)] if table is not None and table.sharding == Sharding.collective else []
        looked += [(bag, word_keys)] if bag is not None and not on_server[1] else []
        alltoall += sum(_alltoall_bytes(t, keys, world, hosts, rank) for t, keys in looked)
        pulls = [(e, k) for e, k in ((emb, pulled), (words, word_keys)) if e is not None and k is not None]
        if pulls and opt is not None:
            sum(e(torch.from_numpy(k)).sum() for e, k in pulls).backward()  # type: ignore[union-attr]
            opt.step()
        row += table.dim * 4 if table else 0  # the node table's rows, wherever they live
        inputs.append(n)
        work.append(n * row * ACTIVATIONS)
    inner.close()
    ring = allreduce_bytes(spec, cfg, hosts, table.dim if table else 0, feat)
    sent, received = (x / steps + ring + alltoall / steps for x in (counting.sent, counting.received))
    return Wire(
        sent, received, int(max(work)), float(np.mean(inputs)), ring, _mean_work(done), alltoall / steps
    )


def _alltoall_bytes(table: Any, keys: np.ndarray, world: int, hosts: int, rank: int) -> float:
    import torch

    from graphtrain.runtime.collective.exchange import step_bytes

    dtype = getattr(torch, str(table.dtype))
    return step_bytes(len(arrays.unique(keys)), table.dim, dtype, world, hosts, rank)


def _step_work(mb: Any, cfg: PartitionConfig, hosts: int, rank: int, feat_row: int, emb_row: int) -> StepWork:
    """A sampled batch's work; shard s is on host s mod `hosts` (node ids are contiguous per shard)."""
    owner = np.searchsorted(np.asarray(cfg.node_bounds), mb.input_nodes, side="right") - 1
    remote = float(np.mean(owner % hosts != rank % hosts)) if len(owner) else 0.0
    blocks = [(float(b.num_dst), float(len(b.src))) for b in mb.blocks]
    n = len(mb.input_nodes)
    return StepWork(sum(e for _, e in blocks), n * feat_row, n * emb_row, remote, blocks)


def _mean_work(done: list[StepWork]) -> StepWork:
    blocks = [
        tuple(float(np.mean(x)) for x in zip(*layer, strict=True))
        for layer in zip(*(d.blocks for d in done), strict=True)
    ]
    return StepWork(
        float(np.mean([d.edges for d in done])),
        float(np.mean([d.feature_bytes for d in done])),
        float(np.mean([d.row_bytes for d in done])),
        float(np.mean([d.remote for d in done])),
        [(b[0], b[1]) for b in blocks],
    )


def allreduce_bytes(
    spec: GraphTrainingSpec, cfg: PartitionConfig, hosts: int, emb_dim: int, feat: Any
) -> float:
    """Bytes one trainer sends (and receives) per step in the all-reduce of the dense gradients
    (train/gradsync.py): a ring moves 2 (W-1)/W of them each way, and across hosts whenever there are
    several (ring neighbours r and r+1 are on different hosts r mod H and r+1 mod H)."""
    from graphtrain.runtime.models import GNNShape, gnn_entry

    world = spec.trainers.replicas
    if world < 2 or hosts < 2:
        return 0.0
    m = gnn(spec.model)
    feat_dim = int(feat.shape[1]) if feat is not None else 0
    split = emb_dim > 0 and feat_dim > 0
    classes = int(cfg.data.get("num_classes") or 2)
    edges = (cfg.data.get("edata") or {}).get("efeat")
    shape = GNNShape(
        feat_dim + emb_dim,
        classes,
        frozen=feat_dim if split else 0,
        num_relations=max(1, len(cfg.data.get("canonical_etypes") or [])),
        edge_dim=int(edges["shape"][1]) if edges else 0,
    )
    model = gnn_entry(m.KIND).build(m, shape)
    grads = sum(p.numel() for p in model.parameters() if p.requires_grad) * 4
    return 2 * (world - 1) / world * grads


def human(n: float) -> str:
    return partition_memory.human(int(n))


def feature_bytes(cfg: PartitionConfig) -> int:
    return sum(
        f.stat().st_size
        for p in range(cfg.num_parts)
        for f in (cfg.root / f"part-{p}" / "ndata").glob("feat*")
    )


@dataclass
class CapacityPlan:
    roles: list[RoleNeed]
    wires: list[Wire]  # per trainer (GraphSAGE only)
    hosts: int

    def role(self, prefix: str) -> list[RoleNeed]:
        return [r for r in self.roles if r.role.startswith(prefix)]

    @property
    def bytes_per_step(self) -> float:
        """What every host sends over its link in one step, all trainers together: each trainer's
        traffic with other hosts' shards both ways, and its all-reduce sends once (what it receives
        there is another trainer's send)."""
        return sum(w.sent + w.received - w.allreduce for w in self.wires)


def replayed(spec: GraphTrainingSpec) -> bool:
    """Whether the plan replays the spec's batches for its traffic (a GNN's node classification)."""
    return is_gnn(spec.model.kind) and spec.task_kind == NODE_CLASSIFICATION


def make_plan(spec: GraphTrainingSpec, cfg: PartitionConfig, hosts: int) -> CapacityPlan:
    """The plan of `spec` over `hosts`: every role's memory, and node classification's traffic replayed
    from its sampling (the KGE and link-prediction steps' traffic is not modelled: no wires)."""
    replicas = spec.trainers.replicas
    wires = [replay(spec, cfg, hosts, r) for r in range(replicas)] if replayed(spec) else []
    roles = [
        partition_need(cfg, feature_bytes(cfg)),
        *(shard_need(spec, cfg, s) for s in range(cfg.num_parts)),
        *(trainer_need(spec, cfg, r, wires[r].batch_bytes if wires else 0) for r in range(replicas)),
    ]
    return CapacityPlan(roles, wires, hosts)


def plan_lines(plan: CapacityPlan, bandwidth: float | None = None, memory: int | None = None) -> list[str]:
    """The plan as lines: each role's memory by item, each trainer's bytes per step on the wire (and
    their time at `bandwidth` bytes/s), and the shard count that fits `memory` bytes per shard pod."""
    lines = []
    for need in plan.roles:
        parts = ", ".join(f"{k} {human(v)}" for k, v in need.items.items() if v)
        lines.append(f"{need.role}: {human(need.total)} ({parts})")
    if plan.hosts > 1 and not plan.wires:
        lines.append("per step across hosts: modelled for GNN node classification only (not this task)")
    for r, w in enumerate(plan.wires):
        line = (
            f"trainer-{r} per step across hosts ({plan.hosts} host(s)): sends {human(w.sent)}, receives "
            f"{human(w.received)}, dense all-reduce {human(w.allreduce)} of each"
            + (f", collective tables' all-to-all {human(w.alltoall)} of each" if w.alltoall else "")
            + f" (mean {w.input_nodes:,.0f} input nodes)"
        )
        if bandwidth:  # a slow link's rate in its own digits, not "0 MB/s"
            mbs = f"{bandwidth / 1e6:,.0f}" if bandwidth >= 1e8 else f"{bandwidth / 1e6:.3g}"
            line += f"; {1000 * max(w.sent, w.received) / bandwidth:.1f} ms at {mbs} MB/s"
        lines.append(line)
    if plan.wires:
        lines.append(f"all hosts per step: {human(plan.bytes_per_step)} on the links")
    if memory:
        fit = shards_that_fit(plan.role("shard-"), memory)
        lines.append(
            f"shard servers that fit {human(memory)} each: {fit}"
            if fit
            else f"no shard count fits {human(memory)} per pod: a shard server's process alone takes "
            f"{human(SHARD_BASE)}"
        )
    return lines


def bandwidth_bytes(text: str) -> float:
    """A link rate in tc's units ('1gbit', '100mbit', '10gbit', '125mbps' bytes) as bytes/s.

    Raises:
        ValueError: naming the text.
    """
    import re

    match = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)\s*([kmg]?)(bit|bps)", text.strip().lower())
    if not match:
        raise ValueError(f"--bandwidth {text!r} is not a rate such as '1gbit' or '100mbit'")
    number, prefix, unit = match.groups()
    value = float(number) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[prefix]
    return value / 8 if unit == "bit" else value


def _array_bytes(x: Any) -> int:
    if x is None:
        return 0
    if hasattr(x, "nnz"):  # a scipy sparse matrix
        return int(x.data.nbytes + x.indices.nbytes + x.indptr.nbytes)
    return int(getattr(x, "nbytes", 0))


def _graph_rows(table: Any, graph: Any) -> int:
    """Rows of spec table `table` over a loaded graph (a table over node types: their nodes, those the
    graph has: an estimate errs low)."""
    keys = str(table.keys)
    if keys == "features":
        return int(graph.feat.shape[1]) if graph.feat is not None else 0
    if keys == "relations":
        return len(graph.relation_names) if graph.relation_names is not None else 0
    types = getattr(table, "node_types", None)
    if types and graph.ntype is not None and graph.ntype_names is not None:
        ids = [i for i, n in enumerate(graph.ntype_names.tolist()) if n in types]
        return int(np.isin(graph.ntype, ids).sum())
    return int(graph.num_nodes)


def shard_estimate(spec: GraphTrainingSpec, graph: Any) -> int:
    """Bytes of the largest shard server of `spec` over `graph`, before any
    partition exists: an even share of the CSR (int64 sources and edge types), the node data and the
    server tables with their state, grown by the partition's maxImbalance, plus the process."""
    shards = spec.num_shards
    edges = int(graph.num_edges) * (2 if spec.graph.reverse_edges else 1)
    data = (int(graph.num_nodes) + shards) * 8 + edges * 16
    data += (
        _array_bytes(graph.feat)
        + _array_bytes(graph.label)
        + sum(_array_bytes(m) for m in graph.masks.values())
    )
    for t in spec.embeddings:
        if t.sharding == Sharding.collective:
            continue
        capacity = getattr(t.vocabulary, "capacity", None)  # a dynamic vocabulary's, whatever the graph
        table, state = _table_bytes(t, int(capacity) if capacity else _graph_rows(t, graph))
        data += table + state
    share = -(-data // shards) * (1 + spec.partition.max_imbalance)
    return SHARD_BASE + int(share)


def limit_problems(spec: GraphTrainingSpec, graph: Any) -> list[Problem]:
    """A shard server whose memory limit cannot hold its share of the data, or a trainer whose limit
    cannot hold its collective shares, as problems naming the field, the need and the limit (the
    estimates err low: a limit below one fails for sure)."""
    trainer = (spec.trainers.resources.limits if spec.trainers.resources else None) or {}
    shares = host_bytes(spec, collective_shares(spec, lambda t: _graph_rows(t, graph)))
    found = memory.limit_problems(
        MemoryNeed(shard_server=0, trainer=shares), {"trainers": trainer.get("memory")}
    )
    limits = (spec.shard_servers.resources.limits if spec.shard_servers.resources else None) or {}
    limit = limits.get("memory")
    if limit is None:
        return found
    need = shard_estimate(spec, graph)
    if need <= quantity_to_bytes(limit):
        return found
    return [
        *found,
        Problem(
            path="spec.shardServers.resources.limits.memory",
            message=f"{limit} cannot hold a shard server's share of {spec.graph.described}: each of its "
            f"{spec.num_shards} shard servers needs about {human(need)} (`graphtrain plan` itemises it); "
            f"raise the limit or add shards (partition.parts)",
        ),
    ]
