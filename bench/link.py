"""Link prediction with a GNN (issue 48) beside the knowledge-graph models and DGL 2.1, one run.

On gene-kg (or --dataset), one epoch plus filtered evaluation of a seeded 1,000-triple sample (as task
kge ranks them: realistic ranks against every entity, every known triple filtered):
1. graphtrain: examples/gene-kg-rgcn-lp.yaml (R-GCN encoder, DistMult decoder), standalone and 2 shard
   servers x 2 trainers: test filtered MRR and Hits@10, and training triples/s (progress reports after
   a warm-up; evaluation excluded);
2. graphtrain: TransE and DistMult (examples/gene-kg-transe.yaml, model.kind changed for DistMult) on the
   same split, 2 x 2;
3. DGL 2.1: the same R-GCN and DistMult with DGL's edge prediction sampler (bench/dgl_link.py, in
   bench/e2e.py's DGL venv) on the training triples exported from graphtrain's loader; its embeddings
   are ranked here by graphtrain's ranking code on the very same triples.

    python bench/link.py [--dataset gene-kg] [--skip dgl,kge,graphtrain] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import DGL, ROOT, graphtrain_run, run_json, spec, table, venv  # noqa: E402

EXAMPLE = "gene-kg-rgcn-lp.yaml"


def export(name: str, path: Path) -> dict[str, np.ndarray]:
    """The knowledge graph's training triples for DGL, and the evaluation sample graphtrain ranks (the
    split and the seed of the spec's), with every known triple for the filter."""
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.train.kge import eval_sample

    kg = datasets.load(name)
    np.savez(path, train=kg.train, num_entities=kg.num_entities, num_relations=kg.num_relations)
    return {
        "test": eval_sample(kg.test, 0),
        "known": np.concatenate([kg.train, kg.valid, kg.test]),
        "num_entities": np.asarray(kg.num_entities),
        "num_relations": np.asarray(kg.num_relations),
    }


def rank_dgl(out: Path, data: dict[str, np.ndarray]) -> dict[str, float]:
    """DGL's embeddings ranked by graphtrain's code (train/link_prediction.rank_triples)."""
    from graphtrain.runtime.models.decoders import Decoder
    from graphtrain.runtime.train import kge_math
    from graphtrain.runtime.train.link_prediction import rank_triples

    z = np.load(out)
    n, r = int(data["num_entities"]), int(data["num_relations"])
    decoder = Decoder("distmult", z["z"].shape[1], r)
    with torch.no_grad():
        decoder.rel.copy_(torch.from_numpy(z["rel"]))  # type: ignore[union-attr]
    index = kge_math.FilterIndex(data["known"], n, r)
    sums = rank_triples(decoder, torch.from_numpy(z["z"]), data["test"], index, torch.device("cpu"))
    return kge_math.RankSums.metrics(sums.as_list())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="gene-kg")
    ap.add_argument("--skip", default="", help="comma-separated: dgl, kge, graphtrain")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    work = Path(tempfile.mkdtemp(prefix="graphtrain-link-"))
    rows: list[list[str]] = []
    base = {"graph.dataset": a.dataset, "training.checkpointInterval": 10**9}
    lp = spec(EXAMPLE, **base)
    if "graphtrain" not in skip:
        for mode, standalone in (("standalone", True), ("2x2", False)):
            t0 = time.perf_counter()
            result = graphtrain_run(lp, work, standalone)
            wall = time.perf_counter() - t0
            rate = graphtrain_run(lp, work, standalone, measure=True)["samples_per_second"]
            rows.append(
                ["R-GCN + DistMult (graphtrain)", mode, *_metrics(result), f"{rate:,.0f}", f"{wall:.0f}"]
            )
            print(f"[bench] {rows[-1]}", flush=True)
    if "kge" not in skip:
        for kind in ("transe", "distmult"):
            doc = spec("gene-kg-transe.yaml", **base, **{"model.kind": kind})
            if kind != "transe":
                doc["spec"]["model"].pop("norm", None)
            doc["metadata"]["name"] = f"gene-kg-{kind}"
            t0 = time.perf_counter()
            result = graphtrain_run(doc, work, False)
            wall = time.perf_counter() - t0
            rate = graphtrain_run(doc, work, False, measure=True)["samples_per_second"]
            rows.append([f"{kind} (graphtrain kge)", "2x2", *_metrics(result), f"{rate:,.0f}", f"{wall:.0f}"])
            print(f"[bench] {rows[-1]}", flush=True)
    if "dgl" not in skip:
        python = venv("dgl", DGL)
        data = export(a.dataset, work / "kg.npz")
        t0 = time.perf_counter()
        got = run_json(
            [
                str(python),
                str(ROOT / "bench" / "dgl_link.py"),
                "--data",
                str(work / "kg.npz"),
                "--out",
                str(work / "dgl-z.npz"),
                "--threads",
                str(a.threads),
            ]
        )
        wall = time.perf_counter() - t0
        m = rank_dgl(work / "dgl-z.npz", data)
        rows.append(
            [
                "R-GCN + DistMult (DGL 2.1)",
                "1 process",
                f"{m['mrr']:.4f}",
                f"{m['hits@10']:.4f}",
                f"{got['triples_per_second']:,.0f}",
                f"{wall:.0f}",
            ]
        )
        print(f"[bench] {rows[-1]}", flush=True)
    print(f"\n{a.dataset}, one epoch, {platform.node()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(table(["model", "layout", "test MRR", "test Hits@10", "triples/s", "wall s"], rows))


def _metrics(result: dict) -> list[str]:
    return [f"{result['test_mrr']:.4f}", f"{result['test_hits@10']:.4f}"]


if __name__ == "__main__":
    main()
