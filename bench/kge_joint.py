"""Joint negatives (`task.sampler: joint`, DGL-KE's chunked sampling) beside the uniform sampler, in one run.

1. Quality: filtered test MRR of TransE and DistMult on Nations, Kinships and UMLS at bench/e2e.py's KGE
   settings (dim 128, 100 epochs, batch 256, crossentropy, PyKEEN's comparison), standalone, seeds
   0..S-1: uniform with 32 negatives per positive; joint with the same 32 per positive, shared by a
   chunk; joint with 256 shared entities (as cheap in rows, 8x the negatives).
2. Speed: gene-kg TransE standalone (877k entities, 128-d Adam tables), the training rate over a timed
   window after a warm-up (bench/e2e.py's reading of the progress reports): uniform at batch 1,024 with
   32 negatives; joint at 1,024 and at 8,192, 32 and 256 shared entities per chunk of 256.

    python bench/kge_joint.py [--seeds 2] [--skip quality,speed]   (or make bench-kge-joint)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import graphtrain_run, kg_spec, spec, table  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "uniform, 32 each": {"task.sampler": "uniform", "task.negatives": 32},
    "joint, 32 per chunk of 256": {"task.sampler": "joint", "task.negatives": 32, "task.chunk": 256},
    "joint, 256 per chunk of 256": {"task.sampler": "joint", "task.negatives": 256, "task.chunk": 256},
}


def quality(work: Path, seeds: int) -> str:
    rows: list[list[str]] = []
    for dataset in ("nations", "kinships", "umls"):
        for model in ("transe", "distmult"):
            row = [dataset, model]
            for name, overrides in VARIANTS.items():
                mrr, seconds = [], []
                for seed in range(seeds):
                    doc = kg_spec(dataset, model, seed, **overrides)
                    began = time.perf_counter()
                    mrr.append(graphtrain_run(doc, work, standalone=True)["test_mrr"])
                    seconds.append(time.perf_counter() - began)
                print(f"[bench] {dataset} {model} {name}: test MRR {mrr}, {seconds} s", flush=True)
                row.append(f"{statistics.mean(mrr):.4f} ({statistics.mean(seconds):.0f} s)")
            rows.append(row)
    return table(["dataset", "model", *(f"{v}: MRR (run s)" for v in VARIANTS)], rows)


def speed(work: Path) -> str:
    runs = [
        ("uniform, 32 each", 1024, {"task.sampler": "uniform", "task.negatives": 32}),
        ("joint, 32 per chunk of 256", 1024, VARIANTS["joint, 32 per chunk of 256"]),
        ("joint, 32 per chunk of 256", 8192, VARIANTS["joint, 32 per chunk of 256"]),
        ("joint, 256 per chunk of 256", 8192, VARIANTS["joint, 256 per chunk of 256"]),
    ]
    rows, base = [], None
    for name, batch, overrides in runs:
        doc = spec("gene-kg-transe.yaml", **{"training.batchSize": batch, **overrides})
        rate = graphtrain_run(doc, work, standalone=True, measure=True)["samples_per_second"]
        base = base or rate
        rows.append([name, f"{batch:,}", f"{rate:,.0f}", f"{rate / base:.2f}x"])
        print(f"[bench] gene-kg {name} batch {batch}: {rate:,.0f} samples/s", flush=True)
    return table(["negatives", "batch", "samples/s", "vs uniform at 1,024"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma-separated: quality, speed")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    work = Path(tempfile.mkdtemp(prefix="kge-joint-"))
    out = [f"# bench/kge_joint.py, {time.strftime('%Y-%m-%d %H:%M')} UTC, seeds {args.seeds}"]
    if "speed" not in skip:
        out.append(speed(work))
    if "quality" not in skip:
        out.append(quality(work, args.seeds))
    print("\n\n".join(out))


if __name__ == "__main__":
    main()
