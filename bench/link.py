"""Link prediction with a GNN (issue 48) beside the knowledge-graph models and DGL 2.1, one run.

On gene-kg (or --dataset), one epoch plus filtered evaluation of a seeded 2,000-triple sample (as task
kge ranks them: realistic ranks against every entity, every known triple filtered):
1. graphtrain: examples/gene-kg-rgcn-lp.yaml (R-GCN encoder, DistMult decoder), standalone and 2 shard
   servers x 2 trainers: test filtered MRR and Hits@10, and training triples/s (progress reports after
   a warm-up; evaluation excluded);
2. graphtrain: TransE and DistMult (examples/gene-kg-transe.yaml, model.kind changed for DistMult) on the
   same split, 2 x 2;
3. DGL 2.1: the same R-GCN and DistMult with DGL's edge prediction sampler (bench/dgl_link.py, in
   bench/e2e.py's DGL venv) on the training triples exported from graphtrain's loader; its embeddings
   are ranked here by graphtrain's ranking code on the very same triples;
4. the leak: the R-GCN run again with task.exclude none (each target edge left in the graph its own
   embedding reads).
--dataset wordnet: WordNet's 26 pointer relations as triples (wordnet_kg: a seeded split whose valid
and test triples with their inverse in training are dropped, WN18RR-style), through graph.triples.

    python bench/link.py [--dataset gene-kg|wordnet|nations] [--epochs 1] [--seed 0]
                         [--layouts standalone,2x2] [--skip dgl,kge,graphtrain,leak]
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
# WordNet's pointer relations and their inverses (wndb(5WN)); the symmetric ones are their own inverse,
# and entailment, cause, participle and pertainym have none
INVERSE = {
    "hypernym": "hyponym",
    "instance_hypernym": "instance_hyponym",
    "member_holonym": "member_meronym",
    "substance_holonym": "substance_meronym",
    "part_holonym": "part_meronym",
    "topic_domain": "topic_member",
    "region_domain": "region_member",
    "usage_domain": "usage_member",
}
INVERSE |= {v: k for k, v in INVERSE.items()}
INVERSE |= {r: r for r in ("antonym", "derivation", "also_see", "verb_group", "similar_to", "attribute")}


def wordnet_kg(work: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """WordNet's 26 pointer relations as triples between synsets, split 90/5/5 (seed 0), WN18RR-style:
    a valid or test triple whose inverse (t, inverse of r, h) is a training triple is dropped, since
    predicting it is reading its inverse back (WN18's flaw, which WN18RR removed), and so is one naming
    a synset no training triple names (it would have no trained row). Written as
    graph.triples files; returns the spec's graph section and the arrays (integer ids) DGL reads."""
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.data.graph import random_triple_split

    g = datasets.typed_dataset("wordnet", datasets.load("wordnet"))
    assert g.canonical_etypes is not None and g.etype is not None and g.node_ids is not None
    names = np.asarray(sorted({c[1] for c in g.canonical_etypes.tolist()}))
    rel = np.searchsorted(names, g.canonical_etypes[:, 1][g.etype])
    src, dst = g.edges()
    triples = np.unique(np.stack([src, rel, dst], 1).astype(np.int64), axis=0)
    train, valid, test = random_triple_split(triples, 0.9, 0.05, 0)
    inv = np.array([int(np.searchsorted(names, INVERSE[n])) if n in INVERSE else -1 for n in names])
    n = g.num_nodes
    known = set((train[:, 0] * len(names) + train[:, 1]) * n + train[:, 2])

    def without_inverse(t: np.ndarray) -> np.ndarray:
        r = inv[t[:, 1]]
        keys = (t[:, 2] * len(names) + r) * n + t[:, 0]
        return t[~((r >= 0) & np.isin(keys, np.fromiter(known, dtype=np.int64)))]

    seen = np.zeros(n, dtype=bool)
    seen[train[:, [0, 2]].reshape(-1)] = True  # an entity only valid or test name has no trained row

    def known_entities(t: np.ndarray) -> np.ndarray:
        return t[seen[t[:, 0]] & seen[t[:, 2]]]

    valid, test = known_entities(without_inverse(valid)), known_entities(without_inverse(test))
    ids = g.node_ids.astype(str)
    files = {}
    for split, t in (("train", train), ("valid", valid), ("test", test)):
        lines = (f"{ids[h]}\t{names[r]}\t{ids[tt]}" for h, r, tt in t.tolist())
        files[split] = work / f"wordnet-{split}.tsv"
        files[split].write_text("\n".join(lines) + "\n")
    print(
        f"[bench] wordnet triples: train {len(train):,}, valid {len(valid):,}, test {len(test):,} (after "
        f"dropping inverse duplicates), {len(names)} relations",
        flush=True,
    )
    section = {
        "triples": {"path": str(files["train"]), "valid": str(files["valid"]), "test": str(files["test"])},
        "typed": True,
        "reverseEdges": True,
    }
    return section, {
        "train": train,
        "valid": valid,
        "test": test,
        "num_entities": n,
        "num_relations": len(names),
    }


def export(kg: dict[str, np.ndarray], path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """The knowledge graph's training triples for DGL, and the evaluation sample graphtrain ranks (the
    split and the seed of the spec's), with every known triple for the filter."""
    from graphtrain.runtime.train.kge import eval_sample

    np.savez(path, train=kg["train"], num_entities=kg["num_entities"], num_relations=kg["num_relations"])
    return {
        "test": eval_sample(kg["test"], seed),
        "known": np.concatenate([kg["train"], kg["valid"], kg["test"]]),
        "num_entities": np.asarray(kg["num_entities"]),
        "num_relations": np.asarray(kg["num_relations"]),
    }


def bundled(name: str) -> tuple[dict, dict[str, np.ndarray]]:
    """A bundled knowledge graph: the spec's graph section and its split as graphtrain loads it."""
    from graphtrain.runtime.data import datasets

    kg = datasets.load(name)
    arrays = {"train": kg.train, "valid": kg.valid, "test": kg.test}
    return {"dataset": name, "typed": True, "reverseEdges": True}, {
        **arrays,
        "num_entities": kg.num_entities,
        "num_relations": kg.num_relations,
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
    ap.add_argument("--dataset", default="gene-kg", help="gene-kg, nations, kinships, umls or wordnet")
    ap.add_argument("--skip", default="", help="comma-separated: dgl, kge, graphtrain, leak")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="training.seed (and DGL's; it draws the test sample)")
    ap.add_argument("--layouts", default="standalone,2x2", help="graphtrain's: standalone, 2x2")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    work = Path(tempfile.mkdtemp(prefix="graphtrain-link-"))
    section, kg = wordnet_kg(work) if a.dataset == "wordnet" else bundled(a.dataset)
    rows: list[list[str]] = []
    base = {"graph": section, "training.checkpointInterval": 10**9, "training.epochs": a.epochs}
    base["training.seed"] = a.seed
    lp = spec(EXAMPLE, **base)
    lp["metadata"]["name"] = f"{a.dataset}-rgcn-lp"
    if "graphtrain" not in skip:
        for mode, standalone in (("standalone", True), ("2x2", False)):
            if mode not in a.layouts.split(","):
                continue
            t0 = time.perf_counter()
            result = graphtrain_run(lp, work, standalone)
            wall = time.perf_counter() - t0
            rate = graphtrain_run(lp, work, standalone, measure=True)["samples_per_second"]
            rows.append(
                ["R-GCN + DistMult (graphtrain)", mode, *_metrics(result), f"{rate:,.0f}", f"{wall:.0f}"]
            )
            print(f"[bench] {rows[-1]}", flush=True)
    if "leak" not in skip:  # the same training with the target edges left in the graph its encoder reads
        leaky = spec(EXAMPLE, **base, **{"task.exclude": "none"})
        leaky["metadata"]["name"] = f"{a.dataset}-rgcn-lp-none"
        result = graphtrain_run(leaky, work, False)
        rows.append(["R-GCN + DistMult, exclude none", "2x2", *_metrics(result), "-", "-"])
        print(f"[bench] {rows[-1]}", flush=True)
    if "kge" not in skip:
        for kind in ("transe", "distmult"):
            doc = spec(
                "gene-kg-transe.yaml", **{**base, "graph": {**section, "typed": False, "reverseEdges": False}}
            )
            doc["spec"]["model"]["kind"] = kind
            if kind != "transe":
                doc["spec"]["model"].pop("norm", None)
            doc["metadata"]["name"] = f"{a.dataset}-{kind}"
            t0 = time.perf_counter()
            result = graphtrain_run(doc, work, False)
            wall = time.perf_counter() - t0
            rate = graphtrain_run(doc, work, False, measure=True)["samples_per_second"]
            rows.append([f"{kind} (graphtrain kge)", "2x2", *_metrics(result), f"{rate:,.0f}", f"{wall:.0f}"])
            print(f"[bench] {rows[-1]}", flush=True)
    if "dgl" not in skip:
        python = venv("dgl", DGL)
        data = export(kg, work / "kg.npz", a.seed)
        t0 = time.perf_counter()
        argv = [str(python), str(ROOT / "bench" / "dgl_link.py"), "--data", str(work / "kg.npz")]
        argv += ["--out", str(work / "dgl-z.npz"), "--threads", str(a.threads), "--seed", str(a.seed)]
        got = run_json(argv)
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
    when = time.strftime("%Y-%m-%d %H:%M")
    where = f"{platform.node()}, {os.cpu_count()} cores, {when}"
    print(f"\n{a.dataset}, {a.epochs} epoch(s), seed {a.seed}, {where}")
    print(table(["model", "layout", "test MRR", "test Hits@10", "triples/s", "wall s"], rows))


def _metrics(result: dict) -> list[str]:
    return [f"{result['test_mrr']:.4f}", f"{result['test_hits@10']:.4f}"]


if __name__ == "__main__":
    main()
