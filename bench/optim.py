"""Sparse-optimizer benchmark: the native core against the baselines, side by side in one run.

Table N x D float32 (default 5,000,000 rows), batches of B = 100,000 ids, uniform or Zipf(1.1) over
randomly permuted ranks, D = 32 and 128. For each optimizer it measures unique rows updated per second
and the bytes the update must move per second (ids, gradients, the touched rows and their state read
and written), and next to it, in the same process:
- "dgl torch-ops": DGL 2.1's sparse Adagrad algorithm written with torch ops (torch.unique,
  index_add_, mean rule, gather state, update, scatter back), row-wise as DGL's distributed
  SparseAdagrad and element-wise as dgl.optim.SparseAdagrad;
- "torch.optim": nn.Embedding(sparse=True)'s weight with a sparse gradient, then Adagrad / SparseAdam
  / SGD .step() (the optimizer only: the gradient is built directly, no forward or backward);
- "reference": our torch backend;
- a STREAM-like triad (a = b + s*c on 3 x 200 MB, counted as 3 x bytes), the memory-bandwidth
  roofline: "% roofline" is the optimizer's bytes/s over the triad's.
Threads: --threads (default 2) for every contender, torch included.

- "floor": what any deduplicating step must do, whatever its math: a sort of the ids over the bits
  their rows need (int32 ids where the table has fewer than 2**31 rows) and a scatter of the same ids
  into a narrow table (one byte a row), measured in the same call (issue 45, item 1).

--device cuda (scripts/gpu-check runs it on a GPU machine): the CUDA core beside the CPU core, the torch
reference on the GPU and torch.optim on the GPU, each timed to the end of its device work; the roofline
is then a triad on the GPU. Each GPU contender also gets its device time (CUDA events around the step:
what the device spent, without the host's launches and waits), and the CUDA core its issue 45 bar
(item 7): 50 us + bytes / (0.75 x the triad's bandwidth) of device time. The CUDA core runs twice: as
a training step calls it (it waits once for its verdict) and deferred, as a captured step's
(training.cudaGraph: the verdict left on the device, no wait), whose host time per call is item 7's
"at most 15 us of Python per step" (a replayed graph has none).

    python bench/optim.py [--rows 5000000] [--batch 100000] [--dims 32 128] [--steps 8] [--device cpu]
                          [--no-host] [--triad-elements 50000000]
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from graphtrain.runtime.native.memory import empty
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step

KINDS = ("rowwise_adagrad", "adagrad", "adam", "sgd")


def batches(num_rows: int, batch: int, dim: int, dist: str, count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        ids = [rng.integers(0, num_rows, batch) for _ in range(count)]
    else:  # Zipf(1.1) over ranks, ranks mapped to random rows so hot rows are spread over the table
        p = 1.0 / np.arange(1, num_rows + 1, dtype=np.float64) ** 1.1
        cdf = np.cumsum(p / p.sum())
        perm = rng.permutation(num_rows)
        ids = [perm[np.minimum(np.searchsorted(cdf, rng.random(batch)), num_rows - 1)] for _ in range(count)]
    g = torch.Generator().manual_seed(seed)
    return [(torch.from_numpy(i.astype(np.int64)), torch.randn(batch, dim, generator=g)) for i in ids]


def bytes_moved(kind: str, unique: int, batch: int, dim: int) -> int:
    """Bytes an update must touch: ids and gradients read, rows and state read and written."""
    row = dim * 4
    state = {"sgd": 0, "rowwise_adagrad": 2 * 4, "adagrad": 2 * row, "adam": 4 * row + 2 * 8}[kind]
    return batch * (8 + row) + unique * (2 * row + state)


def timed(
    fn: Callable[[torch.Tensor, torch.Tensor], None], data, warmup: int = 2
) -> tuple[float, float | None, float]:
    """The median step's wall time, on a GPU its device time (CUDA events recorded around it on the
    current stream: the kernels' span, not the host's launches and waits before the first one), and the
    host's time in the call (to its return: for a step that does not wait, its launches)."""
    gpu = data[0][0].is_cuda
    for ids, grads in data[:warmup]:
        fn(ids, grads)
    times, device, calls = [], [], []
    for ids, grads in data[warmup:]:
        if gpu:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t = time.perf_counter()
        fn(ids, grads)
        calls.append(time.perf_counter() - t)
        if gpu:  # the step's device work, not only its launches
            end.record()
            torch.cuda.synchronize()
            device.append(start.elapsed_time(end) / 1e3)
        times.append(time.perf_counter() - t)
    return statistics.median(times), (statistics.median(device) if device else None), statistics.median(calls)


class DedupFloor:
    """The floor of a deduplicating step: sort the ids over the bits their rows need, and scatter the same
    ids into a table of one byte a row (the narrowest write of every touched row)."""

    def __init__(self, num_rows: int):
        self.num_rows = num_rows
        self.narrow: dict[torch.device, torch.Tensor] = {}

    def __call__(self, ids: torch.Tensor, grads: torch.Tensor) -> None:
        if ids.device not in self.narrow:
            self.narrow[ids.device] = torch.zeros(self.num_rows, dtype=torch.uint8, device=ids.device)
        keys = ids.to(torch.int32) if self.num_rows < 2**31 else ids
        torch.sort(keys)
        self.narrow[ids.device].index_fill_(0, ids, 1)


def bandwidth(name: str, gbps: float, triad: float, digits: int) -> str:
    """The GB/s and % roofline cells: the optimizer's bytes over its time (none for the floor, which
    moves other bytes)."""
    return " | " if name.startswith("floor") else f"{gbps:.{digits}f} | {100 * gbps / triad:.0f} %"


def item7_bar(nbytes: int, gbps: float) -> float:
    """Issue 45's bar on the CUDA core's device time per step (item 7), in seconds."""
    return 50e-6 + nbytes / (0.75 * gbps * 1e9)


def gpu_triad_gbps(n: int = 100_000_000) -> float:
    a = torch.empty(n, device="cuda")
    b, c = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    best = np.inf
    for _ in range(10):
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    del a, b, c
    torch.cuda.empty_cache()
    return 3 * n * 4 / best / 1e9


def triad_gbps(threads: int, n: int = 50_000_000) -> float:
    torch.set_num_threads(threads)
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        best = min(best, time.perf_counter() - t)
    return 3 * n * 4 / best / 1e9


def dgl_rowwise(table: torch.Tensor, state: torch.Tensor, lr: float, eps: float):
    def step(ids: torch.Tensor, grads: torch.Tensor) -> None:
        uniq, inverse, cnt = torch.unique(ids, return_inverse=True, return_counts=True)
        values = torch.zeros((len(uniq), grads.shape[1])).index_add_(0, inverse, grads) / cnt.unsqueeze(1)
        grad_sum = (values * values).mean(1, keepdim=True)
        new = state[uniq] + grad_sum
        state[uniq] = new
        table[uniq] -= lr * values / (new.sqrt() + eps)

    return step


def dgl_elementwise(table: torch.Tensor, state: torch.Tensor, lr: float, eps: float):
    def step(ids: torch.Tensor, grads: torch.Tensor) -> None:
        uniq, inverse, cnt = torch.unique(ids, return_inverse=True, return_counts=True)
        values = torch.zeros((len(uniq), grads.shape[1])).index_add_(0, inverse, grads) / cnt.unsqueeze(1)
        new = state[uniq] + values * values
        state[uniq] = new
        table[uniq] -= lr * values / (new.sqrt() + eps)

    return step


def torch_optim(table: torch.Tensor, kind: str):
    param = torch.nn.Parameter(table, requires_grad=True)
    opt = {
        "adagrad": lambda: torch.optim.Adagrad([param], lr=0.01),
        "adam": lambda: torch.optim.SparseAdam([param], lr=0.01),
        "sgd": lambda: torch.optim.SGD([param], lr=0.01),
    }[kind]()

    def step(ids: torch.Tensor, grads: torch.Tensor) -> None:
        param.grad = torch.sparse_coo_tensor(ids.unsqueeze(0), grads, table.shape)
        opt.step()

    return step


def ours(config: OptimConfig, table: torch.Tensor, state: dict[str, torch.Tensor], backend: str):
    def step(ids: torch.Tensor, grads: torch.Tensor) -> None:
        sparse_step(config, table, state, ids, grads, backend=backend)

    return step


def deferred(config: OptimConfig, table: torch.Tensor, state: dict[str, torch.Tensor]):
    """The CUDA core as a captured step calls it: its verdict left in three int64 on the device, its
    workspace its own (runtime/optim/late.py), no wait."""
    from graphtrain.runtime.native import cuda

    flags = torch.full((3,), -1, dtype=torch.int64, device=table.device)
    workspaces: dict[int, torch.Tensor] = {}

    def step(ids: torch.Tensor, grads: torch.Tensor) -> None:
        if len(ids) not in workspaces:
            workspaces[len(ids)] = cuda.step_workspace(table, len(ids))
        sparse_step(
            config, table, state, ids, grads, backend="cuda", flags=flags, workspace=workspaces[len(ids)]
        )

    return step


def gpu_contenders(config: OptimConfig, kind: str, table: torch.Tensor, data, host: bool = True):
    """The CUDA core, the reference and torch.optim on a copy of the table on the GPU, and (host) the CPU
    core on the table, each with its own data (moved to the GPU once, outside the timing)."""
    gpu_table = table.cuda()
    gpu_state = make_state(config, table.shape[0], table.shape[1], "cuda")
    gpu_data = [(i.cuda(), g.cuda()) for i, g in data]
    out = [("graphtrain cuda core", ours(config, gpu_table, gpu_state, "cuda"), gpu_data)]
    out.append(("graphtrain cuda core, deferred", deferred(config, gpu_table, gpu_state), gpu_data))
    out.append(("floor: sort + scatter on the GPU", DedupFloor(table.shape[0]), gpu_data))
    if host:
        out.append(
            ("graphtrain cpu core", ours(config, table, make_state(config, *table.shape), "cpu"), data)
        )
    out.append(
        ("graphtrain torch reference on the GPU", ours(config, gpu_table, gpu_state, "torch"), gpu_data)
    )
    if kind in ("adagrad", "adam", "sgd"):
        out.append((f"torch.optim {kind} on the GPU", torch_optim(gpu_table, kind), gpu_data))
    return out


def run(
    num_rows: int,
    batch: int,
    dim: int,
    dist: str,
    steps: int,
    threads: int,
    triad: float,
    device: str = "cpu",
    host: bool = True,
) -> list[str]:
    torch.set_num_threads(threads)
    data = batches(num_rows, batch, dim, dist, steps + 2)
    unique = int(np.mean([len(torch.unique(i)) for i, _ in data]))
    table = empty((num_rows, dim)).uniform_(-1, 1)  # huge pages, advised before the first write
    lines = []
    for kind in KINDS:
        config = OptimConfig(kind, 0.01, eps=1e-8, duplicate="mean" if kind == "rowwise_adagrad" else "sum")
        if device == "cuda":
            timings = [(n, *timed(fn, d)) for n, fn, d in gpu_contenders(config, kind, table, data, host)]
            torch.cuda.empty_cache()
            base = {n: s for n, s, _, _ in timings}
            on_device = {n: d for n, _, d, _ in timings}
            nbytes = bytes_moved(kind, unique, batch, dim)
            for name, seconds, device_s, call in timings:
                gbps = nbytes / seconds / 1e9
                rate = unique / seconds / 1e6
                ratios = [
                    f"{base[other] / seconds:.1f}x {other.split(' ')[0]}"
                    for other in (f"torch.optim {kind} on the GPU", "graphtrain torch reference on the GPU")
                    if other in base and name == "graphtrain cuda core"
                ]
                if name == "graphtrain cuda core" and device_s is not None:
                    bar = item7_bar(nbytes, triad)
                    ratios.append(f"device {1e3 * bar:.2f} ms bar: {'met' if device_s <= bar else 'not met'}")
                    floor = on_device["floor: sort + scatter on the GPU"]
                    if floor:
                        ratios.append(f"{device_s / floor:.1f}x the floor's device time")
                if name == "graphtrain cuda core, deferred":
                    bar = "met" if call <= 15e-6 else "not met"
                    ratios.append(f"host {1e6 * call:.0f} us a call, no wait (15 us bar: {bar})")
                device_ms = "" if device_s is None else f"{1e3 * device_s:.2f}"
                lines.append(
                    f"| {dist} | {dim} | {kind} | {name} | {1e3 * seconds:.2f} | {device_ms} | {rate:.2f} | "
                    f"{bandwidth(name, gbps, triad, 1)} | {', '.join(ratios)} |"
                )
            continue
        state = make_state(config, num_rows, dim)  # on huge pages when large
        contenders = [
            ("graphtrain cpu core", ours(config, table, state, "cpu")),
            ("graphtrain torch reference", ours(config, table, state, "torch")),
            ("floor: sort + scatter", DedupFloor(num_rows)),
        ]
        if kind == "rowwise_adagrad":
            contenders.append(
                (
                    "DGL algorithm, torch ops (row-wise)",
                    dgl_rowwise(table, torch.zeros(num_rows, 1), 0.01, 1e-8),
                )
            )
        if kind == "adagrad":
            contenders.append(
                (
                    "DGL algorithm, torch ops (element-wise)",
                    dgl_elementwise(table, torch.zeros(num_rows, dim), 0.01, 1e-8),
                )
            )
        if kind in ("adagrad", "adam", "sgd"):
            contenders.append((f"torch.optim {kind} on nn.Embedding(sparse=True)", torch_optim(table, kind)))
        results = []
        for name, fn in contenders:
            seconds, _, _ = timed(fn, data)
            results.append((name, seconds))
            gc.collect()
        base = {n: s for n, s in results}
        for name, seconds in results:
            gbps = bytes_moved(kind, unique, batch, dim) / seconds / 1e9
            ratios = []
            for other in (
                "DGL algorithm, torch ops (row-wise)",
                "DGL algorithm, torch ops (element-wise)",
                f"torch.optim {kind} on nn.Embedding(sparse=True)",
            ):
                if other in base and name == "graphtrain cpu core":
                    ratios.append(f"{base[other] / seconds:.1f}x {other.split(' ')[0]}")
            if name == "graphtrain cpu core":
                ratios.append(f"{seconds / base['floor: sort + scatter']:.1f}x the floor")
            lines.append(
                f"| {dist} | {dim} | {kind} | {name} | {1e3 * seconds:.1f} | | {unique / seconds / 1e6:.2f} "
                f"| {bandwidth(name, gbps, triad, 2)} | {', '.join(ratios)} |"
            )
        del state
        gc.collect()
    return lines


def main() -> None:
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--dims", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--dists", nargs="+", default=["uniform", "zipf"])
    ap.add_argument(
        "--steps", type=int, default=8, help="timed steps (median reported), after 2 warm-up steps"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: the GPU contenders")
    ap.add_argument(
        "--no-host", action="store_true", help="with --device cuda: leave the CPU core out (large tables)"
    )
    ap.add_argument(
        "--triad-elements",
        type=int,
        default=None,
        help="the triad's arrays (default 50M on the CPU, 100M on a GPU)",
    )
    args = ap.parse_args()
    if args.device == "cpu":
        triad = triad_gbps(args.threads, args.triad_elements or 50_000_000)
    else:
        triad = gpu_triad_gbps(args.triad_elements or 100_000_000)
    where = f"{args.threads} threads" if args.device == "cpu" else f"GPU {torch.cuda.get_device_name()}"
    print(
        f"# bench/optim.py, {time.strftime('%Y-%m-%d')}, {platform.node()}, {platform.machine()}, "
        f"torch {torch.__version__}, {where}, N={args.rows:,}, B={args.batch:,}"
    )
    print(f"STREAM-like triad ({args.device}): {triad:.1f} GB/s\n")
    print(
        "| ids | D | optimizer | implementation | ms/step | device ms/step | M unique rows/s | GB/s "
        "| % roofline | speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dim in args.dims:
        for dist in args.dists:
            for line in run(
                args.rows,
                args.batch,
                dim,
                dist,
                args.steps,
                args.threads,
                triad,
                args.device,
                not args.no_host,
            ):
                print(line, flush=True)


if __name__ == "__main__":
    main()
