"""A trainer step's time predicted from this build's measured unit costs (issue 33; pure, no I/O).

The data path of a GraphSAGE step, as runtime/train/node_classification.py runs it:
- the next batch is sampled and its features and labels gathered: by the loader thread while the main
  thread steps (training.prefetch above 0: sampling overlaps the rest of the step), or inline on the
  main thread (prefetch 0, the default: it adds to the step);
- the main thread pulls the input nodes' embedding rows (waiting for the previous push to be applied),
  runs forward and backward (DDP's all-reduce inside), hands the gradients to the shard servers (push,
  applied there while it goes on) and steps the dense optimizer.
Every op of a step has a unit cost (runtime/calibrate.py measures them on the machine it runs on): the
caller's wall seconds, its CPU seconds and the shard servers' CPU seconds per unit (sampled edge,
byte, multiply-add), each over shared memory (a shard on the trainer's host) and over TCP, plus a fixed
cost for each shard a call touches (a request and its answer: 4 shards of 256 seeds cost more than 2 of
512) and for each step of the all-reduce's ring.

Contention: a trainer waits for the slowest one at every all-reduce, and every process shares the
cores the machine gives them. So a step takes the longest of (a roofline: each a floor the step cannot
go below)
- the slowest trainer's own path: max(loader thread, main thread), or their sum when sampling is
  inline, each its CPU (and the servers' it waits for) at the rate a thread gets beside other load,
  the main thread's remote bytes added at the link's rate (a pull waits for its rows: the wire is
  additive there);
- the CPU all processes need in one step (every trainer's, every shard server's) over the CPU share
  they get (cpu_share: the scheduler shares C cores evenly among runnable groups, ours and the B busy
  ones of other load the calibration measured), plus the all-reduce's transfer across hosts (a barrier:
  nobody computes while it crosses the links). 8 processes in lock step on 2 cores (bench/hosts.py, 4
  hosts) are CPU-bound here, not path-bound: each trainer's path is stretched only while others run;
- a host link: the hosts' bytes per step spread evenly over their links, at the bandwidth (an uneven
  layout's busiest link carries more: 3 shards on 2 hosts, 1.25x the mean; not counted per host).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from graphtrain.contract.spec.enums import MixedPrecision

OPS = ("sample", "fetch", "pull", "push")  # each over "shm" and "tcp", per sampled edge or per byte
MAIN = ("pull", "push", "forward_backward", "allreduce")  # a step's main thread (the loader samples)
ALL_OPS = tuple(f"{op}_{via}" for op in OPS for via in ("shm", "tcp")) + (
    "dense",
    "dense_threaded",
    "allreduce",
)


@dataclass(frozen=True)
class UnitCost:
    """Seconds per unit: the caller's wall time and CPU time, and the shard servers' CPU time; and the
    fixed seconds of each shard a call touches (`*_touch`: a request and its answer over TCP, a view of
    shared memory), which small requests to many shards pay more often per byte."""

    wall: float
    cpu: float
    server_cpu: float = 0.0
    wall_touch: float = 0.0
    cpu_touch: float = 0.0
    server_touch: float = 0.0


@dataclass(frozen=True)
class Costs:
    """What calibration measured: a UnitCost per op (ALL_OPS; dense per multiply-add of forward,
    backward and the Adam step, and per step in its `*_touch` fields, on one thread, dense_threaded on
    a thread per core, its CPU all its threads', spinning included), the machine's cores and the busy
    groups of other load competing for them, and where and when."""

    ops: dict[str, UnitCost]
    cores: float
    background: float
    machine: str = ""
    measured_at: str = ""
    mixed_precision: str = "none"  # training.mixedPrecision the dense model was timed in (older files: none)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def costs_from_dict(doc: Any) -> Costs:
    """A costs file's content as Costs.

    Raises:
        ValueError: one line naming the field that is missing or not a non-negative number.
    """
    if not isinstance(doc, Mapping):
        raise ValueError("the costs file is not a JSON object")
    ops = doc.get("ops")
    if not isinstance(ops, Mapping):
        raise ValueError("field 'ops' is missing or not an object")
    parsed = {}
    for name in ALL_OPS:
        unit = ops.get(name)
        if not isinstance(unit, Mapping):
            raise ValueError(f"field 'ops.{name}' is missing or not an object")
        values = {
            k: _number(unit.get(k, None if k in ("wall", "cpu") else 0.0), f"ops.{name}.{k}")
            for k in ("wall", "cpu", "server_cpu", "wall_touch", "cpu_touch", "server_touch")
        }
        parsed[name] = UnitCost(**values)
    cores = _number(doc.get("cores"), "cores")
    if cores <= 0:
        raise ValueError("field 'cores' must be above 0")
    busy = _number(doc.get("background"), "background")
    mixed = doc.get("mixed_precision", "none")
    if mixed not in PRECISIONS:
        raise ValueError(f"field 'mixed_precision' must be one of {', '.join(PRECISIONS)}, got {mixed!r}")
    return Costs(parsed, cores, busy, str(doc.get("machine", "")), str(doc.get("measured_at", "")), mixed)


PRECISIONS = tuple(m.value for m in MixedPrecision)  # training.mixedPrecision's values


def _number(value: Any, name: str) -> float:
    # JSON's Infinity reads as a float: infinite cores or costs predict an empty or endless step
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"field {name!r} must be a finite non-negative number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Load:
    """One trainer's work in one step (capacity.replay measures it on sampled batches): sampled edges,
    feature bytes gathered, embedding bytes pulled (and as many pushed), the fraction of them on other
    hosts' shards, multiply-adds of the dense model, all-reduce bytes, its bytes across hosts, and its
    torch threads."""

    edges: float
    feature_bytes: float
    row_bytes: float
    remote: float
    macs: float
    allreduce_bytes: float
    wire_bytes: float  # both ways, all-reduce counted once (what it adds to the hosts' links)
    path_bytes: float  # the larger way, all-reduce included (what its own step waits for)
    threads: int = 1  # torch's intra-op threads (above 1: the dense op's dense_threaded cost)
    inline: bool = False  # sampling on the main thread (training.prefetch 0), not beside it
    touches: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # op: shards a step
    # touches (via shared memory, via TCP), each call counted (`touch_counts`)
    ring_steps: int = 0  # the all-reduce's sequential steps (a ring of W ranks: 2 (W - 1))


@dataclass
class StepTime:
    """A step's predicted seconds, the bound that set it, and each part behind it (seconds)."""

    seconds: float
    bound: str
    parts: dict[str, float] = field(default_factory=dict)


def touch_counts(
    layers: int,
    fetches: int,
    embedding: bool,
    local_shards: int,
    remote_shards: int,
    together: bool = False,
) -> dict[str, tuple[float, float]]:
    """The shards a trainer's step touches per op, (via shared memory, via TCP): every call touches
    every shard (a batch's nodes are spread over all of them); sampling calls once a layer, features
    and labels once a table (`fetches`), the node embedding's pull and push once each. `together`: the
    features, labels and embedding rows in one call (node classification's fetch with inline batches)."""
    calls = {"sample": layers, "fetch": fetches, "pull": int(embedding), "push": int(embedding)}
    if together:
        calls.update(fetch=1, pull=0)
    return {op: (float(n * local_shards), float(n * remote_shards)) for op, n in calls.items()}


def _split(
    costs: Costs, op: str, units: float, remote: float, touches: tuple[float, float] = (0.0, 0.0)
) -> UnitCost:
    """`units` of `op`, the `remote` fraction over TCP and the rest over shared memory, and the fixed
    cost of the shards it touches each way."""
    shm, tcp = costs.ops[f"{op}_shm"], costs.ops[f"{op}_tcp"]
    local = units * (1 - remote)
    far = units * remote
    near, away = touches
    return UnitCost(
        shm.wall * local + tcp.wall * far + shm.wall_touch * near + tcp.wall_touch * away,
        shm.cpu * local + tcp.cpu * far + shm.cpu_touch * near + tcp.cpu_touch * away,
        shm.server_cpu * local + tcp.server_cpu * far + shm.server_touch * near + tcp.server_touch * away,
    )


def _dense(costs: Costs, load: Load, own_cores: bool) -> UnitCost:
    """The dense op's cost per multiply-add: dense_threaded for a trainer of several intra-op threads.
    On hosts of their own cores (`own_cores`) nothing else runs beside those threads, so they take no
    more wall than one thread would: the calibration machine measured them sharing its cores with other
    load, where they spin (one thread's cost is then the better bound; a CI run predicted a 64-core host
    slower than 2 shared cores without it)."""
    single = costs.ops["dense"]
    if load.threads <= 1:
        return single
    threaded = costs.ops["dense_threaded"]
    if (
        own_cores
        and single.wall * load.macs + single.wall_touch < threaded.wall * load.macs + threaded.wall_touch
    ):
        return single
    return threaded


def trainer_parts(costs: Costs, load: Load, own_cores: bool = False) -> dict[str, UnitCost]:
    """One trainer's ops in one step, each as seconds of wall, CPU and shard-server CPU (`own_cores`:
    on hosts of their own cores, see _dense)."""
    dense = _dense(costs, load, own_cores)
    ar = costs.ops["allreduce"]
    t = load.touches
    steps = load.ring_steps
    return {
        "sample": _split(costs, "sample", load.edges, load.remote, t.get("sample", (0.0, 0.0))),
        "fetch": _split(costs, "fetch", load.feature_bytes, load.remote, t.get("fetch", (0.0, 0.0))),
        "pull": _split(costs, "pull", load.row_bytes, load.remote, t.get("pull", (0.0, 0.0))),
        "push": _split(costs, "push", load.row_bytes, load.remote, t.get("push", (0.0, 0.0))),
        "forward_backward": UnitCost(
            dense.wall * load.macs + dense.wall_touch, dense.cpu * load.macs + dense.cpu_touch
        ),
        "allreduce": UnitCost(
            ar.wall * load.allreduce_bytes + ar.wall_touch * steps,
            ar.cpu * load.allreduce_bytes + ar.cpu_touch * steps,
        ),
    }


def cpu_share(cores: float, background: float, busy: float) -> float:
    """CPU seconds per wall second that `busy` scheduling groups of ours get from `cores` cores shared
    with `background` busy groups of other load: an even share each."""
    if busy <= 0:
        return cores
    return min(cores, cores * busy / (busy + background))


def predict(
    costs: Costs,
    loads: Sequence[Load],
    hosts: int,
    bandwidth: float | None = None,
    host_cores: float | None = None,
) -> StepTime:
    """The step time of `loads` (one per trainer) spread over `hosts` hosts with links of `bandwidth`
    bytes/s each way (None: not a bound), by the three bounds of the module's docstring. `host_cores`:
    each host's own cores (hosts of that size, no other load on them); None: the calibration machine's
    cores and other load, shared by every host (bench/hosts.py's simulated hosts).

    The scheduler shares the cores between groups (autogroup: a session each; every trainer and shard
    server is one). A trainer's path is its own CPU (main thread, and the loader's when sampling is
    inline; else the longer of the two), the servers' CPU its main thread waits for, and its remote bytes
    at the link's rate; its threads run at the rate one group gets beside the other load. Contention
    between our own processes is the CPU bound's: when they need more CPU than their share of the
    cores, the step is that CPU over the share (a process that waits for another is not runnable, so
    the cores stay busy), plus the all-reduce's transfer across hosts, when every trainer waits and no
    server has a request: nobody computes then. The groups' share beside other load counts each
    trainer as one group and the shard servers in units of a trainer's CPU. A trainer with several
    intra-op threads costs the CPU all its threads burn (dense_threaded: on a loaded machine they spin
    waiting for each other, bench/RESULTS.md)."""
    if not loads:
        return StepTime(0.0, "none")
    each = [trainer_parts(costs, load, host_cores is not None) for load in loads]
    main = [sum(p[k].cpu for k in MAIN) for p in each]
    loader = [p["sample"].cpu + p["fetch"].cpu for p in each]
    waits = [sum(p[k].server_cpu for k in MAIN) for p in each]
    server = sum(sum(x.server_cpu for x in p.values()) for p in each)
    own = sum(a + b for a, b in zip(main, loader, strict=True))
    busy = len(loads) + (server / (own / len(loads)) if own > 0 else 0.0)
    cores, background = (costs.cores, costs.background) if host_cores is None else (host_cores * hosts, 0.0)
    share = cpu_share(cores, background, busy)
    one = min(1.0, (host_cores or cores) / (1.0 + background))  # a runnable thread beside other load
    paths = [
        ((a + b) if load.inline else max(a, b)) / one + w / one
        for a, b, w, load in zip(main, loader, waits, loads, strict=True)
    ]
    wire = [load.path_bytes / bandwidth if bandwidth else 0.0 for load in loads]
    link = sum(load.wire_bytes for load in loads) / hosts / bandwidth if bandwidth else 0.0
    barrier = max(load.allreduce_bytes for load in loads) / bandwidth if bandwidth and hosts > 1 else 0.0
    bounds = {
        "trainer path": max(p + w for p, w in zip(paths, wire, strict=True)),
        "cpu": (own + server) / share + barrier,
        "link": link,
    }
    bound = max(bounds, key=lambda k: bounds[k])
    stages = {k: sum(p[k].wall for p in each) / len(each) for k in each[0]}
    extra = {f"bound {k}": v for k, v in bounds.items()}
    shares = {"cpu share": share, "busy processes": busy, "cpu total": own + server, "barrier": barrier}
    shares |= {"cpu trainers": own, "cpu servers": server}
    return StepTime(bounds[bound], bound, {**stages, **extra, **shares})
