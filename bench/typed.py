"""Typed graphs and the models of issue 44, beside DGL 2.1 measured in the same run.

1. Partition balance: WordNet typed and gene-pubmed typed into 4 parts with METIS and with Fennel (the
   streaming partitioner, then per node type), every node type's balance (nodes, and train/val/test where
   METIS balances them) and the edge cut beside the untyped graph's partition with the same settings.
1b. The same typed Fennel streamed from the edge files (partition/streaming.py) beside the in-memory one,
   each in a fresh process: per-type balance, cut, seconds, peak RSS and whether the parts agree (the
   graphs as stored, without reverse edges, which cannot stream).
2. WordNet, 10 epochs, standalone and 2 shard servers x 2 trainers: R-GCN on the typed graph
   (examples/wordnet-rgcn.yaml), GAT (examples/wordnet-gat.yaml), and GraphSAGE typed (one weight per
   relation) and untyped beside them; test accuracy and training samples/s (progress reports after a
   warm-up, evaluation excluded), against DGL 2.1's RelGraphConv and GATConv with the same settings on
   the same exported graph (bench/dgl_typed.py, in bench/e2e.py's DGL venv). --repeat N: N rounds of
   the rates (ours in both modes, then DGL's), each round's ratio printed, the table's ratio their median.

    python bench/typed.py [--skip dgl,balance,stream,models] [--threads 2] [--models rgcn,gat,sage-typed,sage]
                          [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import DGL, ROOT, graphtrain_run, run_json, spec, table, venv  # noqa: E402

MODELS = {
    # name: (example, overrides, DGL model or None)
    "rgcn": ("wordnet-rgcn.yaml", {}, "rgcn"),
    "gat": ("wordnet-gat.yaml", {}, "gat"),
    "sage-typed": ("wordnet-rgcn.yaml", {"model.kind": "graphsage", "model.numBases": None}, None),
    "sage": ("wordnet-sage.yaml", {}, None),
}


def balance(rows: list[list[str]]) -> None:
    """Each typed graph's 4-part partition by METIS and by Fennel (the streaming partitioner, then per
    node type): per-type balance and edge cut, beside the untyped graph's by the same algorithm."""
    from graphtrain.contract.spec import GraphSource, Split
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.partition.pipeline import partition_graph

    constraints = ["nodes", "degree", "train", "val", "test"]
    for name, split in (("wordnet", Split()), ("gene-pubmed", None)):
        graphs = {
            typed: datasets.load_source(
                GraphSource(dataset=name, typed=typed, split=split, reverse_edges=name == "gene-pubmed")
            )
            for typed in (False, True)
        }
        for algorithm in ("metis", "fennel"):
            cuts, seconds, per_type = {}, 0.0, {}
            for typed, g in graphs.items():
                t = time.perf_counter()
                r = partition_graph(g, 4, algorithm, constraints, 0.05, 0)
                seconds = time.perf_counter() - t
                cuts[typed] = r.stats.edge_cut_fraction
                per_type = {k: v for k, v in r.stats.balance.items() if ":" in k}
            if algorithm == "fennel":  # Fennel balances nodes, not the split masks
                per_type = {k: v for k, v in per_type.items() if k.startswith("nodes:")}
            worst = max(per_type.values())
            rows.append(
                [
                    f"{name} typed",
                    algorithm,
                    f"{worst:.3f}",
                    "yes" if worst <= 1.05 else "NO",
                    f"{cuts[True]:.2%}",
                    f"{cuts[False]:.2%}",
                    f"{seconds:.1f}",
                    ", ".join(f"{k} {v:.3f}" for k, v in per_type.items()),
                ]
            )
            print(
                f"[bench] {name} typed, {algorithm}: worst type balance {worst:.3f}, cut {cuts[True]:.2%} "
                f"(untyped {cuts[False]:.2%})",
                flush=True,
            )


def _fennel_typed(name: str, streamed: bool) -> dict:
    """One typed 4-part Fennel partition of `name` as stored (run in a fresh process: its peak RSS)."""
    import hashlib
    import resource

    from graphtrain.contract.spec import GraphSource
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.partition import format, streaming
    from graphtrain.runtime.partition.pipeline import partition_graph

    constraints = ["nodes", "degree", "train", "val", "test"]
    with tempfile.TemporaryDirectory(prefix="gt-stream-") as tmp:
        t = time.perf_counter()
        if streamed:
            g, edges = datasets.load_streamed(name, types=True)
            _, r = streaming.partition_stream(
                g, edges, 4, Path(tmp) / "p", balance=constraints, max_imbalance=0.05, seed=0
            )
        else:
            g = datasets.load_source(GraphSource(dataset=name, typed=True))
            r = partition_graph(g, 4, "fennel", constraints, 0.05, 0)
            format.write(g, r, Path(tmp) / "p")
        seconds = time.perf_counter() - t
    per_type = {k: v for k, v in r.stats.balance.items() if k.startswith("nodes:")}
    return {
        "seconds": seconds,
        "cut": r.stats.edge_cut_fraction,
        "per_type": per_type,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parts": hashlib.sha256(r.parts.astype(np.int32).tobytes()).hexdigest(),
    }


def stream(rows: list[list[str]]) -> None:
    """Typed Fennel streamed from the edge files beside the in-memory typed Fennel (module docstring)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    for name in ("wordnet", "gene-pubmed"):
        got = {}
        for streamed in (False, True):
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                got[streamed] = pool.submit(_fennel_typed, name, streamed).result()
        for streamed, r in got.items():
            worst = max(r["per_type"].values())
            rows.append(
                [
                    f"{name} typed",
                    "streamed" if streamed else "in memory",
                    f"{worst:.3f}",
                    f"{r['cut']:.2%}",
                    f"{r['seconds']:.1f}",
                    f"{r['rss_mib']:.0f}",
                    "yes" if r["parts"] == got[False]["parts"] else "no",
                    ", ".join(f"{k} {v:.3f}" for k, v in r["per_type"].items()),
                ]
            )
            print(f"[bench] {name} typed fennel {rows[-1][1]}: {rows[-1][2:7]}", flush=True)


def export(path: Path) -> None:
    """Typed WordNet as both sides read it: edges with their canonical type, the projected features,
    labels and masks."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.data.transform import project_graph_features

    gt = load_yaml((ROOT / "examples" / "wordnet-rgcn.yaml").read_text())
    g = project_graph_features(datasets.load_source(gt.spec.graph), 256, seed=0)
    assert g.canonical_etypes is not None and g.etype is not None
    src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    np.savez(
        path,
        src=src,
        dst=np.asarray(g.indices, np.int64),
        etype=np.asarray(g.etype, np.int64),
        num_rels=len(g.canonical_etypes),
        num_nodes=g.num_nodes,
        feat=g.feat,
        label=g.label,
        **{f"{k}_mask": v for k, v in g.masks.items()},
    )


def models(
    work: Path, names: list[str], threads: int, with_dgl: bool, rows: list[list[str]], repeat: int = 1
) -> None:
    """Accuracy and rate of each model in both modes beside DGL's; with `repeat` > 1, that many rounds of
    the three rates (ours standalone, ours 2x2, DGL's over 4 epochs) run one after the other, and each
    mode's ratio is the median of its rounds' ratios: a VM whose speed drifts by 10 % within an hour
    moves a single run's ratio as much as a bar's margin."""
    if with_dgl:
        dgl = venv("dgl", DGL)
        export(work / "wordnet-typed.npz")
    for name in names:
        example, overrides, dgl_model = MODELS[name]
        doc = spec(example, **{"training.checkpointInterval": 10**9, **overrides})
        if overrides.get("model.numBases", 0) is None:
            doc["spec"]["model"].pop("numBases", None)
        doc["metadata"]["name"] = f"wn-{name}"
        quick = spec(
            example, **{"training.evalEvery": 1000, "training.checkpointInterval": 10**9, **overrides}
        )
        if overrides.get("model.numBases", 0) is None:
            quick["spec"]["model"].pop("numBases", None)
        quick["metadata"]["name"] = f"wn-{name}-rate"
        got: dict[str, tuple[float, float]] = {}
        for mode, standalone in (("standalone", True), ("2x2", False)):
            rate = graphtrain_run(quick, work, standalone, measure=True)["samples_per_second"]
            acc = graphtrain_run(doc, work, standalone)["test_accuracy"]
            got[mode] = (acc, rate)
            print(f"[bench] {name} {mode}: test accuracy {acc:.4f}, {rate:,.0f} samples/s", flush=True)
        base = None
        if with_dgl and dgl_model is not None:
            argv = [
                str(dgl),
                str(ROOT / "bench" / "dgl_typed.py"),
                dgl_model,
                "--data",
                str(work / "wordnet-typed.npz"),
            ]
            base = run_json([*argv, "--threads", str(threads)])
            print(f"[bench] DGL {dgl_model}: {base}", flush=True)
        ratios = {mode: [got[mode][1] / base["seeds_per_second"]] if base else [] for mode in got}
        for r in range(1, repeat if base else 1):
            rates = {m: graphtrain_run(quick, work, m == "standalone", measure=True) for m in got}
            theirs = run_json([*argv, "--threads", str(threads), "--epochs", "4"])["seeds_per_second"]
            for m, v in rates.items():
                ratios[m].append(v["samples_per_second"] / theirs)
            print(
                f"[bench] {name} round {r + 1}: " + ", ".join(f"{m} {ratios[m][-1]:.2f}x" for m in got),
                flush=True,
            )
        for mode in ("standalone", "2x2"):
            acc, rate = got[mode]
            if len(ratios.get(mode, [])) > 1:
                print(f"[bench] {name} {mode}: ratios {[round(x, 2) for x in ratios[mode]]}", flush=True)
            rows.append(
                [
                    name,
                    mode,
                    f"{acc:.4f}",
                    f"{base['test_accuracy']:.4f}" if base else "-",
                    f"{acc - base['test_accuracy']:+.4f}" if base else "-",
                    f"{rate:,.0f}",
                    f"{base['seeds_per_second']:,.0f}" if base else "-",
                    f"{statistics.median(ratios[mode]):.2f}x" if base else "-",
                ]
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip", default="", help="comma-separated: dgl, balance, stream, models")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated of {', '.join(MODELS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the rates; the ratio is their median")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(
        f"# typed-graph benchmark, {time.strftime('%Y-%m-%d')}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        flush=True,
    )
    if "balance" not in skip:
        rows: list[list[str]] = []
        balance(rows)
        print(
            table(
                [
                    "graph",
                    "algorithm",
                    "worst type balance",
                    "<= 1.05",
                    "cut",
                    "untyped cut",
                    "s",
                    "per type",
                ],
                rows,
            )
        )
    if "stream" not in skip:
        rows = []
        stream(rows)
        head = ["graph", "fennel", "worst type balance", "cut", "s", "peak RSS MiB", "same parts", "per type"]
        print(table(head, rows))
    if "models" not in skip:
        rows = []
        with tempfile.TemporaryDirectory(prefix="gt-typed-") as tmp:
            models(
                Path(tmp), [m for m in a.models.split(",") if m], a.threads, "dgl" not in skip, rows, a.repeat
            )
        print(
            table(
                ["model", "mode", "test acc", "DGL acc", "diff", "samples/s", "DGL samples/s", "vs DGL"], rows
            )
        )


if __name__ == "__main__":
    main()
