"""PyKEEN side of bench/kge_replay.py: TransE trained by hand for --steps sLCWA steps in float64 (PyKEEN
1.11's model, BasicNegativeSampler, CrossEntropyLoss, torch.optim.Adam and post_parameter_update), its
initial rows, every batch, its negatives, its loss and the rows after each of the first steps written to
an .npz (arrays only). Runs in the PyKEEN venv that bench/e2e.py makes; never imported by graphtrain."""

from __future__ import annotations

import argparse

SNAPSHOTS = 3  # the rows after each of the first steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="kinships")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--negatives", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import numpy as np
    import torch
    from pykeen.datasets import get_dataset
    from pykeen.losses import CrossEntropyLoss
    from pykeen.models import TransE
    from pykeen.sampling import BasicNegativeSampler
    from pykeen.utils import set_random_seed

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    set_random_seed(a.seed)
    tf = get_dataset(dataset=a.dataset).training
    model = TransE(
        triples_factory=tf,
        embedding_dim=a.dim,
        scoring_fct_norm=1,
        loss=CrossEntropyLoss(),
        random_seed=a.seed,
    )
    ent = model.entity_representations[0]._embeddings.weight
    rel = model.relation_representations[0]._embeddings.weight
    out = {"E0": ent.detach().clone().numpy(), "R0": rel.detach().clone().numpy()}
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-8)
    sampler = BasicNegativeSampler(mapped_triples=tf.mapped_triples, num_negs_per_pos=a.negatives)
    gen = torch.Generator().manual_seed(a.seed)
    triples, b = tf.mapped_triples, a.batch_size
    batches, negs, losses = [], [], []
    order, at = torch.randperm(len(triples), generator=gen), 0
    for step in range(a.steps):
        if at + b > len(triples):
            order, at = torch.randperm(len(triples), generator=gen), 0
        pos = triples[order[at : at + b]]
        at += b
        neg, _ = sampler.sample(pos)
        opt.zero_grad()
        scores = model.score_hrt(pos), model.score_hrt(neg.view(-1, 3)).view(b, -1)
        loss = model.loss.process_slcwa_scores(positive_scores=scores[0], negative_scores=scores[1])
        loss = loss + model.collect_regularization_term()
        loss.backward()
        opt.step()
        model.post_parameter_update()
        if step < SNAPSHOTS:
            out[f"E{step + 1}"], out[f"R{step + 1}"] = (
                ent.detach().clone().numpy(),
                rel.detach().clone().numpy(),
            )
        batches.append(pos.numpy())
        negs.append(neg.numpy())
        losses.append(float(loss.detach()))
    np.savez(a.out, batches=np.stack(batches), negs=np.stack(negs), losses=np.array(losses), **out)


if __name__ == "__main__":
    main()
