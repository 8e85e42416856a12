"""DGL 2.1 side of bench/typed.py: R-GCN and GAT on the typed WordNet graph that typed.py exports from
graphtrain's loader, one JSON line per run.

Runs in bench/e2e.py's DGL venv (torch 2.2.1, dgl 2.1.0). Same settings as graphtrain's runs: the
homogeneous graph with each edge's canonical type id (DGL's RelGraphConv takes etypes so), 256-dim
projected gloss features beside a 128-dim learnable node embedding (dgl.nn.NodeEmbedding, SparseAdam,
lr 0.003), 2 layers of width 256, dropout 0.5, dense Adam 0.003, NeighborSampler fan-outs [10, 25]
(in-edges of any type, as graphtrain's one-number fan-outs), global batch 1024.

  rgcn: RelGraphConv (basis regularizer, numBases bases, self-loop, bias), the messages normalised per
        (destination, relation) as graphtrain's R-GCN (the norm each block's edges get: 1 / the count of
        their destination's sampled in-edges of their type), ReLU and dropout between layers.
  gat:  GATConv (heads, width 256 / heads, residual, zero in-degree allowed), heads concatenated with ELU
        and dropout between layers, averaged at the output.
Samples/s counts training steps after the first epoch; test accuracy uses every neighbour.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional


def run(a: argparse.Namespace) -> dict:
    import dgl
    from dgl.nn import GATConv, RelGraphConv

    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    dgl.seed(a.seed)  # its samplers draw from their own generator
    z = np.load(a.data)
    g = dgl.graph((torch.from_numpy(z["src"]), torch.from_numpy(z["dst"])), num_nodes=int(z["num_nodes"]))
    etype_all = torch.from_numpy(z["etype"]).long()
    num_rels = int(z["num_rels"])
    feat = torch.from_numpy(z["feat"])
    label = torch.from_numpy(z["label"]).long()
    train_ids, test_ids = (torch.from_numpy(np.flatnonzero(z[f"{s}_mask"])) for s in ("train", "test"))
    n_classes = int(label.max()) + 1
    emb = dgl.nn.NodeEmbedding(g.num_nodes(), 128, "node", init_func=lambda t: nn.init.uniform_(t, -1.0, 1.0))
    sparse = dgl.optim.SparseAdam([emb], lr=0.003)
    in_dim = feat.shape[1] + 128

    def block_types(block):
        et = etype_all[block.edata[dgl.EID]]
        dst = block.edges()[1]
        key = et * block.num_dst_nodes() + dst
        _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
        return et, (1.0 / counts[inverse].float()).unsqueeze(1)

    class RGCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kw = {"regularizer": "basis", "num_bases": a.bases, "self_loop": True}
            self.layers = nn.ModuleList(
                [RelGraphConv(in_dim, 256, num_rels, **kw), RelGraphConv(256, n_classes, num_rels, **kw)]
            )

        def forward(self, blocks, h):
            for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
                et, norm = block_types(block)
                h = layer(block, h, et, norm)
                if i != len(self.layers) - 1:
                    h = functional.dropout(functional.relu(h), 0.5, self.training)
            return h

    class GAT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kw = {"residual": True, "allow_zero_in_degree": True}
            self.layers = nn.ModuleList(
                [
                    GATConv(in_dim, 256 // a.heads, a.heads, **kw),
                    GATConv(256, n_classes, a.heads, **kw),
                ]
            )

        def forward(self, blocks, h):
            for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
                out = layer(block, h)
                if i == len(self.layers) - 1:
                    return out.mean(1)
                h = functional.dropout(functional.elu(out.flatten(1)), 0.5, self.training)
            return h

    model = RGCN() if a.model == "rgcn" else GAT()
    opt = torch.optim.Adam(model.parameters(), lr=0.003)

    def inputs(nodes):
        return torch.cat([feat[nodes], emb(nodes)], 1)

    sampler = dgl.dataloading.NeighborSampler(a.fanouts)
    loader = dgl.dataloading.DataLoader(g, train_ids, sampler, batch_size=a.batch_size, shuffle=True)
    seconds, seeds = 0.0, 0
    for epoch in range(a.epochs):
        start = time.perf_counter()
        for input_nodes, output_nodes, blocks in loader:
            loss = functional.cross_entropy(model(blocks, inputs(input_nodes)), label[output_nodes])
            opt.zero_grad()
            sparse.zero_grad()
            loss.backward()
            opt.step()
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", choices=["rgcn", "gat"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[10, 25])
    ap.add_argument("--bases", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(json.dumps(run(a)))


if __name__ == "__main__":
    main()
