"""B1 of issue 45, the benchmark a GPU user would judge us by: GraphSAGE on a graph shaped like
ogbn-products, each run beside its model-only ceiling and its all-CPU baseline, in one call.

The graph is bench/products_like.py's (2.4M nodes and ~120M directed edges at --scale 1, 100-d
features, 47 classes with a planted signal), drawn once into --cache. The model is DGL's and PyG's
products example: GraphSAGE, 3 layers of 256, fan-outs [15, 10, 5], batches of 1,024 seeds, the split
8 / 2 / 90 % (ogbn-products trains on 8 %). Two variants: the features alone, and the features beside
a learnable 128-wide node table (Adam on the shard servers).

For each variant, in this order (every run of the call shares one partition, made by the first):
- whole: `graphtrain run --standalone` with the trainer on --device, seeds/s over bench/e2e.py's timed
  window (training steps only, validation excluded), and its share of the ceiling;
- ceiling: the model-only step on --device (bench/ceiling.py: real blocks sampled before the clock,
  random inputs, no tables), seeds/s;
- all-CPU: the same run with the trainer on the CPU (with --device cpu this is the whole run itself),
  and the ratio against it.
--accuracy adds a whole run of --epochs epochs on --device to its end, reporting test accuracy and the
wall seconds: a faster step must not cost accuracy.
Each figure is printed as it is measured; a run that fails is one FAILED line (its log's tail below it),
the other runs still go, and the exit status is then 1: one failure does not lose a lease's other figures.

    python bench/gpu.py [--device cuda] [--scale 1.0] [--variants features,table] [--accuracy]
                        [--mixed-precision bfloat16] [--cuda-graph]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ceiling  # noqa: E402
import products_like  # noqa: E402
from e2e import ROOT, graphtrain_run  # noqa: E402

from graphtrain.runtime.stopping import stop_on_signals  # noqa: E402

VARIANTS = ("features", "table")
# every run of a call, whatever its variant and device: one run directory (e2e.graphtrain_run names it
# after the spec), whose partition `graphtrain run` reuses (same graph and partition settings) and the
# ceiling reads. A partition of the B1 graph at --scale 0.25 took 90 s of CPU on the build VM, mostly the
# data check; three of them per variant did not fit gpu-accept's 300 s step.
RUN_NAME = "products-like-b1"
TIMED_EPOCHS = 1000  # more than any timed window needs (small --scale: epochs of a few steps)


def b1_spec(
    npz: Path, device: str, variant: str, epochs: int, mixed: str = "none", graph: bool = False
) -> dict[str, Any]:
    """The B1 GraphTraining: GraphSAGE over the products-like graph, standalone (one partition);
    `mixed`: training.mixedPrecision; `graph`: training.cudaGraph, the table then held by the trainer
    (sharding collective, as a captured step needs)."""
    spec: dict[str, Any] = {
        "graph": {"path": str(npz), "split": {"train": 0.08, "val": 0.02, "test": 0.9, "seed": 0}},
        "partition": {"parts": 1},
        "task": {"kind": "nodeClassification"},
        "model": {"kind": "graphsage", "hiddenDim": 256, "numLayers": 3, "dropout": 0.5, "useFeatures": True},
        "training": {
            "epochs": epochs,
            "batchSize": 1024,
            "fanouts": [15, 10, 5],
            "denseLr": 0.003,
            "evalEvery": 1000,
            "checkpointInterval": 10**9,
            "seed": 0,
            "mixedPrecision": mixed,
        },
        "shardServers": {"device": device},
        "trainers": {"replicas": 1, "device": device},
    }
    if variant == "table":
        spec["embeddings"] = [
            {
                "name": "node",
                "dim": 128,
                "init": {"kind": "uniform", "low": -0.1, "high": 0.1},
                "optimizer": {"kind": "adam", "lr": 0.003},
            }
        ]
        spec["model"]["nodeEmbedding"] = "node"
    if graph:
        spec["training"]["cudaGraph"] = True
        for table in spec.get("embeddings") or []:
            table["sharding"] = "collective"
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": RUN_NAME},
        "spec": spec,
    }


def model_ceiling(doc: dict[str, Any], work: Path, device: torch.device, steps: int) -> float:
    """The ceiling's seeds/s, over the partition of the call's whole runs where one made it already."""
    spec_path = work / f"{doc['metadata']['name']}-ceiling.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    made = work / f"{RUN_NAME}-standalone" / "partition"
    gt, enc, batches = ceiling.sampled_batches(spec_path, work / "ceiling", 8, device, made)
    return ceiling.ceiling(gt, enc, batches, device, steps, 3, 3)[0]


def timed_rate(npz: Path, device: str, variant: str, mixed: str, work: Path, graph: bool = False) -> float:
    """seeds/s of a whole standalone run on `device`: epochs to spare, stopped once bench/e2e.py's
    window is measured."""
    doc = b1_spec(npz, device, variant, TIMED_EPOCHS, mixed, graph)
    return graphtrain_run(doc, work, True, True)["samples_per_second"]


def accuracy_of(doc: dict[str, Any], work: Path) -> float:
    return graphtrain_run(doc, work, True)["test_accuracy"]


def arg_problem(a: argparse.Namespace, gpus: int) -> str | None:
    """Why the arguments cannot run (one line naming the option), or None: checked before the graph is
    drawn (minutes at --scale 1), where a bad --device or --steps failed at the end with a traceback.
    `gpus`: the GPUs torch sees."""
    if not 0 < a.scale <= 1:
        return f"--scale must be in (0, 1], got {a.scale}"
    variants = [v for v in a.variants.split(",") if v]
    if not variants:
        return f"--variants: none given (known: {', '.join(VARIANTS)})"
    if bad := sorted(set(variants) - set(VARIANTS)):
        return f"--variants: unknown {', '.join(bad)} (known: {', '.join(VARIANTS)})"
    if a.steps < 1 or a.epochs < 1:
        return f"--steps and --epochs must be >= 1, got {a.steps} and {a.epochs}"
    try:
        device = torch.device(a.device)
    except RuntimeError:
        return f"--device must be cpu or cuda[:N], got {a.device!r}"
    if device.type not in ("cpu", "cuda"):
        return f"--device must be cpu or cuda[:N], got {a.device!r}"
    if device.type == "cuda" and (device.index or 0) >= gpus:
        return f"--device {a.device}: no such GPU here (torch sees {gpus})"
    return None


def measured(variant: str, what: str, fn: Callable[[], float], form: str = ",.0f") -> float | None:
    """fn's figure, printed as soon as it is known; None, with one line saying why, when it failed, so
    that one failed run (the last of a GPU lease's bench, say) does not lose the figures before it."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - reported, the bench goes on to its other figures
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        print(f"[bench] {variant}: {what} FAILED: {lines[0]}", flush=True)
        if len(lines) > 1:
            print("\n".join(lines[-20:]), flush=True)
        return None
    print(f"[bench] {variant}: {what} {value:{form}}", flush=True)
    return value


def ratio(a: float | None, b: float | None, form: str) -> str:
    return "-" if a is None or b is None or b == 0 else format(a / b, form)


def number(x: float | None, form: str = ",.0f") -> str:
    return "-" if x is None else format(x, form)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--scale", type=float, default=1.0, help="share of ogbn-products' node count")
    ap.add_argument("--cache", type=Path, default=ROOT / "bench" / ".cache")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=30, help="ceiling steps timed per round")
    ap.add_argument("--accuracy", action="store_true", help="also a whole run for test accuracy")
    ap.add_argument("--epochs", type=int, default=3, help="epochs of the accuracy run")
    ap.add_argument(
        "--mixed-precision",
        choices=["none", "bfloat16"],
        default="none",
        help="training.mixedPrecision of every run of the call (ceiling, whole, all-CPU)",
    )
    ap.add_argument(
        "--cuda-graph",
        action="store_true",
        help="the whole and accuracy runs on a GPU with training.cudaGraph (the table collective); the "
        "all-CPU baseline and the ceiling stay eager",
    )
    a = ap.parse_args()
    if problem := arg_problem(a, torch.cuda.device_count() if torch.cuda.is_available() else 0):
        raise SystemExit(f"bench/gpu.py: {problem}")
    stop_on_signals()  # a kill (gpu-accept's timeout) unwinds: the run stops, the temp dir goes
    variants = [v for v in a.variants.split(",") if v]
    device = torch.device(a.device)
    npz = products_like.ensure(a.cache, a.scale, 0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphtrain-gpu-bench-") as tmp:
        work = Path(tmp)
        for variant in variants:
            mp = a.mixed_precision
            graph = a.cuda_graph and device.type == "cuda"
            rate = partial(timed_rate, npz, a.device, variant, mp, work, graph)
            whole = measured(variant, "whole seeds/s", rate)
            doc = b1_spec(npz, a.device, variant, 1, mp)  # after the whole run: its partition, not one more
            top = measured(variant, "ceiling seeds/s", partial(model_ceiling, doc, work, device, a.steps))
            cpu = whole
            if device.type != "cpu":
                cpu = measured(variant, "all-CPU seeds/s", partial(timed_rate, npz, "cpu", variant, mp, work))
            acc, wall = None, None
            if a.accuracy:
                t0 = time.perf_counter()
                doc = b1_spec(npz, a.device, variant, a.epochs, mp, graph)
                acc = measured(variant, "test accuracy", partial(accuracy_of, doc, work), ".4f")
                wall = time.perf_counter() - t0 if acc is not None else None
            rows.append((variant, top, whole, cpu, acc, wall))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"# bench/gpu.py B1, {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {name}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {npz.name}; mixedPrecision "
        f"{a.mixed_precision}" + ("; the GPU's runs captured (training.cudaGraph)" if a.cuda_graph else "")
    )
    print(
        "| variant | ceiling seeds/s | whole seeds/s | whole / ceiling | all-CPU seeds/s | vs all-CPU "
        "| test acc | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for variant, top, whole, cpu, acc, wall in rows:
        print(
            f"| {variant} | {number(top)} | {number(whole)} | {ratio(whole, top, '.0%')} | {number(cpu)} | "
            f"{ratio(whole, cpu, '.2f')}x | {number(acc, '.4f')} | {number(wall)} |"
        )
    if any(x is None for row in rows for x in row[1:4]) or (a.accuracy and any(r[4] is None for r in rows)):
        raise SystemExit("bench/gpu.py: a run failed (its FAILED line above)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as exc:  # its run and temp dir are gone by now
        print(f"bench/gpu.py: stopped ({exc or 'interrupted'})", file=sys.stderr)
        sys.exit(130)
