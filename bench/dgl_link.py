"""DGL 2.1 side of bench/link.py: link prediction with an R-GCN encoder and a DistMult decoder on the
knowledge graph link.py exports from graphtrain's loader (the same training triples, the same split),
one JSON line per run; it writes every node's embedding and the relation rows for link.py to rank with
graphtrain's ranking code (so both sides are scored by one implementation).

Runs in bench/e2e.py's DGL venv (torch 2.2.1, dgl 2.1.0). Same settings as examples/gene-kg-rgcn-lp.yaml:
- the graph: each training triple h -> t with its relation, and its reverse t -> h with relation + R
  (graph.reverseEdges' reverse types): 26 edge types, as graphtrain's typed gene-kg has (each of its
  13 relations joins one pair of entity kinds);
- a learnable 64-wide row per entity (dgl.nn.NodeEmbedding, N(0, 0.3^2), SparseAdam lr 0.01);
- 2 RelGraphConv layers of width 64 (basis, 4 bases, self-loop), ReLU between, no dropout, each
  relation's messages averaged per destination (graphtrain's R-GCN normalisation), dense Adam lr 0.01;
- DGL's edge prediction sampler: NeighborSampler fan-outs [5, 5], exclude="reverse_id" (a batch's
  target edges and their reverses leave its blocks), batches of 1024 targets;
- joint negatives (graphtrain's task.sampler joint): 32 tails per chunk of 256 targets, shared;
- DistMult decoder (a diagonal per relation, N(0, 1/64)), softmax cross-entropy of each target
  against its negatives, a negative equal to its own tail left out.
Triples/s counts training steps after the first 20 (of an epoch of more than 40); the embeddings are
computed layer by layer with every neighbour (each layer over every node once).
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
    from dgl.dataloading import negative_sampler
    from dgl.nn import RelGraphConv

    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    dgl.seed(a.seed)  # its samplers draw from their own generator
    torch.set_num_threads(a.threads)
    z = np.load(a.data)
    train = torch.from_numpy(z["train"]).long()
    n, num_rel = int(z["num_entities"]), int(z["num_relations"])
    e = len(train)
    src = torch.cat([train[:, 0], train[:, 2]])
    dst = torch.cat([train[:, 2], train[:, 0]])
    etype_all = torch.cat([train[:, 1], train[:, 1] + num_rel])
    g = dgl.graph((src, dst), num_nodes=n)
    reverse = torch.cat([torch.arange(e, 2 * e), torch.arange(0, e)])
    emb = dgl.nn.NodeEmbedding(n, a.dim, "entity", init_func=lambda t: nn.init.normal_(t, std=0.3))
    sparse = dgl.optim.SparseAdam([emb], lr=0.01)

    def norm_of(block):
        et = etype_all[block.edata[dgl.EID]]
        key = et * block.num_dst_nodes() + block.edges()[1]
        _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
        return et, (1.0 / counts[inverse].float()).unsqueeze(1)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kw = {"regularizer": "basis", "num_bases": 4, "self_loop": True}
            self.layers = nn.ModuleList([RelGraphConv(a.dim, a.dim, 2 * num_rel, **kw) for _ in range(2)])

        def layer(self, i, block, h):
            et, nm = norm_of(block)
            out = self.layers[i](block, h, et, nm)
            return torch.relu(out) if i == 0 else out

        def forward(self, blocks, h):
            for i, block in enumerate(blocks):
                h = self.layer(i, block, h)
            return h

    class Joint(negative_sampler._BaseNegativeSampler):
        """Joint negatives: `k` tails drawn per chunk of `chunk` targets, shared by the chunk."""

        def _generate(self, graph, eids, canonical_etype):
            heads, _ = graph.find_edges(eids, etype=canonical_etype)
            count = len(eids)
            draws = torch.randint(n, (-(-count // a.chunk), a.negatives))
            tails = draws.repeat_interleave(a.chunk, 0)[:count].reshape(-1)
            return heads.repeat_interleave(a.negatives), tails

    encoder = Encoder()
    rel = nn.Parameter(torch.randn(num_rel, a.dim) * a.dim**-0.5)
    dense = torch.optim.Adam([*encoder.parameters(), rel], lr=0.01)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler([5, 5]),
        exclude="reverse_id",
        reverse_eids=reverse,
        negative_sampler=Joint(),
    )
    loader = dgl.dataloading.DataLoader(
        g, torch.arange(e), sampler, batch_size=a.batch, shuffle=True, drop_last=False
    )
    warm = 20 if len(loader) > 40 else 0  # steps before the clock starts
    steps, t0, timed = 0, time.perf_counter(), 0
    for input_nodes, pair, neg_pair, blocks in loader:
        if steps == warm:
            t0, timed = time.perf_counter(), 0
        h = encoder(blocks, emb(input_nodes))
        eids = pair.edata[dgl.EID]
        r = rel[etype_all[eids]]
        ps, pd = pair.edges()
        pos = (h[ps] * r * h[pd]).sum(1)
        ns, nd = neg_pair.edges()
        neg = (h[ns] * r.repeat_interleave(a.negatives, 0) * h[nd]).sum(1).view(-1, a.negatives)
        own = pair.ndata[dgl.NID][nd].view(-1, a.negatives) == pair.ndata[dgl.NID][pd].unsqueeze(1)
        neg = neg.masked_fill(own, float("-inf"))
        logits = torch.cat([pos.unsqueeze(1), neg], 1)
        loss = functional.cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long))
        dense.zero_grad()
        sparse.zero_grad()
        loss.backward()
        dense.step()
        sparse.step()
        steps += 1
        timed += len(pos)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        h = emb.weight.detach().cpu() if hasattr(emb, "weight") else emb(torch.arange(n))
        full = dgl.dataloading.MultiLayerFullNeighborSampler(1)
        for i in range(2):
            out = torch.empty(n, a.dim)
            for inputs, outputs, blocks in dgl.dataloading.DataLoader(
                g, torch.arange(n), full, batch_size=4096
            ):
                out[outputs] = encoder.layer(i, blocks[0], h[inputs])
            h = out
    np.savez(a.out, z=h.numpy(), rel=rel.detach().numpy())
    return {"triples_per_second": timed / seconds, "steps": steps, "loss": float(loss)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--negatives", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    print(json.dumps(run(ap.parse_args())), flush=True)


if __name__ == "__main__":
    main()
