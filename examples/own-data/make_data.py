"""Write the example inputs of README's "Your own data" into a directory (default: beside this script,
in data/): two graphs a user could have made themselves, in the formats graphtrain reads.

family/   a family-tree knowledge graph with string names: train.tsv, valid.tsv, test.tsv
          (head<TAB>relation<TAB>tail, a header line), relations parent_of, child_of, spouse_of,
          sibling_of, grandparent_of, grandchild_of. Every valid/test entity and relation also
          occurs in train.
shop/     a typed graph: users, items and shops (users.csv, items.csv, shops.parquet with a string id and
          features), edges item -rated-> user with a rating and a noise column (rated.csv), and item
          -sold_by-> shop (sold_by.csv). A user's label ("likes" or "dislikes") depends only on the
          ratings of the items it rated: features and neighbours alone say nothing about it.
trade/    a typed graph for edge classification: customers and products (customers.csv, products.csv,
          features from a hidden category of 3 plus noise), edges customer -bought-> product with a
          quantity (noise) and a label, "low", "mid" or "high" = (customer's category + product's
          category) mod 3: it depends on both ends, and neither end alone tells it; and a score, the same
          level as a number plus noise (bought.csv).
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


def shop(out: Path, users: int = 3000, items: int = 600, shops: int = 40, rated: int = 4) -> int:
    """A typed graph whose user labels only an edge feature tells: each user rates `rated` items (edge
    features rating ~ N(0, 1) and noise ~ N(0, 1)), and likes them when its ratings' mean is positive.
    Every node's features are noise; items are sold by shops (ids as strings, in a parquet file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(SEED)
    d = out / "shop"
    d.mkdir(parents=True, exist_ok=True)
    dst = np.repeat(np.arange(users), rated)
    src = rng.integers(0, items, len(dst))
    rating = rng.normal(0, 1, len(dst))
    noise = rng.normal(0, 1, len(dst))
    likes = np.bincount(dst, weights=rating, minlength=users) > 0
    with open(d / "users.csv", "w") as f:
        f.write("user_id,age,score,label\n")
        for u in range(users):
            a, b = rng.normal(0, 1, 2)
            f.write(f"u{u},{a:.4f},{b:.4f},{'likes' if likes[u] else 'dislikes'}\n")
    with open(d / "items.csv", "w") as f:
        f.write("item_id,price,weight\n")
        f.writelines(f"i{i},{rng.normal():.4f},{rng.normal():.4f}\n" for i in range(items))
    pq.write_table(
        pa.table(
            {
                "shop_id": [f"shop-{s}" for s in range(shops)],
                "size": rng.normal(0, 1, shops).astype(np.float32),
            }
        ),
        d / "shops.parquet",
    )
    with open(d / "rated.csv", "w") as f:
        f.write("item,user,rating,noise\n")
        f.writelines(
            f"i{i},u{u},{r:.4f},{z:.4f}\n" for i, u, r, z in zip(src, dst, rating, noise, strict=True)
        )
    with open(d / "sold_by.csv", "w") as f:
        f.write("item,shop\n")
        f.writelines(f"i{i},shop-{rng.integers(0, shops)}\n" for i in range(items))
    return len(dst) + items


def trade(out: Path, customers: int = 2000, products: int = 400, bought: int = 6) -> int:
    """A typed graph whose edge labels depend on both ends: every node has a hidden category of 3, its
    features the category's one-hot plus noise (and three columns of noise); each customer buys
    `bought` products, and each purchase is labelled by (customer's category + product's category) mod
    3, which is uniform given either end alone."""
    rng = np.random.default_rng(SEED + 1)
    d = out / "trade"
    d.mkdir(parents=True, exist_ok=True)
    c_cat, p_cat = rng.integers(0, 3, customers), rng.integers(0, 3, products)
    for name, cats, prefix in (("customers", c_cat, "c"), ("products", p_cat, "p")):
        feat = np.eye(3)[cats] + rng.normal(0, 0.3, (len(cats), 3))
        feat = np.concatenate([feat, rng.normal(0, 1, (len(cats), 3))], 1)
        with open(d / f"{name}.csv", "w") as f:
            f.write(f"{name[:-1]}_id," + ",".join(f"f{j}" for j in range(6)) + "\n")
            f.writelines(
                f"{prefix}{i}," + ",".join(f"{v:.4f}" for v in row) + "\n" for i, row in enumerate(feat)
            )
    src = np.repeat(np.arange(customers), bought)
    dst = rng.integers(0, products, len(src))
    names = np.array(["low", "mid", "high"])
    level = (c_cat[src] + p_cat[dst]) % 3
    qty = rng.integers(1, 5, len(src))
    score = level + rng.normal(0, 0.1, len(src))  # the same, as a noisy number (task edgeRegression)
    with open(d / "bought.csv", "w") as f:
        f.write("customer,product,qty,outcome,score\n")
        f.writelines(
            f"c{c},p{q},{n},{y},{v:.3f}\n"
            for c, q, n, y, v in zip(src, dst, qty, names[level], score, strict=True)
        )
    return len(src)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "data"
    triples = family(out)
    edges = sbm(out)
    typed_edges = shop(out)
    purchases = trade(out)
    print(
        f"{out / 'family'}: {triples:,} triples; {out / 'sbm'}: 20,000 nodes, {edges:,} edges; "
        f"{out / 'shop'}: 3,640 nodes of 3 types, {typed_edges:,} edges; "
        f"{out / 'trade'}: 2,400 nodes of 2 types, {purchases:,} labelled edges"
    )


if __name__ == "__main__":
    main()
