"""Whole-graph inference (issue 48 item 3): `graphtrain infer` on a trained checkpoint, 2 trainers x 2
shard servers and standalone, against a single-process computation of the same model (predict.py's
node_outputs: each node's whole neighbourhood expanded in one process, no shard servers), side by side.

1. `graphtrain run SPEC` (--epochs overrides training.epochs), 2x2: the training's test accuracy.
2. `graphtrain infer <run>/checkpoints/LATEST --spec SPEC` on 2x2 and standalone: rows/s (the
   inference pass itself, every layer over every node, from the trainers' result) and wall time.
3. The single-process computation of every node's class probabilities and last hidden layer, timed.

Prints the largest difference of every node's embedding and probabilities between 2x2 inference and
the single process (the bar: 1e-5), the test accuracy of the written predictions against the
training's final evaluation (the bar: equal), and rows per second of each.

    python bench/infer.py [--spec examples/wordnet-sage.yaml] [--epochs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "graphtrain.runtime.cli"]


def run(argv: list[str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[3:5])} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - began


def read_output(out: Path) -> tuple[dict, dict[str, np.ndarray]]:
    manifest = json.loads((out / "manifest.json").read_text())
    parts = [pq.read_table(out / p).to_pydict() for p in manifest["parts"]]
    cols = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    return manifest, cols


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="examples/wordnet-sage.yaml")
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.outputs import checkpoint_partition
    from graphtrain.runtime.partition.format import load_maps
    from graphtrain.runtime.predict import node_outputs

    with tempfile.TemporaryDirectory(prefix="bench-infer-") as tmp:
        work = Path(tmp)
        doc = yaml.safe_load((ROOT / a.spec).read_text())
        doc["spec"]["training"]["epochs"] = a.epochs
        spec = work / "spec.yaml"
        spec.write_text(yaml.safe_dump(doc))
        train_s = run([*CLI, "run", str(spec), "--run-dir", str(work / "train")])
        result = json.loads((work / "train" / "result.json").read_text())
        latest = work / "train" / "checkpoints" / "LATEST"
        rows = []
        outputs = {}
        for mode, extra in (("2x2", []), ("standalone", ["--standalone"])):
            wall = run(
                [*CLI, "infer", str(latest), "--spec", str(spec), "--run-dir", str(work / mode), *extra]
            )
            manifest, cols = read_output(work / mode / "inference")
            outputs[mode] = cols
            rows.append(
                (mode, manifest["rows"], manifest["rows_per_second"], wall, manifest["test_accuracy"])
            )
        gt = load_yaml(spec.read_text())
        checkpoint = latest.parent / latest.read_text().strip()
        cfg = checkpoint_partition(checkpoint)
        began = time.perf_counter()
        probs = node_outputs(gt, checkpoint, cfg)
        hidden = node_outputs(gt, checkpoint, cfg, embeddings=True)
        single_s = time.perf_counter() - began
        n = len(probs.ids)
        rows.append(
            (
                "one process (predict.py: probabilities, then hidden layer)",
                n,
                n / single_s,
                single_s,
                float("nan"),
            )
        )
        # the parquet rows in new-id order -> original order, as predict's are
        new_of = load_maps(cfg)["node_map_inverse"]
        cols = outputs["2x2"]
        order = np.argsort(cols["id"])
        assert (cols["id"][order] == probs.ids).all()
        emb = np.stack(cols["embedding"][order])
        ref_emb = np.stack(list(hidden.columns.values()), 1)
        p_names = [k for k in probs.columns if k.startswith("p_")]
        p = np.stack([cols[k][order] for k in p_names], 1)
        ref_p = np.stack([probs.columns[k] for k in p_names], 1)
        alone = outputs["standalone"]
        o2 = np.argsort(alone["id"])
        print(
            f"# whole-graph inference, {a.spec}, {a.epochs} epochs; {n:,} nodes ({len(new_of):,} in the map)"
        )
        print(f"training (2x2): {train_s:.1f} s, test accuracy {result['test_accuracy']:.4f}")
        print("| inference | rows | rows/s | wall s | test accuracy |\n|---|---|---|---|---|")
        for mode, count, rate, wall, acc in rows:
            print(f"| {mode} | {count:,} | {rate:,.0f} | {wall:.1f} | {acc:.4f} |")
        print(f"max |embedding - one process|: {np.abs(emb - ref_emb).max():.2e}")
        print(f"max |probabilities - one process|: {np.abs(p - ref_p).max():.2e}")
        print(f"max |2x2 - standalone| embedding: {np.abs(emb - np.stack(alone['embedding'][o2])).max():.2e}")
        print(
            f"test accuracy of the written predictions == training's: {rows[0][4] == result['test_accuracy']}"
        )


if __name__ == "__main__":
    main()
