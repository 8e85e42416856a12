"""PyKEEN 1.11 side of bench/e2e.py: train one KGE setting, print its filtered metrics as one JSON line.

Runs in the PyKEEN venv that bench/e2e.py makes (never imported by graphtrain). The settings mirror
graphtrain's KGE trainer: entities on the unit sphere (PyKEEN's default constrainer for TransE and
DistMult), free rows for ComplEx and RotatE (their embedding_dim is half of --dim: a complex number
per two of graphtrain's row), no regulariser, sLCWA with the basic negative sampler, Adam, filtered
realistic ranks.
"""

from __future__ import annotations

import argparse
import json
import time

NAMES = {"transe": "TransE", "distmult": "DistMult", "complex": "ComplEx", "rotate": "RotatE"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", required=True, choices=sorted(NAMES))
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--negatives", type=int, required=True)
    ap.add_argument("--loss", required=True)
    ap.add_argument("--margin", type=float, default=1.0)
    ap.add_argument("--norm", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch
    from pykeen.pipeline import pipeline

    torch.set_num_threads(a.threads)
    complex_rows = a.model in ("complex", "rotate")
    model_kwargs: dict = {"embedding_dim": a.dim // 2 if complex_rows else a.dim}
    if a.model == "transe":
        model_kwargs["scoring_fct_norm"] = a.norm
    else:
        model_kwargs["regularizer"] = None
    loss_kwargs = {"margin": a.margin} if a.loss == "marginranking" else {}
    start = time.perf_counter()
    result = pipeline(
        dataset=a.dataset,
        model=NAMES[a.model],
        model_kwargs=model_kwargs,
        loss=a.loss,
        loss_kwargs=loss_kwargs,
        training_loop="sLCWA",
        negative_sampler="basic",
        negative_sampler_kwargs={"num_negs_per_pos": a.negatives},
        optimizer="Adam",
        optimizer_kwargs={"lr": a.lr, "eps": a.eps},
        training_kwargs={"num_epochs": a.epochs, "batch_size": a.batch_size, "use_tqdm": False},
        evaluator_kwargs={"filtered": True},
        evaluation_kwargs={"use_tqdm": False},
        random_seed=a.seed,
        device="cpu",
    )
    seconds = time.perf_counter() - start
    m = result.metric_results
    out = {
        "test_mrr": m.get_metric("both.realistic.inverse_harmonic_mean_rank"),
        "test_hits@1": m.get_metric("both.realistic.hits_at_1"),
        "test_hits@3": m.get_metric("both.realistic.hits_at_3"),
        "test_hits@10": m.get_metric("both.realistic.hits_at_10"),
        "train_seconds": result.train_seconds,
        "seconds": seconds,
        "num_train": result.training.num_triples,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
