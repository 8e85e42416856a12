"""B1 of issue 45, the benchmark a GPU user would judge us by: GraphSAGE on a graph shaped like
ogbn-products, each run beside its model-only ceiling and its all-CPU baseline, in one call.

The graph is bench/products_like.py's (2.4M nodes and ~120M directed edges at --scale 1, 100-d
features, 47 classes with a planted signal), drawn once into --cache. The model is DGL's and PyG's
products example: GraphSAGE, 3 layers of 256, fan-outs [15, 10, 5], batches of 1,024 seeds, the split
8 / 2 / 90 % (ogbn-products trains on 8 %). Two variants: the features alone, and the features beside
a learnable 128-wide node table (Adam on the shard servers).

For each variant:
- ceiling: the model-only step on --device (bench/ceiling.py: real blocks sampled before the clock,
  random inputs, no tables), seeds/s;
- whole: `graphtrain run --standalone` with the trainer on --device, seeds/s over bench/e2e.py's timed
  window (training steps only, validation excluded), and its share of the ceiling;
- all-CPU: the same run with the trainer on the CPU (with --device cpu this is the whole run itself),
  and the ratio against it.
--accuracy adds a whole run of --epochs epochs on --device to its end, reporting test accuracy and the
wall seconds: a faster step must not cost accuracy.

    python bench/gpu.py [--device cuda] [--scale 1.0] [--variants features,table] [--accuracy]
                        [--mixed-precision bfloat16]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ceiling  # noqa: E402
import products_like  # noqa: E402
from e2e import ROOT, graphtrain_run  # noqa: E402

VARIANTS = ("features", "table")
TIMED_EPOCHS = 1000  # more than any timed window needs (small --scale: epochs of a few steps)


def b1_spec(npz: Path, device: str, variant: str, epochs: int, mixed: str = "none") -> dict[str, Any]:
    """The B1 GraphTraining: GraphSAGE over the products-like graph, standalone (one partition);
    `mixed`: training.mixedPrecision."""
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
    name = f"products-like-{variant}-{device.replace(':', '')}"
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": name},
        "spec": spec,
    }


def model_ceiling(doc: dict[str, Any], work: Path, device: torch.device, steps: int) -> float:
    spec_path = work / f"{doc['metadata']['name']}-ceiling.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    gt, enc, batches = ceiling.sampled_batches(spec_path, work / "ceiling", 8, device)
    return ceiling.ceiling(gt, enc, batches, device, steps, 3, 3)[0]


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
    a = ap.parse_args()
    if problem := arg_problem(a, torch.cuda.device_count() if torch.cuda.is_available() else 0):
        raise SystemExit(f"bench/gpu.py: {problem}")
    variants = [v for v in a.variants.split(",") if v]
    device = torch.device(a.device)
    npz = products_like.ensure(a.cache, a.scale, 0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphtrain-gpu-bench-") as tmp:
        work = Path(tmp)
        for variant in variants:
            mp = a.mixed_precision
            top = model_ceiling(b1_spec(npz, a.device, variant, 1, mp), work, device, a.steps)
            # timed runs: epochs to spare, stopped once bench/e2e.py's window is measured
            whole = graphtrain_run(b1_spec(npz, a.device, variant, TIMED_EPOCHS, mp), work, True, True)
            cpu = whole
            if device.type != "cpu":
                cpu = graphtrain_run(b1_spec(npz, "cpu", variant, TIMED_EPOCHS, mp), work, True, True)
            acc, wall = None, None
            if a.accuracy:
                t0 = time.perf_counter()
                doc = b1_spec(npz, a.device, variant, a.epochs, mp)
                acc = graphtrain_run(doc, work, True)["test_accuracy"]
                wall = time.perf_counter() - t0
            rates = (whole["samples_per_second"], cpu["samples_per_second"])
            rows.append((variant, top, *rates, acc, wall))
            print(
                f"[bench] {variant}: ceiling {top:,.0f}, whole {rates[0]:,.0f}, all-CPU {rates[1]:,.0f}",
                flush=True,
            )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"# bench/gpu.py B1, {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {name}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {npz.name}; mixedPrecision "
        f"{a.mixed_precision}"
    )
    print(
        "| variant | ceiling seeds/s | whole seeds/s | whole / ceiling | all-CPU seeds/s | vs all-CPU "
        "| test acc | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for variant, top, whole, cpu, acc, wall in rows:
        extra = f"{acc:.4f} | {wall:.0f}" if acc is not None and wall is not None else "- | -"
        print(
            f"| {variant} | {top:,.0f} | {whole:,.0f} | {whole / top:.0%} | {cpu:,.0f} | "
            f"{whole / cpu:.2f}x | {extra} |"
        )


if __name__ == "__main__":
    main()
