"""`graphtrain plan --calibrate`: this build's unit costs on the machine it runs on (runtime/steptime.py).

Small real runs, each timed by wall clock, this process' CPU clock and the shard servers' CPU (their
threads' schedstat, in nanoseconds):
- real shard server processes over the partition (one per part, tcp on 127.0.0.1, port 0, --shm), a
  client over their shared memory and one over TCP: sampling (per sampled edge), features and labels
  (per byte), an embedding table's pull, and its push with the server's SparseAdam step (per byte),
  each also per shard a call touches: batches of two sizes, a line through them (runtime/steptime.py
  prices 4 shards of 256 seeds above 2 of 512); the servers' CPU between the timed calls (answers
  sent, buffers freed) is spread over them;
- the real GraphSAGE's forward, backward and Adam step on sampled blocks (per multiply-add), on one
  thread;
- gloo's all-reduce between this process and a second one on 127.0.0.1 (per byte, per ring step);
- the machine's other load: other sessions (autogroup) with a runnable thread, sampled in /proc for
  2 s and weighed by their nice level (runtime/steptime.py's cpu_share turns it into the share a run's
  processes get; bench/hosts.py samples it through each run).
Costs are the least over rounds (the first round, warm-up, dropped): the round other load disturbed
least. Everything runs on one torch thread, as a trainer beside others does (roles/train.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.contract.spec import GNNModel
from graphtrain.runtime import cpus
from graphtrain.runtime.models import GNNShape
from graphtrain.runtime.partition.format import PartitionConfig
from graphtrain.runtime.steptime import OPS, Costs, UnitCost, touch_counts

EMB_DIM = 128


Round = tuple[float, float, float, float]  # units of work, wall s, CPU s, servers' CPU s


def task_cpu(pid: int) -> float:
    """CPU seconds of every live thread of `pid`, in nanoseconds as the scheduler counts them
    (/proc/<pid>/task/*/schedstat; /proc/<pid>/stat counts 10 ms ticks, more than a small request's
    share)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(stat.read_text().split()[0])
    return total / 1e9


class Clock:
    """Wall, this process' CPU and the servers' CPU seconds of a timed piece of work."""

    def __init__(self, server_pids: Sequence[int] = ()):
        self.servers = list(server_pids)

    def server_cpu(self) -> float:
        return sum(task_cpu(p) for p in self.servers)

    def time(self, work: Callable[[], float]) -> tuple[float, float, float, float]:
        """(units of work done, wall s, CPU s, server CPU s) of one call of `work` (it returns its units)."""
        s0, w0, c0 = self.server_cpu(), time.perf_counter(), time.process_time()
        units = work()
        w1, c1, s1 = time.perf_counter(), time.process_time(), self.server_cpu()
        return units, w1 - w0, c1 - c0, s1 - s0


def _line(big: tuple[float, float], small: tuple[float, float]) -> tuple[float, float]:
    """(fixed, per unit) seconds of the line through two (units, seconds) points, both non-negative: a
    negative fixed part (noise) leaves it all per unit at the larger size's rate, a negative slope
    all fixed."""
    (u1, c1), (u2, c2) = big, small
    if u1 <= 0:
        return 0.0, 0.0
    if u1 == u2:
        return 0.0, max(0.0, c1 / u1)
    slope = (c1 - c2) / (u1 - u2)
    if slope < 0:
        return max(0.0, min(c1, c2)), 0.0
    fixed = c1 - slope * u1
    return (fixed, slope) if fixed >= 0 else (0.0, max(0.0, c1 / u1))


def fit(big: Sequence[Round], small: Sequence[Round], touches: float, server_scale: float = 1.0) -> UnitCost:
    """Per unit and per touched shard, from rounds of one op at a large and a small size (the first
    round of each dropped: warm-up): wall and CPU through each size's least round per unit (the round
    other load disturbed least: on a shared VM even CPU time grows with the load), the servers' CPU
    through each size's mean (times `server_scale`: what they spend between the timed calls); the
    fixed part of a call spread over the `touches` shards it touches."""
    b, s = _kept(big), _kept(small)
    if not b or not s:
        return per_unit(big)

    def least(rounds: list[Round], i: int) -> tuple[float, float]:
        r = min(rounds, key=lambda r: r[i] / r[0])
        return r[0], r[i]

    def mean(rounds: list[Round]) -> tuple[float, float]:
        return statistics.mean(r[0] for r in rounds), statistics.mean(r[3] for r in rounds)

    wall_fixed, wall = _line(least(b, 1), least(s, 1))
    cpu_fixed, cpu = _line(least(b, 2), least(s, 2))
    server_fixed, server = _line(mean(b), mean(s))
    t = max(touches, 1.0)
    k = server_scale
    return UnitCost(wall, cpu, server * k, wall_fixed / t, cpu_fixed / t, server_fixed * k / t)


def _kept(rounds: Sequence[Round]) -> list[Round]:
    return [r for r in (rounds[1:] if len(rounds) > 1 else rounds) if r[0] > 0]


def per_unit(rounds: Sequence[Round]) -> UnitCost:
    """The cost per unit over `rounds` (units, wall, cpu, server cpu), the first dropped when there are
    several (warm-up): the least wall and CPU of a round (the round other load disturbed least: on a
    shared VM even CPU time grows with the load), the servers' CPU over all rounds together."""
    kept = _kept(rounds)
    if not kept:
        return UnitCost(0.0, 0.0, 0.0)

    def least(i: int) -> float:
        return max(0.0, min(r[i] / r[0] for r in kept))

    server = max(0.0, sum(r[3] for r in kept) / sum(r[0] for r in kept))
    return UnitCost(least(1), least(2), server)


def runnable_others(ours: Iterable[int] = ()) -> float:
    """Other load competing for the cores now, in scheduling groups as heavy as one of ours: with
    autogroup (/proc/sys/kernel/sched_autogroup_enabled) the scheduler shares the cores between
    sessions, so each other session with a runnable thread (state R in /proc) counts once, weighed by
    its nice level (1.25^-nice); without it, each runnable thread, weighed by its nice against ours.
    This process and `ours` are left out (our run's processes are each a session of their own)."""
    mine = {os.getpid(), *ours}
    grouped = _autogroup_enabled()
    here = 0 if grouped else os.getpriority(os.PRIO_PROCESS, 0)
    groups: dict[str, float] = {}
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        pid = int(stat.parts[2])
        if pid in mine:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "R":
                continue
            if not grouped:
                total += 1.25 ** (here - int(fields[16]))
                continue
            name, _, nice = (Path("/proc") / str(pid) / "autogroup").read_text().split()
            groups[name] = 1.25 ** -int(nice)
    return sum(groups.values()) if grouped else total


def _autogroup_enabled() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def background(seconds: float = 2.0, every: float = 0.05) -> float:
    """Other load (runnable_others), the mean of samples over `seconds`."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(runnable_others())
        time.sleep(every)
    return statistics.mean(samples) if samples else 0.0


@contextlib.contextmanager
def shard_servers(cfg: PartitionConfig, work: Path) -> Iterator[tuple[list[str], str, list[int]]]:
    """One real shard server per part of `cfg`, on 127.0.0.1 (port 0): (addresses, token, pids)."""
    import secrets

    from graphtrain.contract import roles
    from graphtrain.runtime import kvstore
    from graphtrain.runtime.launch import plan
    from graphtrain.runtime.launch.processes import spawn, stop, wait_ready

    token = secrets.token_hex(24)
    token_file = work / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    where = roles.Files(spec="", partition=str(cfg.path), token=str(token_file), checkpoints=str(work / "ck"))
    children = []
    try:
        for i in range(cfg.num_parts):
            p = plan.shard_server(i, where, work, bind="tcp://127.0.0.1:0")
            children.append(spawn(p, work / "logs", announces=True))
        addresses = [wait_ready(c) for c in children]
        yield addresses, token, [c.proc.pid for c in children]
        with contextlib.suppress(Exception):
            client = kvstore.connect(addresses, token, timeout=5, retries=0)
            client.shutdown()
            client.close()
    finally:
        stop(children, grace=10)


def data_path(
    cfg: PartitionConfig,
    addresses: list[str],
    token: str,
    pids: list[int],
    shm: bool,
    batch: int,
    fanouts: list[int],
    rounds: int,
) -> dict[str, UnitCost]:
    """Sampling, features, pull and push over shared memory (`shm`) or TCP: their UnitCosts, fitted
    through rounds of `batch` seeds and of a quarter of them, alternating (every call touches every
    shard, via shared memory or TCP as `shm` says)."""

    from graphtrain.runtime import kvstore
    from graphtrain.runtime.graph import DistGraph
    from graphtrain.runtime.graph.split import node_split
    from graphtrain.runtime.optim import SparseAdam
    from graphtrain.runtime.tensor import DistEmbedding

    client = kvstore.connect(addresses, token, shm=shm)
    via = "shm" if shm else "tcp"
    try:
        graph = DistGraph(cfg, client)
        emb = DistEmbedding(graph.num_nodes, EMB_DIM, f"calibrate-{via}", client=client)
        opt = SparseAdam([emb], lr=0.001)
        ids = node_split(cfg, "train", 0, 1)
        rng = np.random.default_rng(0)
        clock = Clock(pids)
        sizes = (batch, max(1, batch // 4))
        got: dict[tuple[str, int], list[Round]] = {(op, b): [] for op in OPS for b in sizes}
        start = clock.server_cpu()
        for i in range(rounds):
            for size in sizes:
                seeds = rng.choice(ids, min(size, len(ids)), replace=False)
                for op, round_ in _round(graph, emb, opt, seeds, fanouts, i, clock).items():
                    got[(op, size)].append(round_)
        timed = sum(r[3] for done in got.values() for r in done)
        scale = (clock.server_cpu() - start) / timed if timed > 0 else 1.0
        # every call touches every shard, all of them one way (shm or tcp): the model's own count
        touches = touch_counts(len(fanouts), 1 + int("feat" in graph.ndata), True, cfg.num_parts, 0)
        return {
            f"{op}_{via}": fit(got[(op, sizes[0])], got[(op, sizes[1])], touches[op][0], scale) for op in OPS
        }
    finally:
        client.close()


def _round(
    graph: Any, emb: Any, opt: Any, seeds: np.ndarray, fanouts: list[int], i: int, clock: Clock
) -> dict:
    """One batch's sampling, features and labels, pull and push, each timed by `clock`."""
    import torch

    from graphtrain.runtime.graph import sample_blocks

    box: dict[str, Any] = {}

    def sample() -> float:
        box["mb"] = mb = sample_blocks(graph, seeds, fanouts, seed=i)
        return float(sum(len(b.src) for b in mb.blocks))

    out = {"sample": clock.time(sample)}
    nodes = box["mb"].input_nodes

    def fetch() -> float:
        x = np.asarray(graph.ndata["feat"][nodes]) if "feat" in graph.ndata else np.empty(0)
        y = np.asarray(graph.ndata["label"][seeds])
        return float(x.nbytes + y.nbytes)

    out["fetch"] = clock.time(fetch)

    def pull() -> float:
        box["rows"] = emb(torch.from_numpy(nodes))
        return float(len(nodes) * EMB_DIM * 4)

    out["pull"] = clock.time(pull)

    def push() -> float:
        box["rows"].sum().backward()
        opt.step(wait=True)
        return float(len(nodes) * EMB_DIM * 4)

    out["push"] = clock.time(push)
    return out


def dense(
    cfg: PartitionConfig,
    variant: GNNModel,
    shape: GNNShape,
    batch: int,
    fanouts: list[int],
    rounds: int,
    bfloat16: bool = False,
) -> UnitCost:
    """The spec's GNN's forward, backward and Adam step per multiply-add and per step (its fixed part:
    launching each layer's ops, the optimizer's loop over the parameters) on torch's threads as set,
    over blocks sampled from in-process shards: `batch` seeds and a quarter of them, alternating;
    `bfloat16`: the step as training.mixedPrecision runs it (node classification's: under autocast, or
    as bfloat16 GEMMs on padded blocks, padding.implicit_bf16)."""
    import contextlib

    import torch

    from graphtrain.runtime.graph import DistGraph, sample_blocks
    from graphtrain.runtime.graph.dist_graph import standalone_client
    from graphtrain.runtime.graph.split import node_split
    from graphtrain.runtime.models import gnn_entry
    from graphtrain.runtime.models.padding import bf16_products, implicit_bf16, padded_blocks

    client = standalone_client(cfg.path)
    graph = DistGraph(cfg, client)
    ids = node_split(cfg, "train", 0, 1)
    rng = np.random.default_rng(1)
    entry = gnn_entry(variant.KIND)
    model = entry.build(variant, shape)
    pads = getattr(model, "pads_blocks", False)
    implicit = implicit_bf16(bfloat16, "cpu", pads, True, torch.cpu._is_amx_tile_supported())
    products = bf16_products if implicit else contextlib.nullcontext
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    sizes = [size for _ in range(rounds) for size in (batch, max(1, batch // 4))]
    picks = [rng.choice(ids, min(size, len(ids)), replace=False) for size in sizes]
    batches = [sample_blocks(graph, seeds, fanouts, seed=i) for i, seeds in enumerate(picks)]
    client.close()
    clock, timed = Clock(), []
    for mb in batches:

        def step(mb: Any = mb) -> float:
            x = torch.randn(len(mb.input_nodes), shape.in_dim)
            y = torch.randint(0, shape.out_dim, (len(mb.seeds),))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16 and not implicit), products():
                out = model(padded_blocks(mb.blocks) if implicit else mb.blocks, x)[: len(mb.seeds)]
            loss = torch.nn.functional.cross_entropy(out.float(), y)
            opt.zero_grad()
            with products():
                loss.backward()
            opt.step()
            return entry.macs(variant, shape, [(b.num_dst, len(b.src)) for b in mb.blocks])

        timed.append(clock.time(step))
    return fit(timed[0::2], timed[1::2], touches=1)


def threaded(measure: Callable[[], UnitCost]) -> UnitCost:
    """`measure` (dense() of the spec's model) on a thread per core (a trainer alone on its host runs
    that many): the CPU all threads burn, spinning for each other included."""
    import torch

    torch.set_num_threads(max(1, int(cpus.available_cores())))
    try:
        return measure()
    finally:
        torch.set_num_threads(1)


ALLREDUCE_CHILD = """
import datetime, sys, torch, torch.distributed as d
wait = datetime.timedelta(seconds=60)
store = d.TCPStore("127.0.0.1", int(sys.argv[1]), 2, False, timeout=wait)
d.init_process_group("gloo", store=store, rank=1, world_size=2)
t = torch.zeros(int(sys.argv[2]))
for _ in range(int(sys.argv[3])):
    d.all_reduce(t)
d.destroy_process_group()
"""


def allreduce(rounds: int) -> UnitCost:
    """gloo's all-reduce between this process and a second one: per byte (as sent by each of the two: a
    ring of 2 sends each rank's whole tensor once) and per step of the ring (a ring of 2 has 2), fitted
    through rounds of 1 MiB and of 64 KiB."""
    return fit(allreduce_rounds(1 << 20, rounds), allreduce_rounds(1 << 16, rounds), touches=2)


def allreduce_rounds(nbytes: int, rounds: int) -> list[Round]:
    """`rounds` timed all-reduces of `nbytes` between this process and a second one."""
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=dt.timedelta(seconds=60), wait_for_workers=False)
    n = max(1, nbytes // 4)
    child = subprocess.Popen([sys.executable, "-c", ALLREDUCE_CHILD, str(store.port), str(n), str(rounds)])
    try:
        dist.init_process_group("gloo", store=store, rank=0, world_size=2)
        t = torch.zeros(n)
        clock = Clock()

        def reduce() -> float:
            dist.all_reduce(t)
            return float(n * 4)

        timed = [clock.time(reduce) for _ in range(rounds)]
        dist.destroy_process_group()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    return timed


def calibrate(
    cfg: PartitionConfig,
    variant: GNNModel,
    shape: GNNShape,
    fanouts: list[int],
    batch: int = 512,
    rounds: int = 8,
    say: Callable[[str], None] = lambda _: None,
    mixed_precision: str = "none",
) -> Costs:
    """This build's unit costs, measured on `cfg`'s partition with the GNN `variant` built in `shape`
    (its forward in `mixed_precision`, training.mixedPrecision)."""
    import torch

    say("calibrating: other load on the cores")
    busy = background()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ops = _ops(cfg, variant, shape, fanouts, batch, rounds, say, mixed_precision == "bfloat16")
    finally:
        torch.set_num_threads(threads)
    return Costs(
        ops,
        cpus.available_cores(),
        busy,
        machine=f"{platform.node()}, {os.cpu_count()} cores",
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        mixed_precision=mixed_precision,
    )


def _ops(
    cfg: PartitionConfig,
    variant: GNNModel,
    shape: GNNShape,
    fanouts: list[int],
    batch: int,
    rounds: int,
    say: Callable[[str], None],
    bfloat16: bool = False,
) -> dict[str, UnitCost]:
    ops: dict[str, UnitCost] = {}
    with (
        tempfile.TemporaryDirectory(prefix="graphtrain-calibrate-") as tmp,
        shard_servers(cfg, Path(tmp)) as (
            addresses,
            token,
            pids,
        ),
    ):
        for shm in (True, False):
            say(f"calibrating: sampling, features, pull and push over {'shared memory' if shm else 'tcp'}")
            ops.update(data_path(cfg, addresses, token, pids, shm, batch, fanouts, 2 * rounds))
    say("calibrating: the dense model")
    # rounds of tens of milliseconds: the least of 8 still moved by 25 % from one calibration to the next
    # (a timer, the poller of a benchmark), the least of 32 by 3 %
    measure = partial(dense, cfg, variant, shape, batch, fanouts, 4 * rounds, bfloat16)
    ops["dense"] = measure()
    ops["dense_threaded"] = threaded(measure)
    say("calibrating: all-reduce")
    ops["allreduce"] = allreduce(2 * rounds)
    return ops
