"""DGL 2.1 side of bench/e2e.py: the same models on the same inputs, printing one JSON line per run.

Runs in the DGL venv that bench/e2e.py makes (torch 2.2.1, dgl 2.1.0); reads the .npz that e2e.py
exports from graphtrain's loaders, so both sides see identical graphs, features and splits.

  sage: GraphSAGE (SAGEConv mean, 2 layers, hidden 256, dropout 0.5, Adam 0.003) with NeighborSampler
        fan-outs and DataLoader batches as DGL's node-classification example; optionally a learnable
        node embedding (dgl.nn.NodeEmbedding, uniform(-1, 1)) trained by dgl.optim.SparseAdam or
        SparseAdagrad. Seeds/s counts training steps only; accuracy uses every neighbour.
  transe: TransE with entity and relation NodeEmbeddings and dgl.optim.SparseAdam, negatives as in
        graphtrain's trainer; triples/s over the timed steps.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional


def sage(a: argparse.Namespace) -> dict:
    import dgl
    from dgl.nn import SAGEConv

    z = np.load(a.data)
    g = dgl.graph((torch.from_numpy(z["src"]), torch.from_numpy(z["dst"])), num_nodes=int(z["num_nodes"]))
    feat = torch.from_numpy(z["feat"]) if a.features else None
    label = torch.from_numpy(z["label"]).long()
    train_ids, test_ids = (torch.from_numpy(np.flatnonzero(z[f"{s}_mask"])) for s in ("train", "test"))
    n_classes = int(label.max()) + 1
    emb = None
    if a.embedding:
        emb = dgl.nn.NodeEmbedding(
            g.num_nodes(), a.embedding, "node", init_func=lambda t: nn.init.uniform_(t, -1.0, 1.0)
        )
        sparse = (dgl.optim.SparseAdam if a.sparse == "adam" else dgl.optim.SparseAdagrad)(
            [emb], lr=a.sparse_lr
        )
    in_dim = (feat.shape[1] if feat is not None else 0) + (a.embedding or 0)

    class SAGE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([SAGEConv(in_dim, 256, "mean"), SAGEConv(256, n_classes, "mean")])
            self.dropout = nn.Dropout(0.5)

        def forward(self, blocks, h):
            for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
                h = layer(block, h)
                if i != len(self.layers) - 1:
                    h = self.dropout(functional.relu(h))
            return h

    def inputs(nodes):
        parts = []
        if feat is not None:
            parts.append(feat[nodes])
        if emb is not None:
            parts.append(emb(nodes))
        return torch.cat(parts, 1) if len(parts) > 1 else parts[0]

    model = SAGE()
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    sampler = dgl.dataloading.NeighborSampler(a.fanouts)
    loader = dgl.dataloading.DataLoader(
        g, train_ids, sampler, batch_size=a.batch_size, shuffle=True, drop_last=False
    )
    seconds, seeds = 0.0, 0
    for epoch in range(a.epochs):
        start = time.perf_counter()
        for input_nodes, output_nodes, blocks in loader:
            loss = functional.cross_entropy(model(blocks, inputs(input_nodes)), label[output_nodes])
            opt.zero_grad()
            if emb is not None:
                sparse.zero_grad()
            loss.backward()
            opt.step()
            if emb is not None:
                sparse.step()
            seeds += len(output_nodes)
        if epoch >= 1 or a.epochs == 1:  # the first epoch warms up
            seconds += time.perf_counter() - start
        else:
            seeds = 0
    model.eval()
    full = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    correct = 0
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in dgl.dataloading.DataLoader(
            g, test_ids, full, batch_size=4096
        ):
            correct += int((model(blocks, inputs(input_nodes)).argmax(1) == label[output_nodes]).sum())
    return {"seeds_per_second": seeds / max(seconds, 1e-9), "test_accuracy": correct / len(test_ids)}


def transe(a: argparse.Namespace) -> dict:
    import dgl

    z = np.load(a.data)
    triples = torch.from_numpy(z["train"])
    n_ent, n_rel = int(z["num_entities"]), int(z["num_relations"])
    ent = dgl.nn.NodeEmbedding(n_ent, a.dim, "entity", init_func=lambda t: nn.init.uniform_(t, -1.0, 1.0))
    rel = dgl.nn.NodeEmbedding(n_rel, a.dim, "relation", init_func=lambda t: nn.init.uniform_(t, -1.0, 1.0))
    opt = dgl.optim.SparseAdam([ent, rel], lr=a.sparse_lr)
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(len(triples), generator=gen)
    k, b = a.negatives, a.batch_size
    seconds, done = 0.0, 0
    for step in range(a.steps + 5):
        start = time.perf_counter()
        pos = triples[order[step * b : (step + 1) * b]]
        neg = pos.repeat_interleave(k, 0)
        half = (len(neg) + 1) // 2
        neg[:half, 0] = torch.randint(n_ent, (half,), generator=gen)
        neg[half:, 2] = torch.randint(n_ent, (len(neg) - half,), generator=gen)
        h, r, t = ent(pos[:, 0]), rel(pos[:, 1]), ent(pos[:, 2])
        nh, nt = ent(neg[:, 0]).view(b, k, -1), ent(neg[:, 2]).view(b, k, -1)
        ps = -(functional.normalize(h, dim=-1) + r - functional.normalize(t, dim=-1)).norm(p=1, dim=-1)
        ns = -(functional.normalize(nh, dim=-1) + r.unsqueeze(1) - functional.normalize(nt, dim=-1)).norm(
            p=1, dim=-1
        )
        loss = functional.cross_entropy(torch.cat([ps.unsqueeze(1), ns], 1), torch.zeros(b, dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 5:  # warm-up steps are not timed
            seconds += time.perf_counter() - start
            done += b
    return {"triples_per_second": done / max(seconds, 1e-9)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["sage", "transe"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[10, 25])
    ap.add_argument("--features", action="store_true")
    ap.add_argument("--embedding", type=int, default=0)
    ap.add_argument("--sparse", choices=["adam", "adagrad"], default="adam")
    ap.add_argument("--sparse-lr", type=float, default=0.003)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--negatives", type=int, default=32)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    import dgl

    dgl.seed(a.seed)  # its samplers draw from their own generator
    out = sage(a) if a.mode == "sage" else transe(a)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
