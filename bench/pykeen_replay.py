"""PyKEEN side of bench/kge_replay.py: one KGE model trained by hand in float64 (PyKEEN 1.11's model,
BasicNegativeSampler, CrossEntropyLoss, torch.optim.Adam and post_parameter_update), as its sLCWA loop
does: a fresh permutation each epoch, batches in its order, the last one partial. It writes its initial
rows, every batch, its negatives, its loss and the rows after each of the first steps to an .npz (arrays
only), and with --epochs the final rows, the id-mapped train/valid/test triples and PyKEEN's own
filtered test MRR of the trained model (RankBasedEvaluator, realistic ranks, both sides). Complex rows
are written in graphtrain's layout (real parts, then imaginary). Runs in the PyKEEN venv that
bench/e2e.py makes; never imported by graphtrain."""

from __future__ import annotations

import argparse

SNAPSHOTS = 3  # the rows after each of the first steps
NAMES = {"transe": "TransE", "distmult": "DistMult", "complex": "ComplEx"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="kinships")
    ap.add_argument("--model", default="transe", choices=sorted(NAMES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=0, help="whole epochs instead of --steps, then evaluate")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--negatives", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import numpy as np
    import pykeen.models
    import torch
    from pykeen.datasets import get_dataset
    from pykeen.evaluation import RankBasedEvaluator
    from pykeen.losses import CrossEntropyLoss
    from pykeen.sampling import BasicNegativeSampler
    from pykeen.utils import set_random_seed

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    set_random_seed(a.seed)
    ds = get_dataset(dataset=a.dataset)
    tf = ds.training
    complex_rows = a.model == "complex"
    kwargs: dict = {"embedding_dim": a.dim // 2 if complex_rows else a.dim}
    if a.model == "transe":
        kwargs["scoring_fct_norm"] = 1
    else:
        kwargs["regularizer"] = None
    model = getattr(pykeen.models, NAMES[a.model])(
        triples_factory=tf, loss=CrossEntropyLoss(), random_seed=a.seed, **kwargs
    )
    model.double()  # ComplEx's rows are made float32 (complex64) whatever the default dtype
    ent = model.entity_representations[0]._embeddings.weight
    rel = model.relation_representations[0]._embeddings.weight

    def rows(w: torch.Tensor) -> np.ndarray:
        """graphtrain's layout: PyKEEN keeps a complex row as (re, im) pairs."""
        w = w.detach().clone()
        if complex_rows:
            w = w.view(len(w), -1, 2).transpose(1, 2).reshape(len(w), -1)
        return w.numpy()

    out = {"E0": rows(ent), "R0": rows(rel)}
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-8)
    sampler = BasicNegativeSampler(mapped_triples=tf.mapped_triples, num_negs_per_pos=a.negatives)
    gen = torch.Generator().manual_seed(a.seed)
    triples, b = tf.mapped_triples, a.batch_size
    per_epoch = -(-len(triples) // b)
    steps = a.epochs * per_epoch if a.epochs else a.steps
    batches, negs, losses = [], [], []
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(triples), generator=gen)
        i = step % per_epoch
        pos = triples[order[i * b : (i + 1) * b]]
        neg, _ = sampler.sample(pos)
        opt.zero_grad()
        scores = model.score_hrt(pos), model.score_hrt(neg.view(-1, 3)).view(len(pos), -1)
        loss = model.loss.process_slcwa_scores(positive_scores=scores[0], negative_scores=scores[1])
        loss = loss + model.collect_regularization_term()
        loss.backward()
        opt.step()
        model.post_parameter_update()
        if step < SNAPSHOTS:
            out[f"E{step + 1}"], out[f"R{step + 1}"] = rows(ent), rows(rel)
        batches.append(pos.numpy())
        negs.append(neg.numpy())
        losses.append(float(loss.detach()))
    # batches of unequal length (the last of an epoch is partial): stored flat with their lengths
    out["batch_len"] = np.array([len(p) for p in batches])
    out["batches"], out["negs"] = np.concatenate(batches), np.concatenate(negs)
    out["losses"] = np.array(losses)
    if a.epochs:
        out["E_end"], out["R_end"] = rows(ent), rows(rel)
        for name, split in (("train", ds.training), ("valid", ds.validation), ("test", ds.testing)):
            out[name] = split.mapped_triples.numpy()
        model.eval()
        result = RankBasedEvaluator(filtered=True).evaluate(
            model,
            ds.testing.mapped_triples,
            additional_filter_triples=[ds.training.mapped_triples, ds.validation.mapped_triples],
            use_tqdm=False,
            batch_size=256,
        )
        out["pykeen_mrr"] = np.array(result.get_metric("both.realistic.inverse_harmonic_mean_rank"))
    np.savez(a.out, **out)


if __name__ == "__main__":
    main()
