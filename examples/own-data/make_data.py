"""Write the example inputs of README's "Your own data" into a directory (default: beside this script,
in data/): two graphs a user could have made themselves, in the formats graphtrain reads.

family/   a family-tree knowledge graph with string names: train.tsv, valid.tsv, test.tsv
          (head<TAB>relation<TAB>tail, a header line), relations parent_of, child_of, spouse_of,
          sibling_of, grandparent_of, grandchild_of. Every valid/test entity and relation also
          occurs in train.
sbm/      a 20,000-node stochastic block model (8 communities, features from the community mean plus
          noise), twice: edges.tsv (one line per undirected edge, integer ids) + feat.npy + labels.csv
          (id,label with class names), and graph.npz holding the same graph (both directions, feat,
          label). Some nodes have no edge: the feature file still makes them nodes.

Seeded: the same files every time. Usage: python examples/own-data/make_data.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 0
INSIDE = 0.5  # share of a node's edges that stay in its community
NOISE = 3.0  # feature noise around the community centre: features alone classify ~46 % right


def family(out: Path, families: int = 120, generations: int = 4) -> int:
    """A family tree per family: each generation's couples have 1-3 children who marry into it."""
    rng = np.random.default_rng(SEED)
    triples: set[tuple[str, str, str]] = set()
    first = ["ada", "ben", "cleo", "dan", "eva", "finn", "gia", "hugo", "ines", "jon", "kim", "leo"]
    count = 0

    def person(f: int) -> str:
        nonlocal count
        count += 1
        return f"{first[count % len(first)]}_{f:03d}_{count:05d}"

    for f in range(families):
        couples = [(person(f), person(f))]
        for _ in range(generations - 1):
            nxt = []
            for a, b in couples:
                triples |= {(a, "spouse_of", b), (b, "spouse_of", a)}
                kids = [person(f) for _ in range(int(rng.integers(1, 4)))]
                for k in kids:
                    for p in (a, b):
                        triples |= {(p, "parent_of", k), (k, "child_of", p)}
                for k in kids:
                    for s in kids:
                        if k != s:
                            triples.add((k, "sibling_of", s))
                nxt += [(k, person(f)) for k in kids]
            couples = nxt
    parents: dict[str, list[str]] = {}
    for h, r, t in triples:
        if r == "parent_of":
            parents.setdefault(t, []).append(h)
    for child, ps in parents.items():
        for p in ps:
            for gp in parents.get(p, []):
                triples |= {(gp, "grandparent_of", child), (child, "grandchild_of", gp)}
    rows = sorted(triples)
    order = rng.permutation(len(rows))
    n_valid = n_test = len(rows) // 10
    train = [rows[i] for i in order[n_valid + n_test :]]
    seen = {e for h, _, t in train for e in (h, t)} | {r for _, r, _ in train}
    held = [rows[i] for i in order[: n_valid + n_test]]
    held = [x for x in held if x[0] in seen and x[1] in seen and x[2] in seen]  # as PyKEEN's splits
    splits = {"train": train, "valid": held[: len(held) // 2], "test": held[len(held) // 2 :]}
    (out / "family").mkdir(parents=True, exist_ok=True)
    for name, split in splits.items():
        lines = ["head\trelation\ttail"] + ["\t".join(t) for t in split]
        (out / "family" / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    return len(rows)


def sbm(out: Path, n: int = 20_000, k: int = 8, dim: int = 16, degree: float = 8.0) -> int:
    """Communities of equal expected size; a node's edges stay inside its community with probability
    INSIDE; features = community centre + noise, so features alone classify only part of the nodes."""
    rng = np.random.default_rng(SEED)
    label = rng.integers(0, k, n)
    m = int(n * degree / 2)
    src = rng.integers(0, n, m)
    inside = rng.random(m) < INSIDE
    members = [np.flatnonzero(label == c) for c in range(k)]
    dst = rng.integers(0, n, m)
    for c in range(k):
        pick = inside & (label[src] == c)
        dst[pick] = rng.choice(members[c], int(pick.sum()))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pairs = np.unique(np.stack([lo, hi], 1), axis=0)
    # the last nodes of the id range keep no edge: isolated nodes a feature file still declares
    pairs = pairs[(pairs < n - 5).all(axis=1)]
    centres = rng.normal(0, 1, (k, dim))
    feat = (centres[label] + rng.normal(0, NOISE, (n, dim))).astype(np.float32)
    d = out / "sbm"
    d.mkdir(parents=True, exist_ok=True)
    np.savetxt(d / "edges.tsv", pairs, fmt="%d", delimiter="\t", header="src\tdst", comments="")
    np.save(d / "feat.npy", feat)
    names = np.array([f"community_{c}" for c in range(k)])
    with open(d / "labels.csv", "w") as f:
        f.write("id,label\n")
        f.writelines(f"{i},{names[c]}\n" for i, c in enumerate(label))
    both_src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    both_dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    np.savez(d / "graph.npz", src=both_src, dst=both_dst, num_nodes=np.int64(n), feat=feat, label=label)
    return len(pairs)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "data"
    triples = family(out)
    edges = sbm(out)
    print(f"{out / 'family'}: {triples:,} triples; {out / 'sbm'}: 20,000 nodes, {edges:,} edges")


if __name__ == "__main__":
    main()
