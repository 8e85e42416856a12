"""CUDA API calls per optimizer step of the CUDA core: kernel launches, synchronisations, allocations, copies.

The figures behind "one host synchronisation per step at most" (issue 29), counted with torch.profiler
(ProfilerActivity.CUDA: CUPTI sees the runtime calls of the statically linked core) where nsys is absent, as
on the lent GPU machine. Each optimizer gets its own 1M x 128 table and state; the ids and gradients are
made before profiling (torch's own randint/randn are not counted) and 2 warm-up steps run first, so a
steady step's calls remain. scripts/gpu-check runs it as a step.

    python bench/cuda_calls.py [--rows 1000000] [--dim 128] [--batch 100000] [--steps 20] [--json FILE]

--device cpu profiles the CPU core instead (every CUDA count is then 0): the script's own check where no
GPU is. Exit 3 when --device cuda finds no GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step
from graphtrain.runtime.train.profiling import COLUMNS, api_names, per_step

KINDS = ("rowwise_adagrad", "adagrad", "adam", "sgd")
TOOL = "torch.profiler (CUPTI)"


def profile_steps(kind: str, rows: int, dim: int, batch: int, steps: int, device: str) -> Counter[str]:
    """The API calls of `steps` steps of `kind` (after 2 warm-up steps), by name."""
    config = OptimConfig(kind, 0.01, duplicate="mean" if kind == "rowwise_adagrad" else "sum")
    backend = "cuda" if device == "cuda" else "cpu"
    table = torch.randn(rows, dim, device=device)
    state = make_state(config, rows, dim, device)
    g = torch.Generator(device=device).manual_seed(0)
    data = [
        (
            torch.randint(0, rows, (batch,), device=device, generator=g),
            torch.randn(batch, dim, device=device, generator=g),
        )
        for _ in range(steps + 2)
    ]
    for ids, grads in data[:2]:
        sparse_step(config, table, state, ids, grads, backend=backend)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for ids, grads in data[2:]:
            sparse_step(config, table, state, ids, grads, backend=backend)
    if device == "cuda":
        torch.cuda.synchronize()
    del table, state, data
    if device == "cuda":
        torch.cuda.empty_cache()
    return api_names(e.name for e in prof.events())


def table_lines(results: dict[str, dict[str, float]], steps: int, shape: str) -> list[str]:
    lines = [
        f"CUDA API calls per step ({TOOL}; {shape}; mean of {steps} steps after 2 warm-up steps):",
        "| optimizer | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for kind, cols in results.items():
        lines.append(f"| {kind} | " + " | ".join(f"{cols[c]:.2f}" for c in COLUMNS) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--json", type=Path, help="also write the counts here")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_calls: no GPU here (torch.cuda.is_available() is False)", file=sys.stderr)
        return 3
    shape = f"{args.rows:,} x {args.dim} table, {args.batch:,} uniform ids, {args.device}"
    raw: dict[str, dict[str, int]] = {}
    results: dict[str, dict[str, float]] = {}
    for kind in args.kinds:
        counts = profile_steps(kind, args.rows, args.dim, args.batch, args.steps, args.device)
        raw[kind] = dict(sorted(counts.items()))
        results[kind] = per_step(counts, args.steps)
    print("\n".join(table_lines(results, args.steps, shape)), flush=True)
    blind = [k for k, cols in results.items() if args.device == "cuda" and not cols["cudaLaunchKernel"]]
    if blind:
        print(f"cuda_calls: the profiler saw no kernel launch for {', '.join(blind)}: counts not trusted")
    if args.json:
        doc: dict[str, Any] = {"tool": TOOL, "shape": shape, "steps": args.steps, "per_step": results}
        doc["raw"] = raw
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 1 if blind else 0


if __name__ == "__main__":
    sys.exit(main())
