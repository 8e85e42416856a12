"""Half-precision tables in the CPU core: the optimizer step's speed per row on float32, float16 and
bfloat16 tables, side by side in one run (issue 47, item 3: "the optimizer's CPU speed per row at least
float32's"), and the table's bytes.

Each optimizer steps a table of --rows x --dim with batches of --batch uniform random ids (the same
batches for every table type), --steps timed steps after a warm-up; a half table is read into float32,
updated by the same math and written back with stochastic rounding (cuda/include/graphtrain/optim_math.h).
Each round steps the three types in turn (--rounds of them, so a slow spell of a shared host falls on
all three). Reported: the median over rounds of the median ms per step and of the unique rows per
second, and the median of each round's rows/s over float32's in the same round.

    python bench/half.py [--rows 5000000] [--batch 100000] [--dim 128] [--steps 8] [--threads 2] [--rounds 3]
                         [--huge-pages]

--huge-pages puts every table and its state on 2 MB pages, as the shard servers hold theirs
(runtime/native/memory.empty); without it, on torch's 4 KB pages, as in the figures before 2026-12-04.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from graphtrain.runtime.native.optim import optim_args, sparse_step

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
KINDS = ("sgd", "rowwise_adagrad", "adagrad", "adam")


def state(kind: str, rows: int, dim: int) -> dict[str, torch.Tensor]:
    if kind == "adagrad":
        return {"sum": torch.zeros(rows, dim)}
    if kind == "rowwise_adagrad":
        return {"sum": torch.zeros(rows)}
    if kind == "adam":
        return {
            "exp_avg": torch.zeros(rows, dim),
            "exp_avg_sq": torch.zeros(rows, dim),
            "step": torch.zeros(rows, dtype=torch.int64),
        }
    return {}


def on_huge_pages(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` in memory advised to 2 MB pages before its first write."""
    from graphtrain.runtime.native.memory import empty

    return empty(tuple(t.shape), t.dtype).copy_(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="each type's steps this many times, in turn")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument(
        "--huge-pages", action="store_true", help="tables and state on 2 MB pages, as servers hold them"
    )
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, a.rows, (a.batch,), generator=gen), torch.randn(a.batch, a.dim, generator=gen))
        for _ in range(a.steps + 2)
    ]
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, {a.threads} threads, "
        f"{a.rows:,} x {a.dim}, batches of {a.batch:,} uniform ids, {a.steps} timed steps x {a.rounds} "
        f"rounds, {'2 MB' if a.huge_pages else '4 KB'} pages"
    )
    print("| optimizer | table | table MB | ms per step (median) | unique rows/s | vs float32 |")
    print("|---|---|---|---|---|---|")
    init = torch.randn(a.rows, a.dim, generator=gen) * 0.1
    for kind in a.kinds:
        ms: dict[torch.dtype, list[float]] = {d: [] for d in DTYPES}
        rate: dict[torch.dtype, list[float]] = {d: [] for d in DTYPES}
        for _ in range(a.rounds):  # the types in turn, so that a slow spell of the host hits each of them
            for dtype in DTYPES:
                step_ms, unique = run(kind, init, dtype, batches, a)
                ms[dtype].append(step_ms)
                rate[dtype].append(unique / (step_ms / 1e3))
        for dtype in DTYPES:
            ratio = statistics.median(r / b for r, b in zip(rate[dtype], rate[torch.float32], strict=True))
            mb = init.numel() * torch.tensor([], dtype=dtype).element_size() / 2**20
            name = str(dtype).removeprefix("torch.")
            print(
                f"| {kind} | {name} | {mb:,.0f} | {statistics.median(ms[dtype]):.2f} "
                f"| {statistics.median(rate[dtype]):,.0f} | {ratio:.2f}x |"
            )


def run(
    kind: str, init: torch.Tensor, dtype: torch.dtype, batches: list, a: argparse.Namespace
) -> tuple[float, int]:
    """Median ms per step of `kind` on a table of `dtype` made from `init`, and the unique rows per step."""
    table = init.to(dtype, copy=True)  # float32 too: every round and type starts from the same rows
    st = state(kind, a.rows, a.dim)
    if a.huge_pages:
        table = on_huge_pages(table)
        st = {k: on_huge_pages(v) for k, v in st.items()}
    args = optim_args(kind, 0.01, 1e-10, 0.9, 0.999, 0.0, mean=False, global_step=False)
    times, unique = [], 0
    for i, (ids, grads) in enumerate(batches):
        start = time.perf_counter()
        unique = sparse_step(args, table, st, ids, grads, a.threads, round_seed=i)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, unique


if __name__ == "__main__":
    main()
