"""Partition benchmark: graphtrain's METIS pipeline vs random vs a bare pymetis call, in one run.

For gene-pubmed (made undirected: every edge stored both ways, as a GNN on it needs) and wordnet, at
2, 4 and 8 parts, it measures side by side:
- bare pymetis: `pymetis.part_graph(k, CSRAdjacency(...))` on the symmetric CSR built beforehand
  (its build is not timed), balanced by node count only, the call DGL and the research note use;
- graphtrain metis with `--balance nodes` and with the default constraints (nodes, degree and, where
  the graph has them, train/val/test), timed from the in-memory graph to relabeled ids and statistics;
- graphtrain random.
It prints cut (fraction of undirected edges), balance (max/mean) of nodes, stored edges and every
constraint, seconds, and the ratios the issue names: cut vs random/3, cut vs bare, time vs bare.
Then it measures peak RSS of a partition in a child process against the memory estimate.

    python bench/partition.py [--datasets gene-pubmed wordnet] [--parts 2 4 8] [--repeat 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import threading
import time

import numpy as np
import psutil
import pymetis
import scipy.sparse as sp

from graphtrain.runtime import partition
from graphtrain.runtime.data import datasets
from graphtrain.runtime.partition import adjacency, memory

GRAPHS = {"gene-pubmed": dict(reverse=True), "wordnet": dict(reverse=False)}


def load(name: str):
    g = datasets.load(name)
    return g.with_reverse_edges() if GRAPHS[name]["reverse"] else g


def bare_pymetis(adj: sp.csr_matrix, k: int, repeat: int) -> tuple[np.ndarray, float]:
    best = np.inf
    parts = None
    for _ in range(repeat):
        t = time.perf_counter()
        _, parts = pymetis.part_graph(k, pymetis.CSRAdjacency(adj.indptr, adj.indices))
        best = min(best, time.perf_counter() - t)
    return np.asarray(parts), best


def cut_of(adj: sp.csr_matrix, parts: np.ndarray) -> float:
    upper = sp.triu(adj, k=1, format="coo")
    return float(np.mean(parts[upper.row] != parts[upper.col]))


def edges_balance(g, parts: np.ndarray, k: int) -> float:
    stored = np.bincount(parts[g.indices], minlength=k)
    return float(stored.max() / stored.mean())


def ours(g, k: int, repeat: int, **kwargs):
    best, result = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        result = partition.partition_graph(g, k, **kwargs)
        best = min(best, time.perf_counter() - t)
    return result, best


def fmt_balance(bal: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.3f}" for k, v in bal.items())


def run_dataset(name: str, parts_list: list[int], repeat: int) -> list[str]:
    g = load(name)
    adj = adjacency.undirected(g)
    lines = [
        f"\n## {name}: {g.num_nodes:,} nodes, {g.num_edges:,} stored edges, {adj.nnz // 2:,} undirected edges"
    ]
    lines.append(
        "| k | method | cut | balance (max/mean) | seconds | cut / (random/3) | cut / bare | time / bare |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for k in parts_list:
        bare_parts, bare_s = bare_pymetis(adj, k, repeat)
        bare_cut = cut_of(adj, bare_parts)
        nodes = np.bincount(bare_parts, minlength=k)
        rnd, rnd_s = ours(g, k, 1, algorithm="random")
        rnd_cut = rnd.stats.edge_cut_fraction
        rows = [
            (
                "bare pymetis",
                bare_cut,
                f"nodes={nodes.max() / nodes.mean():.3f} edges={edges_balance(g, bare_parts, k):.3f}",
                bare_s,
            )
        ]
        for label, kwargs in (
            ("graphtrain metis, balance nodes", {"balance": ["nodes"]}),
            ("graphtrain metis, default constraints", {}),
        ):
            res, secs = ours(g, k, repeat, **kwargs)
            rows.append((label, res.stats.edge_cut_fraction, fmt_balance(res.stats.balance), secs))
        rows.append(("graphtrain random", rnd_cut, fmt_balance(rnd.stats.balance), rnd_s))
        for label, cut, bal, secs in rows:
            lines.append(
                f"| {k} | {label} | {100 * cut:.2f} % | {bal} | {secs:.2f} | "
                f"{cut / (rnd_cut / 3):.2f} | {cut / bare_cut:.3f} | {secs / bare_s:.2f} |"
            )
    return lines


def _child(name: str, k: int, queue) -> None:  # noqa: ANN001
    """Peak RSS above the loaded graph while partitioning, sampled every 5 ms by a thread."""
    g = load(name)
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], proc.memory_info().rss)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    partition.partition_graph(g, k)
    done.set()
    thread.join()
    queue.put((memory.estimate_bytes(g), peak[0] - base))


def memory_rows(names: list[str], k: int) -> list[str]:
    lines = [
        "\n## memory: estimate vs measured peak RSS growth while partitioning (child process)",
        "| dataset | k | estimate | measured | estimate / measured |",
        "|---|---|---|---|---|",
    ]
    ctx = mp.get_context("spawn")
    for name in names:
        queue = ctx.Queue()
        proc = ctx.Process(target=_child, args=(name, k, queue))
        proc.start()
        est, used = queue.get(timeout=600)
        proc.join(timeout=60)
        ratio = est / max(used, 1)
        lines.append(f"| {name} | {k} | {memory.human(est)} | {memory.human(used)} | {ratio:.2f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(GRAPHS), choices=list(GRAPHS))
    ap.add_argument("--parts", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--repeat", type=int, default=2, help="timed repetitions; the best is reported")
    args = ap.parse_args()
    print(
        f"# bench/partition.py, {time.strftime('%Y-%m-%d')}, {platform.node()}, "
        f"{platform.processor() or platform.machine()}, pymetis {pymetis.version}"
    )
    for name in args.datasets:
        print("\n".join(run_dataset(name, args.parts, args.repeat)), flush=True)
    print("\n".join(memory_rows(args.datasets, 4)))


if __name__ == "__main__":
    main()
